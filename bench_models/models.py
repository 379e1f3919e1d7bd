"""Model architectures and sizes: tiny random-init models for CPU, published configs for the GPU tier.

Every model is built from a config with random weights; nothing is ever downloaded.
"""

from __future__ import annotations

import dataclasses
import json
import platform
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import torch

CONFIG_DIR = Path(__file__).parent / "configs"

# Published config.json keys that are not architecture: the dtype is chosen by build_base_model's `dtype`.
_NOT_CONFIG_KEYS = frozenset({"torch_dtype", "dtype", "transformers_version"})

CAUSAL_LM = "causal-lm"
SEQ_CLS = "seq-cls"
IMAGE_CLS = "image-cls"  # pixel values in, a label out; PEFT wraps it with no task type (a plain PeftModel)


@dataclass(frozen=True)
class ModelSpec:
    key: str
    arch: str  # "llama", "qwen2", "opt", "bert"
    size: str  # "tiny" or the published name
    task: str  # CAUSAL_LM, SEQ_CLS or IMAGE_CLS
    full_size: bool
    # Tiny models: the config kwargs inline. Full-size models: a JSON file in configs/.
    config: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    config_file: str | None = None
    # Module-name suffixes (PEFT `target_modules` style) used by the method builders. `attention_modules` are the
    # layers every method targets by default: the attention projections, or what stands in their place in a model
    # without (a convolutional network's convolutions, nn.MultiheadAttention itself).
    attention_modules: tuple[str, ...] = ()
    mlp_modules: tuple[str, ...] = ()
    embedding_module: str = ""
    head_module: str = ""  # lm_head / classifier, for modules_to_save
    layernorm_modules: tuple[str, ...] = ()
    # Parameter-name suffixes (PEFT `target_parameters` style) of weights kept as nn.Parameter, not in a layer: MoE
    # experts. Empty: the model has none (the lora-parameters method cannot run on it).
    expert_parameters: tuple[str, ...] = ()
    # The PEFT LoRA layer class `attention_modules` get (peft.tuners.lora.layer; GPT-2's Conv1D is Linear with
    # fan_in_fan_out): which LoRA variants can run there, read from that class's `lora_variants`.
    target_kind: str = "Linear"
    # Convolutions with groups > 1 (depthwise), which several methods refuse: the lora-conv-groups method's targets.
    grouped_conv_modules: tuple[str, ...] = ()
    attn_implementation: str = "sdpa"
    # The linear layers quantized after the random init (bench_models/quantized.py): "bnb-nf4", "bnb-fp4", "int8".
    quantization: str = ""
    # False: a model for measurements only (scripts/compare_compile.py, the step benchmarks), in no case of the matrix.
    in_matrix: bool = True

    @property
    def cpu_matrix(self) -> bool:
        """A model of the CPU tier's cases (tiny, random init)."""
        return self.in_matrix and not self.full_size

    def config_dict(self) -> dict[str, Any]:
        """The transformers config kwargs, model_type included (for full-size models: the JSON minus the "_..."
        metadata keys and dtype/version keys), a fresh copy each call."""
        if self.config is not None:
            return json.loads(json.dumps(self.config))
        raw = _load_json(self.config_file)
        return {k: v for k, v in raw.items() if not k.startswith("_") and k not in _NOT_CONFIG_KEYS}

    def published_config(self) -> dict[str, Any]:
        """Full-size models: the JSON file as stored, metadata keys ("_source", "_params_billion") included."""
        if self.config_file is None:
            raise ValueError(f"{self.key} is not a published model")
        return json.loads(json.dumps(_load_json(self.config_file)))

    def hf_config(self):
        from transformers import AutoConfig

        from .mha_model import register

        register()
        kwargs = self.config_dict()
        return AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)

    @property
    def vocab_size(self) -> int:
        return self.config_dict()["vocab_size"]

    @property
    def hidden_size(self) -> int:
        config = self.config_dict()
        return config["hidden_size"] if "hidden_size" in config else config["hidden_sizes"][-1]

    @property
    def image_channels(self) -> int:
        return self.config_dict()["num_channels"]

    @property
    def num_layers(self) -> int:
        return self.config_dict()["num_hidden_layers"]

    @property
    def num_labels(self) -> int:
        return self.config_dict().get("num_labels", 2)


