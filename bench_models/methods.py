"""The method registry: one entry per PEFT method (every PeftType that can wrap a tiny model) plus LoRA variants.

Each `Method.make_config(spec, rank=None, dropout=None)` returns a fresh PeftConfig sized for `spec`. Unless a
method needs more, adapters target the attention projections (`spec.attention_modules`, PEFT's own default for
these architectures), so methods are comparable with each other.

The registry lists every method whatever peft is installed (case ids stay stable); config classes are named, not
imported, so a method the installed peft lacks (its PeftType, config class, an option or API) is a skip with the
reason from `skip_reason`, e.g. "pvera: not in peft 0.18.1 (no peft.PeftType.PVERA, peft.PveraConfig)".
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import importlib.util
import shutil
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import peft
import torch

from .models import CAUSAL_LM, SEQ_CLS, ModelSpec, auto_model_class, build_base_model, get_spec
from .quantized import method_on_quantized_skip_reason, operation_on_quantized_skip_reason, quantization_skip_reason

OPERATIONS = (
    "multi-adapter",
    "disable-adapter",
    "merge-unmerge",
    "mixed-batch",
    "hotswap",
    "gradient-checkpointing",
    "generate",
)

# LoRA-family default dropout: non-zero so that "dropout is off in eval" is a meaningful check.
LORA_DROPOUT = 0.1
# Token ids made trainable by trainable-tokens / trainable_token_indices; inside every tiny vocab.
TRAINABLE_TOKEN_IDS = (3, 5, 7, 11)
NUM_VIRTUAL_TOKENS = 4
# Methods routing on task ids (Poly, multitask prompt tuning): number of tasks; make_batch draws ids < this.
NUM_TASKS = 2

BOTH_TASKS = frozenset({CAUSAL_LM, SEQ_CLS})
CAUSAL_ONLY = frozenset({CAUSAL_LM})

_OPS_TUNER = frozenset({"multi-adapter", "disable-adapter", "merge-unmerge", "gradient-checkpointing", "generate"})
_OPS_NO_MERGE = _OPS_TUNER - {"merge-unmerge"}


Options = dict[str, object]


@dataclass(frozen=True)
class Deferred:
    """An option value computed only when the config is built (X-LoRA writes its experts to disk)."""

    compute: Callable[[], object]


@dataclass(frozen=True)
class Method:
    name: str
    peft_type: str
    # The PeftConfig subclass, by name: looked up in the installed peft only when needed, so that a method the
    # installed peft lacks is a skip with its reason (`skip_reason`), never an import error.
    config_class: str
    # (spec, *, rank=None, dropout=None) -> the config's keyword arguments.
    options: Callable[..., Options] = field(compare=False, repr=False)
    tasks: frozenset[str] = BOTH_TASKS
    unsupported: dict[str, str] = field(default_factory=dict, compare=False)
    requires: tuple[str, ...] = ()
    operations: frozenset[str] = _OPS_TUNER
    architecture_specific: bool = False
    note: str = ""
    # arch or task -> {operation: reason}: operations PEFT supports for the method, but not on that arch/task.
    unsupported_operations: dict[str, dict[str, str]] = field(default_factory=dict, compare=False)
    # Extra inputs the forward needs ("task_ids"); make_batch adds them.
    batch_keys: tuple[str, ...] = ()
    # Token ids the batch must contain for the adapter to see a gradient (trainable tokens); make_batch adds them.
    batch_token_ids: tuple[int, ...] = ()
    # Attributes set on the base model's config before wrapping (X-LoRA refuses use_cache=True).
    base_config_overrides: dict[str, object] = field(default_factory=dict, compare=False)
    # Other PEFT APIs the method uses, as dotted names ("peft.utils.get_peft_model_state_dict").
    peft_apis: tuple[str, ...] = ()

    def make_config(self, spec: ModelSpec, *, rank: int | None = None, dropout: float | None = None):
        """A fresh PeftConfig sized for `spec`, of the installed peft's config class."""
        options = self.options(spec, rank=rank, dropout=dropout)
        resolved = {k: v.compute() if isinstance(v, Deferred) else v for k, v in options.items()}
        return getattr(peft, self.config_class)(**resolved)


