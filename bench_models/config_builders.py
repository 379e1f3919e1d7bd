"""The options of each method's PeftConfig: functions `(spec, *, rank=None, dropout=None) -> Options`, sized for
`spec`. Unless a method needs more, adapters target the attention projections (`spec.attention_modules`, PEFT's own
default for these architectures), so methods are comparable with each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import peft

from .models import CAUSAL_LM, SEQ_CLS, ModelSpec
from .xlora_experts import expert_dirs

Options = dict[str, object]

# LoRA-family default dropout: non-zero so that "dropout is off in eval" is a meaningful check.
LORA_DROPOUT = 0.1
# Token ids made trainable by trainable-tokens / trainable_token_indices; inside every tiny vocab.
TRAINABLE_TOKEN_IDS = (3, 5, 7, 11)
NUM_VIRTUAL_TOKENS = 4
# Methods routing on task ids (Poly, multitask prompt tuning): number of tasks; make_batch draws ids < this.
NUM_TASKS = 2
# AdaLoRA schedule sized for a few-step run (steps count from 0): warmup on steps 0-1, rank pruning on steps
# 2-4, final allocation at step 5, fixed mask after.
ADALORA_TOTAL_STEP = 6


@dataclass(frozen=True)
class Deferred:
    """An option value computed only when the config is built (X-LoRA writes its experts to disk)."""

    compute: Callable[[], object]


# PEFT's task type per zoo task; an image classifier has none (PEFT wraps it in a plain PeftModel).
PEFT_TASK_TYPES = {CAUSAL_LM: "CAUSAL_LM", SEQ_CLS: "SEQ_CLS"}


def _task_type(spec: ModelSpec) -> str | None:
    return PEFT_TASK_TYPES.get(spec.task)


def _pick(value, default):
    return default if value is None else value


def _attn(spec: ModelSpec) -> list[str]:
    return list(spec.attention_modules)


def _ffn_out(spec: ModelSpec) -> str:
    return spec.mlp_modules[-1]


def lora_options(spec, rank, dropout, **extra) -> Options:
    r = _pick(rank, 8)
    kwargs = {
        "task_type": _task_type(spec),
        "r": r,
        "lora_alpha": 2 * r,
        "lora_dropout": _pick(dropout, LORA_DROPOUT),
        "target_modules": _attn(spec),
    }
    kwargs.update(extra)
    return kwargs


def lora(spec, *, rank=None, dropout=None):
    return lora_options(spec, rank, dropout)


def lora_dora(spec, *, rank=None, dropout=None):
    return lora_options(spec, rank, dropout, use_dora=True)


def lora_rslora(spec, *, rank=None, dropout=None):
    return lora_options(spec, rank, dropout, use_rslora=True)


def lora_embedding(spec, *, rank=None, dropout=None):
    return lora_options(spec, rank, dropout, target_modules=[spec.embedding_module])


def lora_modules_to_save(spec, *, rank=None, dropout=None):
    return lora_options(spec, rank, dropout, modules_to_save=[spec.head_module])


def lora_trainable_tokens(spec, *, rank=None, dropout=None):
    return lora_options(spec, rank, dropout, trainable_token_indices=list(TRAINABLE_TOKEN_IDS))


def lora_bias(spec, *, rank=None, dropout=None):
    return lora_options(spec, rank, dropout, lora_bias=True)


def lora_parameters_dense(spec, *, rank=None, dropout=None):
    """LoRA on the attention projections' weights as nn.Parameters (``target_parameters``: ``q_proj.weight``), not on
    the modules: peft's ParamWrapper around a single 2-D weight, which it adapts through ``_LoraParameterProxy``."""
    weights = [f"{module}.weight" for module in spec.attention_modules]
    return lora_options(spec, rank, 0.0, target_modules=[], target_parameters=weights)


def lora_conv_groups(spec, *, rank=None, dropout=None):
    """LoRA on the convolutions with groups > 1: PEFT needs a rank divisible by their groups (the largest one's
    channels for a depthwise convolution), so the rank asked for is raised to that."""
    groups = max(spec.config_dict().get("hidden_sizes", [1]))  # depthwise: groups = a stage's channels
    r = max(_pick(rank, 8), groups)
    return lora_options(spec, r - r % groups, dropout, target_modules=list(spec.grouped_conv_modules))


def lora_parameters(spec, *, rank=None, dropout=None):
    """LoRA on weights kept as nn.Parameter (MoE experts) through `target_parameters`, no module targeted. PEFT's
    ParamWrapper refuses lora_dropout != 0, so the dropout asked for is not applied."""
    return lora_options(spec, rank, 0.0, target_modules=[], target_parameters=list(spec.expert_parameters))


def adalora(spec, *, rank=None, dropout=None):
    r = _pick(rank, 8)
    return {
        "task_type": _task_type(spec),
        "init_r": r + 4,
        "target_r": r,
        "lora_alpha": 2 * r,
        "lora_dropout": _pick(dropout, LORA_DROPOUT),
        "target_modules": _attn(spec),
        "total_step": ADALORA_TOTAL_STEP,
        "tinit": 1,
        "tfinal": 1,
        "deltaT": 1,
    }


