"""A tiny text classifier built on ``torch.nn.MultiheadAttention``, the layer kind PEFT's LoRA adapts as a whole
(``peft.tuners.lora.layer.MultiheadAttention``). No transformers text model is built on it; SigLIP's pooling head
has one, but its image classifier never uses the head's output, so an adapter there would see no gradient.

It is a transformers model (``PreTrainedModel``, registered with the Auto classes under ``mha_classifier``), so the
zoo builds it from a config like every other model and PEFT wraps it as a sequence classifier.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification, PretrainedConfig, PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import SequenceClassifierOutput

MODEL_TYPE = "mha_classifier"


class MhaClassifierConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(
        self,
        vocab_size: int = 256,
        hidden_size: int = 64,
        num_attention_heads: int = 4,
        num_hidden_layers: int = 1,
        intermediate_size: int = 128,
        attention_dropout: float = 0.0,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_hidden_layers = num_hidden_layers
        self.intermediate_size = intermediate_size
        self.attention_dropout = attention_dropout
        super().__init__(**kwargs)


class MhaBlock(GradientCheckpointingLayer):
    """Post-norm encoder block: self-attention through nn.MultiheadAttention, then a two-layer MLP."""

    def __init__(self, config: MhaClassifierConfig):
        super().__init__()
        hidden = config.hidden_size
        self.attn = nn.MultiheadAttention(
            hidden, config.num_attention_heads, dropout=config.attention_dropout, batch_first=True
        )
        self.attn_norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, hidden)
        self.mlp_norm = nn.LayerNorm(hidden)

    def forward(self, hidden: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        attended, _ = self.attn(hidden, hidden, hidden, key_padding_mask=padding, need_weights=False)
        hidden = self.attn_norm(hidden + attended)
        return self.mlp_norm(hidden + self.fc2(nn.functional.gelu(self.fc1(hidden))))


class MhaForSequenceClassification(PreTrainedModel):
    config_class = MhaClassifierConfig
    base_model_prefix = "mha"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True

    def __init__(self, config: MhaClassifierConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.layers = nn.ModuleList(MhaBlock(config) for _ in range(config.num_hidden_layers))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value

    def forward(self, input_ids=None, attention_mask=None, labels=None, inputs_embeds=None, **kwargs):
        hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        padding = None if attention_mask is None else attention_mask == 0
        for layer in self.layers:
            hidden = layer(hidden, padding)
        if attention_mask is None:
            pooled = hidden.mean(dim=1)
        else:
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
        logits = self.classifier(pooled)
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def register() -> None:
    """Make ``mha_classifier`` known to AutoConfig and AutoModelForSequenceClassification (once per process)."""
    try:
        AutoConfig.register(MODEL_TYPE, MhaClassifierConfig)
        AutoModelForSequenceClassification.register(MhaClassifierConfig, MhaForSequenceClassification)
    except ValueError:  # registered already
        pass