def _task_type(spec: ModelSpec) -> str:
    return "CAUSAL_LM" if spec.task == CAUSAL_LM else "SEQ_CLS"


def _pick(value, default):
    return default if value is None else value


def _attn(spec: ModelSpec) -> list[str]:
    return list(spec.attention_modules)


# ----------------------------------------------------------------------------------------------- config builders


def _lora_config(spec, rank, dropout, **extra) -> Options:
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


def _lora(spec, *, rank=None, dropout=None):
    return _lora_config(spec, rank, dropout)


def _lora_dora(spec, *, rank=None, dropout=None):
    return _lora_config(spec, rank, dropout, use_dora=True)


def _lora_rslora(spec, *, rank=None, dropout=None):
    return _lora_config(spec, rank, dropout, use_rslora=True)


def _lora_embedding(spec, *, rank=None, dropout=None):
    return _lora_config(spec, rank, dropout, target_modules=[spec.embedding_module])


def _lora_modules_to_save(spec, *, rank=None, dropout=None):
    return _lora_config(spec, rank, dropout, modules_to_save=[spec.head_module])


def _lora_trainable_tokens(spec, *, rank=None, dropout=None):
    return _lora_config(spec, rank, dropout, trainable_token_indices=list(TRAINABLE_TOKEN_IDS))


def _lora_bias(spec, *, rank=None, dropout=None):
    return _lora_config(spec, rank, dropout, lora_bias=True)


# AdaLoRA schedule sized for a few-step run (steps count from 0): warmup on steps 0-1, rank pruning on steps
# 2-4, final allocation at step 5, fixed mask after.
ADALORA_TOTAL_STEP = 6


def _adalora(spec, *, rank=None, dropout=None):
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


def _ffn_out(spec: ModelSpec) -> str:
    return spec.mlp_modules[-1]


def _ia3(spec, *, rank=None, dropout=None):
    return {
        "task_type": _task_type(spec),
        "target_modules": [*_attn(spec), _ffn_out(spec)],
        "feedforward_modules": [_ffn_out(spec)],
    }


def _low_rank_product(spec, *, rank=None, dropout=None):
    """LoHa and LoKr take the same options (Hadamard and Kronecker products of low-rank factors)."""
    r = _pick(rank, 8)
    return {
        "task_type": _task_type(spec),
        "r": r,
        "alpha": r,
        "rank_dropout": _pick(dropout, 0.0),
        "target_modules": _attn(spec),
    }


def _simple(*, rank_field=None, dropout_field=None, **fixed):
    """Options of methods configured by target_modules plus an optional rank-like and dropout field."""

    def options(spec, *, rank=None, dropout=None):
        kwargs = {"task_type": _task_type(spec), "target_modules": _attn(spec), **fixed}
        if rank_field and rank is not None:
            kwargs[rank_field] = rank
        if dropout_field and dropout is not None:
            kwargs[dropout_field] = dropout
        return kwargs

    return options


def _prompt_learning(**fixed):
    def options(spec, *, rank=None, dropout=None):
        return {"task_type": _task_type(spec), "num_virtual_tokens": NUM_VIRTUAL_TOKENS, **fixed}

    return options


def _p_tuning(spec, *, rank=None, dropout=None):
    return {
        "task_type": _task_type(spec),
        "num_virtual_tokens": NUM_VIRTUAL_TOKENS,
        "encoder_hidden_size": spec.hidden_size,
        "encoder_dropout": _pick(dropout, 0.0),
    }


def _cpt(spec, *, rank=None, dropout=None):
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


def _adaption_prompt(spec, *, rank=None, dropout=None):
    return {"task_type": _task_type(spec), "adapter_len": NUM_VIRTUAL_TOKENS, "adapter_layers": 1}


def _poly(spec, *, rank=None, dropout=None):
    return {
        "task_type": _task_type(spec),
        "r": _pick(rank, 8),
        "target_modules": _attn(spec),
        "n_tasks": NUM_TASKS,
        "n_skills": 4,
    }