def ia3(spec, *, rank=None, dropout=None):
    return {
        "task_type": _task_type(spec),
        "target_modules": [*_attn(spec), _ffn_out(spec)],
        "feedforward_modules": [_ffn_out(spec)],
    }


def low_rank_product(spec, *, rank=None, dropout=None):
    """LoHa and LoKr take the same options (Hadamard and Kronecker products of low-rank factors)."""
    r = _pick(rank, 8)
    return {
        "task_type": _task_type(spec),
        "r": r,
        "alpha": r,
        "rank_dropout": _pick(dropout, 0.0),
        "target_modules": _attn(spec),
    }


def simple(*, rank_field=None, dropout_field=None, **fixed):
    """Options of methods configured by target_modules plus an optional rank-like and dropout field."""

    def options(spec, *, rank=None, dropout=None):
        kwargs = {"task_type": _task_type(spec), "target_modules": _attn(spec), **fixed}
        if rank_field and rank is not None:
            kwargs[rank_field] = rank
        if dropout_field and dropout is not None:
            kwargs[dropout_field] = dropout
        return kwargs

    return options


def with_fixed(method_options, **fixed):
    """A method's options with these fields set besides."""

    def options(spec, *, rank=None, dropout=None):
        return {**method_options(spec, rank=rank, dropout=dropout), **fixed}

    return options


def prompt_learning(**fixed):
    def options(spec, *, rank=None, dropout=None):
        return {"task_type": _task_type(spec), "num_virtual_tokens": NUM_VIRTUAL_TOKENS, **fixed}

    return options


def p_tuning(spec, *, rank=None, dropout=None):
    return {
        "task_type": _task_type(spec),
        "num_virtual_tokens": NUM_VIRTUAL_TOKENS,
        "encoder_hidden_size": spec.hidden_size,
        "encoder_dropout": _pick(dropout, 0.0),
    }


def cpt(spec, *, rank=None, dropout=None):
    # CPT's virtual tokens are a real in-context example: token types 1-4 = input template, input, output
    # template, output. Batch tokens without an input_type_mask count as type 4 (labels) shifted by the max
    # prefix type, so the prefix must end on a multiple of 4; with types [1, 1, 1, 1] every label is masked
    # out and the loss is NaN.
    ids = list(TRAINABLE_TOKEN_IDS)
    return {
        "task_type": _task_type(spec),
        "cpt_token_ids": ids,
        "cpt_mask": [1] * len(ids),
        "cpt_tokens_type_mask": [1, 2, 3, 4],
    }


def adaption_prompt(spec, *, rank=None, dropout=None):
    return {"task_type": _task_type(spec), "adapter_len": NUM_VIRTUAL_TOKENS, "adapter_layers": 1}


def poly(spec, *, rank=None, dropout=None):
    return {
        "task_type": _task_type(spec),
        "r": _pick(rank, 8),
        "target_modules": _attn(spec),
        "n_tasks": NUM_TASKS,
        "n_skills": 4,
    }


def shadow(spec, *, rank=None, dropout=None):
    # target_modules=None wraps every decoder block; a 1-layer shadow backbone keeps it tiny.
    kwargs = {"task_type": _task_type(spec), "r": _pick(rank, 8), "shadow_num_hidden_layers": 1}
    if dropout is not None:
        kwargs["shadow_dropout"] = dropout
    return kwargs


def ln_tuning(spec, *, rank=None, dropout=None):
    return {"task_type": _task_type(spec), "target_modules": list(spec.layernorm_modules)}


def trainable_tokens(spec, *, rank=None, dropout=None):
    return {
        "task_type": _task_type(spec),
        "token_indices": list(TRAINABLE_TOKEN_IDS),
        "target_modules": [spec.embedding_module],
    }


def xlora(spec, *, rank=None, dropout=None, experts_on: Callable[[ModelSpec], list[str]] = _attn):
    """X-LoRA mixing two random LoRA experts, which adapt ``experts_on(spec)`` (the attention projections)."""
    rank = _pick(rank, 8)
    expert = lora_options(spec, rank, 0.0, target_modules=experts_on(spec))
    return {
        "task_type": _task_type(spec),
        "hidden_size": spec.hidden_size,
        "adapters": Deferred(lambda: expert_dirs(spec, peft.LoraConfig(**expert))),
        "xlora_depth": 1,
    }


def embedding(spec: ModelSpec) -> list[str]:
    return [spec.embedding_module]


def on_embedding(method_options: Callable[..., Options]) -> Callable[..., Options]:
    """A method's options with its adapter on the input embedding instead of its default targets (X-LoRA: its
    experts')."""
    if method_options is xlora:
        return lambda spec, *, rank=None, dropout=None: xlora(spec, rank=rank, dropout=dropout, experts_on=embedding)

    def options(spec, *, rank=None, dropout=None) -> Options:
        return {**method_options(spec, rank=rank, dropout=dropout), "target_modules": embedding(spec)}

    return options