@cache
def _load_json(name: str) -> dict[str, Any]:
    return json.loads((CONFIG_DIR / name).read_text())


# Shared sizes for the tiny tier: hidden 64, 4 heads (head_dim 16), 2 kv heads, vocab 256.
_TINY = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
# One layer shows every break and guard a layer has, and compiles in about half the time of two: with
# graph breaks, Dynamo compiles every frame on the stack of each break separately, per layer (the CPU
# tier must stay under 10 minutes on 2 cores).
_ONE_LAYER = {**_TINY, "num_hidden_layers": 1}

_LLAMA_MODULES = {
    "attention_modules": ("q_proj", "v_proj"),
    "mlp_modules": ("gate_proj", "up_proj", "down_proj"),
    "embedding_module": "embed_tokens",
    "head_module": "lm_head",
    "layernorm_modules": ("input_layernorm", "post_attention_layernorm"),
}

_TINY_SPECS = [
    ModelSpec(
        key="llama-tiny",
        arch="llama",
        size="tiny",
        task=CAUSAL_LM,
        full_size=False,
        config={
            "model_type": "llama",
            **_ONE_LAYER,
            "intermediate_size": 128,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        **_LLAMA_MODULES,
    ),
    ModelSpec(
        key="qwen2-tiny",
        arch="qwen2",
        size="tiny",
        task=CAUSAL_LM,
        full_size=False,
        # Qwen2 differs from llama by q/k/v biases and tied embeddings (as in Qwen2.5-0.5B).
        config={
            "model_type": "qwen2",
            **_ONE_LAYER,
            "intermediate_size": 128,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "attention_dropout": 0.0,
            "tie_word_embeddings": True,
            "use_sliding_window": False,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        **_LLAMA_MODULES,
    ),
    ModelSpec(
        key="opt-tiny",
        arch="opt",
        size="tiny",
        task=CAUSAL_LM,
        full_size=False,
        # OPT: learned positions, LayerNorm, biases everywhere, tied lm_head; its default dropouts are zeroed.
        config={
            "model_type": "opt",
            **_ONE_LAYER,
            "ffn_dim": 128,
            "word_embed_proj_dim": 64,
            "max_position_embeddings": 256,
            "dropout": 0.0,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
            "layerdrop": 0.0,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        attention_modules=("q_proj", "v_proj"),
        mlp_modules=("fc1", "fc2"),
        embedding_module="embed_tokens",
        head_module="lm_head",
        layernorm_modules=("self_attn_layer_norm", "final_layer_norm"),
    ),
    ModelSpec(
        key="gpt2-tiny",
        arch="gpt2",
        size="tiny",
        task=CAUSAL_LM,
        full_size=False,
        # GPT-2's projections are transformers' Conv1D (weight stored in x out), the layer kind PEFT adapts with
        # fan_in_fan_out; c_attn is the fused q/k/v projection. Its default dropouts are zeroed, as OPT's.
        config={
            "model_type": "gpt2",
            **_ONE_LAYER,  # GPT2Config maps these names onto its own (n_embd, n_layer, n_head)
            "max_position_embeddings": 256,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        attention_modules=("c_attn",),
        # "mlp.c_proj", not "c_proj": attn.c_proj is the attention out-projection.
        mlp_modules=("c_fc", "mlp.c_proj"),
        embedding_module="wte",
        head_module="lm_head",
        layernorm_modules=("ln_1", "ln_2"),
    ),
    ModelSpec(
        key="qwen3-moe-tiny",
        arch="qwen3_moe",
        size="tiny",
        task=CAUSAL_LM,
        full_size=False,
        # Qwen3-MoE: every decoder layer sparse, its experts two 3-D nn.Parameters per layer (gate_up_proj,
        # down_proj; transformers 5), routed top-2 of 4. No linear MLP is left, so the FFN-output module that IA3
        # and the like need is the attention's out-projection, the block's last linear layer.
        config={
            "model_type": "qwen3_moe",
            **_ONE_LAYER,
            "intermediate_size": 128,
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 256,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        attention_modules=("q_proj", "v_proj"),
        mlp_modules=("o_proj",),
        embedding_module="embed_tokens",
        head_module="lm_head",
        layernorm_modules=("input_layernorm", "post_attention_layernorm"),
        # PEFT's own tests target experts this way (tests/test_target_parameters.py: "mlp.experts.down_proj").
        expert_parameters=("mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
    ),
    ModelSpec(
        key="convnext-tiny",
        arch="convnext",
        size="tiny",
        task=IMAGE_CLS,
        full_size=False,
        # ConvNeXt: Conv2d patch embedding and downsampling (plain convolutions, every conv method's targets),
        # depthwise Conv2d (groups = channels) in each block, pointwise convolutions as nn.Linear. Two stages of one
        # block; 4 input channels so a 4x4 patch's fan-in (64) divides OFT's and BOFT's block sizes. A batch's
        # images are 4 x its sequence length wide (workloads.make_batch).
        config={
            "model_type": "convnext",
            "num_channels": 4,
            "hidden_sizes": [16, 32],
            "depths": [1, 1],
            "num_stages": 2,
            "drop_path_rate": 0.0,
            # A fresh ConvNeXt scales each block's output by 1e-6 (layer scale), so what an adapter in a block does
            # would not reach the logits; a trained one has scales near 1.
            "layer_scale_init_value": 1.0,
            "num_labels": 2,
            "problem_type": "single_label_classification",
        },
        attention_modules=("patch_embeddings", "downsampling_layer.1"),
        mlp_modules=("pwconv1", "pwconv2"),
        head_module="classifier",
        layernorm_modules=("layernorm",),
        target_kind="Conv2d",
        grouped_conv_modules=("dwconv",),
        attn_implementation="eager",  # no attention: transformers refuses to set sdpa on it
    ),
    ModelSpec(
        key="mha-tiny",
        arch="mha_classifier",
        size="tiny",
        task=SEQ_CLS,
        full_size=False,
        # bench_models/mha_model.py: a text classifier whose attention is nn.MultiheadAttention (LoRA adapts the
        # module as a whole); no transformers text model is built on it.
        config={
            "model_type": "mha_classifier",
            **_ONE_LAYER,
            "intermediate_size": 128,
            "num_labels": 2,
            "problem_type": "single_label_classification",
            "pad_token_id": 0,
        },
        attention_modules=("attn",),
        mlp_modules=("fc1", "fc2"),
        embedding_module="embed_tokens",
        head_module="classifier",
        layernorm_modules=("attn_norm", "mlp_norm"),
        target_kind="MultiheadAttention",
        attn_implementation="eager",  # its attention is nn.MultiheadAttention's own
    ),
    ModelSpec(
        key="bert-tiny",
        arch="bert",
        size="tiny",
        task=SEQ_CLS,
        full_size=False,
        # BERT keeps its default dropouts (0.1), so "dropout is off in eval" is observable on the base model.
        config={
            "model_type": "bert",
            **_ONE_LAYER,
            "intermediate_size": 128,
            "max_position_embeddings": 256,
            "num_labels": 2,
            # Set up front as a saved fine-tuning config has it; left None, transformers writes it into
            # the config during the first forward, and that mutation costs a recompile (not PEFT's doing).
            "problem_type": "single_label_classification",
            "pad_token_id": 0,
        },
        attention_modules=("query", "value"),
        # "output.dense" also matches attention.output.dense (the attention out-projection); harmless here.
        mlp_modules=("intermediate.dense", "output.dense"),
        embedding_module="word_embeddings",
        head_module="classifier",
        layernorm_modules=("LayerNorm",),
    ),
]

_FULL_SPECS = [
    ModelSpec(
        key="llama-3.2-1b",
        arch="llama",
        size="Llama-3.2-1B",
        task=CAUSAL_LM,
        full_size=True,
        config_file="llama-3.2-1b.json",
        **_LLAMA_MODULES,
    ),
    ModelSpec(
        key="llama-3.2-3b",
        arch="llama",
        size="Llama-3.2-3B",
        task=CAUSAL_LM,
        full_size=True,
        config_file="llama-3.2-3b.json",
        **_LLAMA_MODULES,
    ),
    ModelSpec(
        key="qwen2.5-0.5b",
        arch="qwen2",
        size="Qwen2.5-0.5B",
        task=CAUSAL_LM,
        full_size=True,
        config_file="qwen2.5-0.5b.json",
        **_LLAMA_MODULES,
    ),
]

# llama-tiny with its linear layers quantized: QLoRA's bitsandbytes 4-bit (NF4, FP4) and torchao int8 weight-only.
_QUANTIZED_SPECS = [
    dataclasses.replace(_TINY_SPECS[0], key=f"llama-tiny-{suffix}", quantization=quantization)
    for suffix, quantization in (("bnb4", "bnb-nf4"), ("bnb4-fp4", "bnb-fp4"), ("int8", "int8"))
]

# What compiling buys, measured on CPU (results/): a Llama of a few layers and a few hundred hidden units, large enough
# that step time is compute rather than Python overhead, small enough for inductor's compile on 2 cores.
_CPU_BENCH_SPECS = [
    dataclasses.replace(
        _TINY_SPECS[0],
        key="llama-small",
        size="small",
        config={
            **_TINY_SPECS[0].config,
            "vocab_size": 4096,
            "hidden_size": 256,
            "intermediate_size": 688,
            "num_hidden_layers": 4,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "max_position_embeddings": 1024,
        },
        in_matrix=False,
    )
]

MODELS: dict[str, ModelSpec] = {s.key: s for s in _TINY_SPECS + _QUANTIZED_SPECS + _FULL_SPECS + _CPU_BENCH_SPECS}


def get_spec(model_key: str) -> ModelSpec:
    try:
        return MODELS[model_key]
    except KeyError:
        raise ValueError(f"unknown model {model_key!r}; valid models: {', '.join(MODELS)}") from None


def auto_model_class(spec: ModelSpec):
    from transformers import AutoModelForCausalLM, AutoModelForImageClassification, AutoModelForSequenceClassification

    return {
        CAUSAL_LM: AutoModelForCausalLM,
        SEQ_CLS: AutoModelForSequenceClassification,
        IMAGE_CLS: AutoModelForImageClassification,
    }[spec.task]


def build_base_model(
    model_key: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
    num_layers: int | None = None,
    config_overrides: dict[str, Any] | None = None,
):
    """A seeded random-init transformers model in train mode; ``num_layers`` overrides the config's depth and
    ``config_overrides`` any other config attribute (the full-size initialization self-test shrinks the vocabulary).

    Full-size models are created on the meta device and materialized directly on `device` (no CPU copy), then
    re-initialized under the seed.
    """
    spec = get_spec(model_key)
    auto_cls = auto_model_class(spec)
    config = spec.hf_config()
    for name, value in (config_overrides or {}).items():
        setattr(config, name, value)
    if num_layers is not None:
        config.num_hidden_layers = num_layers
        if getattr(config, "layer_types", None) is not None:  # per-layer attention kinds (Qwen2): one per layer
            config.layer_types = [config.layer_types[0]] * num_layers
        if getattr(config, "depths", None) is not None:  # a convolutional network: blocks per stage
            config.depths = [num_layers] * len(config.depths)
    device = torch.device(device)
    torch.manual_seed(seed)
    if spec.full_size:
        with torch.device("meta"):
            model = auto_cls.from_config(config, attn_implementation=spec.attn_implementation, dtype=dtype)
        model.to_empty(device=device)
        key = (model_key, str(device), str(dtype), seed, num_layers, repr(sorted((config_overrides or {}).items())))
        _initialize_once_per_session(model, seed, key)
    else:
        model = auto_cls.from_config(config, attn_implementation=spec.attn_implementation)
        model.to(device=device, dtype=dtype)
    _randomize_biases(model, seed)
    if spec.quantization:
        from .quantized import quantize

        model = quantize(model, spec.quantization, device=device, dtype=dtype)
    return model.train()


@torch.no_grad()
def _randomize_biases(model, seed: int) -> None:
    # transformers initializes every bias to zero; trained checkpoints have non-zero biases. A zero bias hides
    # bias merges and zeroes the gradient of adapters that scale the bias (GLoRA's D), so draw small seeded ones.
    gen = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        if name.endswith("bias"):
            param.copy_(torch.randn(param.shape, generator=gen) * 0.02)


# The initial weights of the last full-size model built, kept on the CPU: initializing a billion parameters takes
# minutes on a CPU, and a session builds the same model for several cases (eager and compiled runs, each scenario).
# One model at a time bounds the memory it holds.
_INITIAL_STATE: dict[tuple, dict[str, torch.Tensor]] = {}


@torch.no_grad()
def _initialize_once_per_session(model, seed: int, key: tuple) -> None:
    """The seeded initialization of a full-size model, computed once per session and copied afterwards (parameters
    and buffers, the non-persistent rotary ones included; tied weights tied again, as the initialization ties them)."""
    state = _INITIAL_STATE.get(key)
    if state is None:
        _reinitialize(model, seed)
        _INITIAL_STATE.clear()
        _INITIAL_STATE[key] = {name: tensor.detach().to("cpu", copy=True) for name, tensor in _named_tensors(model)}
        return
    model.tie_weights()
    for name, tensor in _named_tensors(model):
        tensor.copy_(state[name])
    _recompute_rotary_buffers(model)  # a plain original_inv_freq attribute (before transformers 5) is no buffer


def _named_tensors(model) -> list[tuple[str, torch.Tensor]]:
    return [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]


class UninitializedTensors(RuntimeError):
    """A full-size model materialized from the meta device kept tensors that nothing initialized."""


@torch.no_grad()
def _reinitialize(model, seed: int) -> None:
    # to_empty() leaves uninitialized memory in every parameter and buffer (RoPE's inv_freq included): fill it with
    # NaN, so that whatever the initialization below misses is found, on any device and transformers version.
    # transformers' init_weights() re-runs each module's _init_weights and re-ties, but skips anything flagged as
    # already initialized, so clear those flags first. Its generic _init_weights has no rotary branch before
    # transformers 5, so rotary buffers are recomputed from the config as their module's constructor does.
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.is_floating_point():
            tensor.fill_(float("nan"))
    for obj in [*model.modules(), *model.parameters(), *model.buffers()]:
        if getattr(obj, "_is_hf_initialized", False):
            obj._is_hf_initialized = False
    torch.manual_seed(seed)
    model.init_weights()
    _recompute_rotary_buffers(model)
    missed = [
        name
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]
        if tensor.is_floating_point() and not torch.isfinite(tensor).all()
    ]
    if missed:
        shown = ", ".join(missed[:5]) + (f" and {len(missed) - 5} more" if len(missed) > 5 else "")
        raise UninitializedTensors(
            f"{type(model).__name__} from the meta device: {len(missed)} tensor(s) not initialized: {shown}"
        )


def _recompute_rotary_buffers(model) -> None:
    for module in model.modules():
        init = getattr(module, "rope_init_fn", None)
        inv_freq = getattr(module, "inv_freq", None)
        if init is None or not isinstance(inv_freq, torch.Tensor) or not hasattr(module, "config"):
            continue
        fresh, _ = init(module.config, inv_freq.device)
        inv_freq.copy_(fresh)
        if isinstance(module._buffers.get("original_inv_freq"), torch.Tensor):
            module.original_inv_freq.copy_(fresh)
        elif hasattr(module, "original_inv_freq"):  # a plain attribute before transformers 5; to_empty left it
            module.original_inv_freq = inv_freq


def library_versions() -> dict[str, str]:
    import peft
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
    }