def _shadow(spec, *, rank=None, dropout=None):
    # target_modules=None wraps every decoder block; a 1-layer shadow backbone keeps it tiny.
    kwargs = {"task_type": _task_type(spec), "r": _pick(rank, 8), "shadow_num_hidden_layers": 1}
    if dropout is not None:
        kwargs["shadow_dropout"] = dropout
    return kwargs


def _ln_tuning(spec, *, rank=None, dropout=None):
    return {"task_type": _task_type(spec), "target_modules": list(spec.layernorm_modules)}


def _trainable_tokens(spec, *, rank=None, dropout=None):
    return {
        "task_type": _task_type(spec),
        "token_indices": list(TRAINABLE_TOKEN_IDS),
        "target_modules": [spec.embedding_module],
    }


# X-LoRA mixes already-trained LoRA experts that it loads from disk. We write two random LoRA experts for the
# model once per process: their tensor names and shapes come from a LoRA model built on the meta device, so even
# full-size experts cost no base-model memory.
_XLORA_EXPERT_DIRS: dict[tuple[str, int], dict[str, str]] = {}


def _xlora_experts(spec: ModelSpec, rank: int) -> dict[str, str]:
    key = (spec.key, rank)
    if key not in _XLORA_EXPERT_DIRS:
        from peft.utils import get_peft_model_state_dict
        from safetensors.torch import save_file

        root = Path(tempfile.mkdtemp(prefix=f"bench_models_xlora_{spec.key}_"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        config = peft.LoraConfig(**_lora_config(spec, rank, 0.0))
        with torch.device("meta"):
            base = auto_model_class(spec).from_config(spec.hf_config())
        shapes = {k: v.shape for k, v in get_peft_model_state_dict(peft.get_peft_model(base, config)).items()}
        # X-LoRA loads expert i under the adapter name str(i) and then activates the config's keys, so the keys
        # must be "0", "1", ...
        experts = {}
        for i in range(2):
            gen = torch.Generator().manual_seed(100 + i)
            expert_dir = root / f"expert_{i}"
            config.save_pretrained(expert_dir)
            tensors = {k: torch.randn(shape, generator=gen) * 0.02 for k, shape in shapes.items()}
            save_file(tensors, expert_dir / "adapter_model.safetensors")
            experts[str(i)] = str(expert_dir)
        _XLORA_EXPERT_DIRS[key] = experts
    return _XLORA_EXPERT_DIRS[key]


def _xlora(spec, *, rank=None, dropout=None):
    rank = _pick(rank, 8)
    return {
        "task_type": _task_type(spec),
        "hidden_size": spec.hidden_size,
        "adapters": Deferred(lambda: _xlora_experts(spec, rank)),
        "xlora_depth": 1,
    }


# --------------------------------------------------------------------------------------------------- registry

# Operation support below was checked eagerly on every tiny model (bench_models.check_registry); the reasons
# quote what PEFT raises or does.
_ALL_OPS = frozenset(OPERATIONS)
_NO_MIX_SWAP = _ALL_OPS - {"mixed-batch", "hotswap"}
_NO_SWAP = _ALL_OPS - {"hotswap"}
_TUNER_MIX = _OPS_TUNER | {"mixed-batch"}

_TIED = "tied input/output embeddings"
_NO_MERGE_TIED = {"merge-unmerge": f"{_TIED}: merging the embedding adapter also changes the tied lm_head (peft#2777)"}
_NO_MIX_SEQ_CLS = {
    "mixed-batch": "adapter_names only reaches the method's own layers, not the classifier's modules_to_save copy"
}
_NO_MERGE_NO_BIAS = {"merge-unmerge": "llama's linear layers have no bias to merge the bias adapter into"}
_PROMPT_SEQ_CLS = {
    "disable-adapter": "PEFT's disable_adapter() raises UnboundLocalError for prompt learning on seq-cls models"
}
_PREFIX_NOT_BERT = "PEFT's prefix tuning needs past_key_values, which BertModel.forward does not take"
_ADAPTION_ARCHS = "PEFT's adaption prompt only supports the llama, mistral and gpt2 model types"
_GC_PREFIX = "gradient checkpointing drops the cache, so the prefix keys/values are lost (shape mismatch)"

_METHOD_LIST = [
    # LoRA and its variants
    Method(
        "lora",
        "LORA",
        "LoraConfig",
        _lora,
        operations=_ALL_OPS,
        note="r=8, alpha=16, dropout 0.1 on the q/v projections",
    ),
    Method(
        "lora-dora",
        "LORA",
        "LoraConfig",
        _lora_dora,
        operations=_NO_MIX_SWAP,
        note="use_dora; PEFT refuses adapter_names with DoRA and hotswap does not know the magnitude vector",
    ),
    Method(
        "lora-rslora",
        "LORA",
        "LoraConfig",
        _lora_rslora,
        operations=_ALL_OPS,
        note="use_rslora (alpha/sqrt(r) scaling)",
    ),
    Method(
        "lora-embedding",
        "LORA",
        "LoraConfig",
        _lora_embedding,
        operations=_NO_SWAP,
        unsupported_operations={"qwen2": _NO_MERGE_TIED, "opt": _NO_MERGE_TIED},
        architecture_specific=False,
        note="LoRA on the input embedding only; behaviour depends on whether the arch ties lm_head to it",
    ),
    Method(
        "lora-modules-to-save",
        "LORA",
        "LoraConfig",
        _lora_modules_to_save,
        operations=_NO_SWAP,
        architecture_specific=False,
        note="LoRA on q/v + a trained copy of lm_head / classifier; the lm_head copy unties tied embeddings",
    ),
    Method(
        "lora-trainable-token-indices",
        "LORA",
        "LoraConfig",
        _lora_trainable_tokens,
        operations=_NO_SWAP,
        architecture_specific=False,
        note="LoRA on q/v + trainable_token_indices (TrainableTokens on the embedding, tied to lm_head if tied)",
        batch_token_ids=TRAINABLE_TOKEN_IDS,
    ),
    Method(
        "lora-bias",
        "LORA",
        "LoraConfig",
        _lora_bias,
        operations=_ALL_OPS,
        unsupported_operations={"llama": _NO_MERGE_NO_BIAS},
        note="lora_bias=True (bias on lora_B)",
    ),
    Method(
        "adalora",
        "ADALORA",
        "AdaLoraConfig",
        _adalora,
        operations=_OPS_TUNER - {"multi-adapter"},
        note=f"init_r=12 -> target_r=8, total_step={ADALORA_TOTAL_STEP} so rank pruning happens within a few steps; "
        "train_step calls update_and_allocate. Not multi-adapter: PEFT allows one trainable AdaLoRA adapter and "
        "update_and_allocate only tracks that one",
    ),
    # Other adapter (tuner) methods
    Method("ia3", "IA3", "IA3Config", _ia3, note="attention q/v (k/v) + FFN output projection as feedforward_modules"),
    Method("loha", "LOHA", "LoHaConfig", _low_rank_product, note="r=8, alpha=8"),
    Method("lokr", "LOKR", "LoKrConfig", _low_rank_product, note="r=8, alpha=8"),
    Method("boft", "BOFT", "BOFTConfig", _simple(dropout_field="boft_dropout"), note="defaults (block size 4)"),
    Method("oft", "OFT", "OFTConfig", _simple(dropout_field="module_dropout"), note="defaults (block size 32)"),
    Method("hra", "HRA", "HRAConfig", _simple(rank_field="r"), note="defaults (r=8)"),
    Method(
        "vera",
        "VERA",
        "VeraConfig",
        _simple(rank_field="r", dropout_field="vera_dropout"),
        note="defaults (r=256 shared projections)",
    ),
    Method(
        "pvera",
        "PVERA",
        "PveraConfig",
        _simple(rank_field="r", dropout_field="pvera_dropout"),
        note="defaults (r=256 shared projections)",
    ),
    Method(
        "fourierft",
        "FOURIERFT",
        "FourierFTConfig",
        _simple(n_frequency=256),
        note="n_frequency=256 (default 1000 is half of a 64x32 tiny weight)",
    ),
    Method(
        "vblora",
        "VBLORA",
        "VBLoRAConfig",
        _simple(rank_field="r", dropout_field="vblora_dropout", vector_length=16, num_vectors=32),
        note="vector_length=16 must divide every in/out feature (64, 32; default 256); 32-vector bank",
    ),
    Method(
        "poly",
        "POLY",
        "PolyConfig",
        _poly,
        operations=frozenset({"multi-adapter", "disable-adapter", "generate"}),
        note=f"n_tasks={NUM_TASKS}, n_skills=4, the batch carries task_ids. No merge (NotImplementedError); no "
        "gradient checkpointing (the recompute runs outside the hook that injects task_ids)",
        batch_keys=("task_ids",),
    ),
    Method("ln-tuning", "LN_TUNING", "LNTuningConfig", _ln_tuning, note="trains copies of the layer norms"),
    Method(
        "c3a",
        "C3A",
        "C3AConfig",
        _simple(block_size=16),
        note="block_size=16 must divide in and out features (default 256 > tiny dims)",
    ),
    Method(
        "road",
        "ROAD",
        "RoadConfig",
        _simple(group_size=16),
        operations=_TUNER_MIX,
        unsupported_operations={SEQ_CLS: _NO_MIX_SEQ_CLS},
        note="group_size=16 must divide out_features (32 for the kv projections; default 64)",
    ),
    Method(
        "shira",
        "SHIRA",
        "ShiraConfig",
        _simple(rank_field="r", r=4, random_seed=0),
        note="r=4: default r=32 asks for more sparse params than a 64x32 weight has; mask seeded",
    ),
    Method(
        "waveft",
        "WAVEFT",
        "WaveFTConfig",
        _simple(n_frequency=256),
        note="n_frequency=256: default 2592 exceeds a 64x32 weight",
    ),
    Method("hira", "HIRA", "HiraConfig", _simple(rank_field="r", dropout_field="hira_dropout"), note="defaults"),
    Method(
        "gralora",
        "GRALORA",
        "GraloraConfig",
        _simple(rank_field="r", dropout_field="gralora_dropout"),
        note="defaults (r=32, k=2)",
    ),
    Method(
        "lily",
        "LILY",
        "LilyConfig",
        _simple(rank_field="r"),
        operations=_OPS_NO_MERGE,
        note="defaults; PEFT has no merge for Lily",
    ),
    Method(
        "glora",
        "GLORA",
        "GloraConfig",
        _simple(rank_field="r"),
        operations=_TUNER_MIX,
        unsupported_operations={SEQ_CLS: _NO_MIX_SEQ_CLS},
        note="defaults",
    ),
    Method("deft", "DEFT", "DeftConfig", _simple(rank_field="r", dropout_field="deft_dropout"), note="defaults"),
    Method(
        "delora",
        "DELORA",
        "DeloraConfig",
        _simple(rank_field="r", dropout_field="module_dropout"),
        note="defaults",
    ),
    Method(
        "frod",
        "FROD",
        "FrodConfig",
        _simple(dropout_field="frod_dropout", progressbar=False),
        note="defaults (progress bar off)",
    ),
    Method(
        "randlora",
        "RANDLORA",
        "RandLoraConfig",
        _simple(rank_field="r", dropout_field="randlora_dropout"),
        note="defaults",
    ),
    Method(
        "tinylora",
        "TINYLORA",
        "TinyLoraConfig",
        _simple(rank_field="r", dropout_field="tinylora_dropout"),
        note="defaults",
    ),
    Method(
        "unilora",
        "UNILORA",
        "UniLoraConfig",
        _simple(rank_field="r", dropout_field="unilora_dropout"),
        note="defaults",
    ),
    Method("miss", "MISS", "MissConfig", _simple(dropout_field="miss_dropout"), note="defaults"),
    Method(
        "osf",
        "OSF",
        "OSFConfig",
        _simple(),
        operations=_OPS_NO_MERGE,
        note="defaults (effective_rank = half the smaller dim); PEFT's OSF cannot unmerge",
    ),
    Method("peanut", "PEANUT", "PeanutConfig", _simple(rank_field="r"), note="defaults"),
    Method(
        "psoft",
        "PSOFT",
        "PsoftConfig",
        _simple(rank_field="r", dropout_field="psoft_dropout"),
        note="defaults (SVD init)",
    ),
    Method(
        "supertuning",
        "SUPERTUNING",
        "SupertuningConfig",
        _simple(dropout_field="lora_dropout"),
        note="defaults (sparsity 0.99)",
    ),
    Method(
        "beft",
        "BEFT",
        "BeftConfig",
        _simple(),
        unsupported_operations={"llama": _NO_MERGE_NO_BIAS},
        note="defaults (bias terms of the targeted layers)",
    ),
    Method(
        "adamss",
        "ADAMSS",
        "AdamssConfig",
        _simple(r=16, num_subspaces=4, subspace_rank=1),
        requires=("sklearn",),
        note="r=16 SVD rank (default 100 > tiny dims), 4 subspaces; needs scikit-learn (KMeans)",
    ),
    Method(
        "shadow",
        "SHADOW",
        "ShadowConfig",
        _shadow,
        tasks=CAUSAL_ONLY,
        operations=_OPS_NO_MERGE,
        architecture_specific=False,
        note="wraps every decoder block, 1-layer mirrored shadow backbone; decoder-only; cannot be merged",
    ),
    Method(
        "xlora",
        "XLORA",
        "XLoraConfig",
        _xlora,
        tasks=CAUSAL_ONLY,
        operations=frozenset({"disable-adapter", "generate"}),
        note="2 random LoRA experts written to a temp dir, depth-1 classifier, use_cache off. Seq-cls fails to load "
        "the experts' classifier; gradient checkpointing trips a CheckpointError; merge is not meaningful",
        base_config_overrides={"use_cache": False},
        peft_apis=("peft.utils.get_peft_model_state_dict",),
    ),
    Method(
        "trainable-tokens",
        "TRAINABLE_TOKENS",
        "TrainableTokensConfig",
        _trainable_tokens,
        unsupported_operations={
            "qwen2": {"multi-adapter": f"{_TIED}: a second adapter fails ('wraps an unknown layer type')"},
            "opt": {"multi-adapter": f"{_TIED}: a second adapter fails ('wraps an unknown layer type')"},
        },
        architecture_specific=True,
        note=f"token ids {list(TRAINABLE_TOKEN_IDS)} of the input embedding (make_batch puts them in every row); "
        "tied lm_head handling",
        batch_token_ids=TRAINABLE_TOKEN_IDS,
    ),
    # Prompt learning
    Method(
        "prompt-tuning",
        "PROMPT_TUNING",
        "PromptTuningConfig",
        _prompt_learning(),
        operations=_OPS_NO_MERGE,
        unsupported_operations={SEQ_CLS: _PROMPT_SEQ_CLS},
        note=f"{NUM_VIRTUAL_TOKENS} random virtual tokens",
    ),
    Method(
        "multitask-prompt-tuning",
        "MULTITASK_PROMPT_TUNING",
        "MultitaskPromptTuningConfig",
        _prompt_learning(num_tasks=NUM_TASKS),
        operations=_OPS_NO_MERGE,
        unsupported_operations={SEQ_CLS: _PROMPT_SEQ_CLS},
        note=f"{NUM_VIRTUAL_TOKENS} virtual tokens, {NUM_TASKS} tasks; the batch carries task_ids",
        batch_keys=("task_ids",),
    ),
    Method(
        "p-tuning",
        "P_TUNING",
        "PromptEncoderConfig",
        _p_tuning,
        operations=_OPS_NO_MERGE,
        unsupported_operations={SEQ_CLS: _PROMPT_SEQ_CLS},
        note=f"{NUM_VIRTUAL_TOKENS} virtual tokens, MLP encoder of the model's hidden size",
    ),
    Method(
        "prefix-tuning",
        "PREFIX_TUNING",
        "PrefixTuningConfig",
        _prompt_learning(),
        unsupported={"bert": _PREFIX_NOT_BERT},
        operations=_OPS_NO_MERGE - {"gradient-checkpointing"},
        architecture_specific=True,
        note=f"{NUM_VIRTUAL_TOKENS} virtual tokens fed as past_key_values (per-architecture cache handling); "
        f"no gradient checkpointing: {_GC_PREFIX}",
    ),
    Method(
        "cartridge",
        "CARTRIDGE",
        "CartridgeConfig",
        _prompt_learning(),
        unsupported={"bert": _PREFIX_NOT_BERT},
        operations=_OPS_NO_MERGE - {"gradient-checkpointing"},
        architecture_specific=True,
        note=f"{NUM_VIRTUAL_TOKENS}-token trainable KV prefix fed as past_key_values, first token frozen; "
        f"no gradient checkpointing: {_GC_PREFIX}",
    ),
    Method(
        "cpt",
        "CPT",
        "CPTConfig",
        _cpt,
        tasks=CAUSAL_ONLY,
        operations=_OPS_NO_MERGE,
        note="one 4-token in-context example (types 1-4); no input_type_mask in the batch (CPT mutates it)",
    ),
    Method(
        "adaption-prompt",
        "ADAPTION_PROMPT",
        "AdaptionPromptConfig",
        _adaption_prompt,
        tasks=CAUSAL_ONLY,
        unsupported={"qwen2": _ADAPTION_ARCHS, "opt": _ADAPTION_ARCHS, "bert": _ADAPTION_ARCHS},
        operations=_OPS_NO_MERGE,
        architecture_specific=True,
        note=f"adapter_len={NUM_VIRTUAL_TOKENS} on the top layer (PEFT re-implements llama attention)",
    ),
]

METHODS: dict[str, Method] = {m.name: m for m in _METHOD_LIST}

# PeftTypes of older peft releases that a method here covers under their current name. Only those the installed
# peft exports are excluded, so the exclusions never name a PeftType that does not exist.
_RETIRED_PEFT_TYPES = {
    "BONE": "Bone is MiSS under its old name (the miss method); peft deprecated BoneConfig for MissConfig and "
    "removed it in 0.19",
}
EXCLUDED_PEFT_TYPES: dict[str, str] = {
    name: reason for name, reason in _RETIRED_PEFT_TYPES.items() if name in peft.PeftType.__members__
}


def get_method(method_name: str) -> Method:
    try:
        return METHODS[method_name]
    except KeyError:
        raise ValueError(f"unknown method {method_name!r}; valid methods: {', '.join(METHODS)}") from None


# ------------------------------------------------------------------------------------ what the installed peft has

# Lifecycle operations that need a PEFT API beyond get_peft_model, as dotted names.
OPERATION_PEFT_APIS: dict[str, tuple[str, ...]] = {
    "hotswap": ("peft.utils.hotswap.hotswap_adapter", "peft.utils.hotswap.prepare_model_for_compiled_hotswap"),
}


def _resolves(dotted: str) -> bool:
    """Whether a dotted name ("peft.PveraConfig", "peft.PeftType.LORA", "peft.utils.hotswap.x") is installed."""
    head, *rest = dotted.split(".")
    obj = importlib.import_module(head)
    for part in rest:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif isinstance(obj, types.ModuleType):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
            except ImportError:
                return False
        else:
            return False
    return True


def _missing_apis(names) -> list[str]:
    return [name for name in names if not _resolves(name)]


def _unknown_options(config_class, options: Options) -> list[str]:
    """The option names the config class does not declare (PEFT configs are dataclasses)."""
    if not dataclasses.is_dataclass(config_class):
        return []
    return sorted(set(options) - {f.name for f in dataclasses.fields(config_class)})


def _not_in_peft(what: str, detail: str) -> str:
    return f"{what}: not in peft {peft.__version__} ({detail})"


def peft_lacks(model_key: str, method_name: str) -> str | None:
    """Why the installed peft cannot build the method (its PeftType, config class, an option or API), or None."""
    method, spec = get_method(method_name), get_spec(model_key)
    needed = (f"peft.PeftType.{method.peft_type}", f"peft.{method.config_class}", *method.peft_apis)
    missing = _missing_apis(needed)
    if missing:
        return _not_in_peft(method.name, f"no {', '.join(missing)}")
    # rank and dropout given, so that the options they switch on are checked too.
    options = method.options(spec, rank=8, dropout=0.0)
    unknown = _unknown_options(getattr(peft, method.config_class), options)
    if unknown:
        return _not_in_peft(method.name, f"{method.config_class} has no option {', '.join(unknown)}")
    return None


def skip_reason(model_key: str, method_name: str) -> str | None:
    """Why (model, method) cannot run here, or None."""
    spec = get_spec(model_key)
    method = get_method(method_name)
    lacking = peft_lacks(model_key, method_name)
    if lacking:
        return lacking
    if spec.task not in method.tasks:
        return f"{method.name} does not support task {spec.task} (supports: {', '.join(sorted(method.tasks))})"
    if spec.arch in method.unsupported:
        return f"{method.name} on {spec.arch}: {method.unsupported[spec.arch]}"
    missing = [pkg for pkg in method.requires if importlib.util.find_spec(pkg) is None]
    if missing:
        return f"{method.name} needs optional package(s) not installed: {', '.join(missing)}"
    if spec.quantization:
        return quantization_skip_reason(spec.quantization) or method_on_quantized_skip_reason(
            spec.quantization, method.name, method.peft_type
        )
    return None


def operation_skip_reason(model_key: str, method_name: str, operation: str) -> str | None:
    """Why `operation` cannot be exercised for (model, method), or None."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; valid operations: {', '.join(OPERATIONS)}")
    reason = skip_reason(model_key, method_name)
    if reason:
        return reason
    method, spec = get_method(method_name), get_spec(model_key)
    if operation not in method.operations:
        return f"PEFT does not support {operation} for {method_name}"
    missing = _missing_apis(OPERATION_PEFT_APIS.get(operation, ()))
    if missing:
        return _not_in_peft(operation, f"no {', '.join(missing)}")
    for selector in (spec.arch, spec.task):
        if operation in method.unsupported_operations.get(selector, {}):
            return f"{operation} for {method_name} on {selector}: {method.unsupported_operations[selector][operation]}"
    if spec.quantization:
        reason = operation_on_quantized_skip_reason(spec.quantization, operation)
        if reason:
            return reason
    if operation == "generate" and spec.task != CAUSAL_LM:
        return f"generate needs a causal LM, {model_key} is {spec.task}"
    if operation == "hotswap" and spec.task != CAUSAL_LM:
        # PeftModelForSequenceClassification adds the classifier to modules_to_save; hotswap swaps lora_* only.
        return "hotswap swaps only LoRA weights, not the classifier copy every seq-cls adapter trains"
    return None


def build_peft_model(
    model_key: str,
    method_name: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
    adapter_name: str = "default",
    rank: int | None = None,
    dropout: float | None = None,
    num_layers: int | None = None,
):
    """Base model (``num_layers`` overrides its depth) + get_peft_model, seeded (the adapter init too), in train
    mode."""
    spec = get_spec(model_key)
    method = get_method(method_name)
    reason = skip_reason(model_key, method_name)
    if reason:
        raise ValueError(f"cannot build {method_name} on {model_key}: {reason}")
    base = build_base_model(model_key, device=device, dtype=dtype, seed=seed, num_layers=num_layers)
    for attr, value in method.base_config_overrides.items():
        setattr(base.config, attr, value)
    config = method.make_config(spec, rank=rank, dropout=dropout)
    torch.manual_seed(seed)
    model = peft.get_peft_model(base, config, adapter_name=adapter_name)
    model.to(device)
    return model.train()


def add_adapter(peft_model, model_key: str, method_name: str, adapter_name: str, *, seed=1, rank=None, dropout=None):
    """Add a second adapter of the same method (multi-adapter scenarios); the active adapter is unchanged."""
    method = get_method(method_name)
    if "multi-adapter" not in method.operations:
        raise NotImplementedError(f"PEFT does not support multiple {method_name} adapters ({method.note})")
    config = method.make_config(get_spec(model_key), rank=rank, dropout=dropout)
    torch.manual_seed(seed)
    peft_model.add_adapter(adapter_name, config)
    return peft_model
