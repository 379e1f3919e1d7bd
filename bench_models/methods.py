"""The method registry: one entry per PEFT method (every PeftType that can wrap a tiny model) plus LoRA variants.

Each `Method.make_config(spec, rank=None, dropout=None)` returns a fresh PeftConfig sized for `spec` (the options
come from `config_builders`). What a method cannot run is declared in its `cannot_run`, with the reason; the
checks that read it are in `skip_reasons`.

The registry lists every method whatever peft is installed (case ids stay stable); config classes are named, not
imported, so a method the installed peft lacks (its PeftType, config class, an option or API) is a skip with the
reason, e.g. "pvera: not in peft 0.18.1 (no peft.PeftType.PVERA, peft.PveraConfig)" (`installed_peft`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import peft

from . import config_builders as options
from .config_builders import ADALORA_TOTAL_STEP, NUM_TASKS, NUM_VIRTUAL_TOKENS, TRAINABLE_TOKEN_IDS, Deferred, Options
from .models import SEQ_CLS, ModelSpec

OPERATIONS = (
    "multi-adapter",
    "disable-adapter",
    "merge-unmerge",
    "mixed-batch",
    "hotswap",
    "gradient-checkpointing",
    "generate",
)

# A key of `cannot_run`: an architecture ("bert"), a task (SEQ_CLS), an operation ("merge-unmerge"), or an
# (architecture or task, operation) pair.
Selector = str | tuple[str, str]

# Operation support below was checked eagerly on every tiny model (bench_models.check_registry); the reasons
# quote what PEFT raises or does.
_MIXED_BATCH = "PEFT implements adapter_names (an adapter per row) only for LoRA, RoAd and GLoRA"
_HOTSWAP = "PEFT's hotswap_adapter swaps LoRA adapters only"
# What PEFT lacks for most tuners: the default of `Method.cannot_run`.
TUNER_LIMITS: dict[Selector, str] = {"mixed-batch": _MIXED_BATCH, "hotswap": _HOTSWAP}

CAUSAL_LM_ONLY = "supports: causal-lm"
_NO_WEIGHTS_TO_MERGE = {"merge-unmerge": "it adds virtual tokens, not a weight delta to merge"}
_TIED = "tied input/output embeddings"
_NO_MERGE_TIED = f"{_TIED}: merging the embedding adapter also changes the tied lm_head (peft#2777)"
_NO_MIX_SEQ_CLS = "adapter_names only reaches the method's own layers, not the classifier's modules_to_save copy"
_NO_MERGE_NO_BIAS = "llama's linear layers have no bias to merge the bias adapter into"
_PROMPT_SEQ_CLS = "PEFT's disable_adapter() raises UnboundLocalError for prompt learning on seq-cls models"
_PREFIX_NOT_BERT = "PEFT's prefix tuning needs past_key_values, which BertModel.forward does not take"
_ADAPTION_ARCHS = "PEFT's adaption prompt only supports the llama, mistral and gpt2 model types"
_GC_PREFIX = "gradient checkpointing drops the cache, so the prefix keys/values are lost (shape mismatch)"
_KV_PREFIX_LIMITS = {
    **TUNER_LIMITS,
    **_NO_WEIGHTS_TO_MERGE,
    "bert": _PREFIX_NOT_BERT,
    "gradient-checkpointing": _GC_PREFIX,
}
_PROMPT_LIMITS = {**TUNER_LIMITS, **_NO_WEIGHTS_TO_MERGE, (SEQ_CLS, "disable-adapter"): _PROMPT_SEQ_CLS}

# Cases no method can run, in the same form; the reason is the whole skip message ({model}, {task}: the case's).
ZOO_RULES: dict[Selector, str] = {
    (SEQ_CLS, "generate"): "generate needs a causal LM, {model} is {task}",
    # PeftModelForSequenceClassification adds the classifier to modules_to_save; hotswap swaps lora_* only.
    (SEQ_CLS, "hotswap"): "hotswap swaps only LoRA weights, not the classifier copy every seq-cls adapter trains",
}


@dataclass(frozen=True)
class Method:
    name: str
    peft_type: str
    # The PeftConfig subclass, by name: looked up in the installed peft only when needed, so that a method the
    # installed peft lacks is a skip with its reason, never an import error.
    config_class: str
    # (spec, *, rank=None, dropout=None) -> the config's keyword arguments.
    options: Callable[..., Options] = field(compare=False, repr=False)
    # Selector -> why the method cannot run there. Replacing the default drops its entries: spread TUNER_LIMITS
    # into a map that adds to them.
    cannot_run: dict[Selector, str] = field(default_factory=TUNER_LIMITS.copy, compare=False)
    requires: tuple[str, ...] = ()
    architecture_specific: bool = False
    note: str = ""
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
        kwargs = self.options(spec, rank=rank, dropout=dropout)
        resolved = {k: v.compute() if isinstance(v, Deferred) else v for k, v in kwargs.items()}
        return getattr(peft, self.config_class)(**resolved)

    def supports(self, operation: str) -> bool:
        """Whether PEFT has `operation` for the method (an architecture or task may still rule it out)."""
        return operation not in self.cannot_run


_METHOD_LIST = [
    # LoRA and its variants
    Method(
        "lora",
        "LORA",
        "LoraConfig",
        options.lora,
        cannot_run={},
        note="r=8, alpha=16, dropout 0.1 on the q/v projections",
    ),
    Method(
        "lora-dora",
        "LORA",
        "LoraConfig",
        options.lora_dora,
        cannot_run={
            "mixed-batch": "PEFT refuses adapter_names with DoRA",
            "hotswap": "hotswap does not know DoRA's magnitude vector",
        },
        note="use_dora; PEFT refuses adapter_names with DoRA and hotswap does not know the magnitude vector",
    ),
    Method(
        "lora-rslora",
        "LORA",
        "LoraConfig",
        options.lora_rslora,
        cannot_run={},
        note="use_rslora (alpha/sqrt(r) scaling)",
    ),
    Method(
        "lora-embedding",
        "LORA",
        "LoraConfig",
        options.lora_embedding,
        cannot_run={
            "hotswap": "PEFT's hotswap_adapter raises KeyError on the adapted embedding's keys",
            ("qwen2", "merge-unmerge"): _NO_MERGE_TIED,
            ("opt", "merge-unmerge"): _NO_MERGE_TIED,
        },
        architecture_specific=False,
        note="LoRA on the input embedding only; behaviour depends on whether the arch ties lm_head to it",
    ),
    Method(
        "lora-modules-to-save",
        "LORA",
        "LoraConfig",
        options.lora_modules_to_save,
        cannot_run={"hotswap": "PEFT's hotswap_adapter raises KeyError on the modules_to_save copy's keys"},
        architecture_specific=False,
        note="LoRA on q/v + a trained copy of lm_head / classifier; the lm_head copy unties tied embeddings",
    ),
    Method(
        "lora-trainable-token-indices",
        "LORA",
        "LoraConfig",
        options.lora_trainable_tokens,
        cannot_run={"hotswap": "PEFT's hotswap_adapter raises KeyError on the trainable tokens' delta"},
        architecture_specific=False,
        note="LoRA on q/v + trainable_token_indices (TrainableTokens on the embedding, tied to lm_head if tied)",
        batch_token_ids=TRAINABLE_TOKEN_IDS,
    ),
    Method(
        "lora-bias",
        "LORA",
        "LoraConfig",
        options.lora_bias,
        cannot_run={("llama", "merge-unmerge"): _NO_MERGE_NO_BIAS},
        note="lora_bias=True (bias on lora_B)",
    ),
    Method(
        "adalora",
        "ADALORA",
        "AdaLoraConfig",
        options.adalora,
        cannot_run={
            **TUNER_LIMITS,
            "multi-adapter": "PEFT allows one trainable AdaLoRA adapter and update_and_allocate only tracks that one",
        },
        note=f"init_r=12 -> target_r=8, total_step={ADALORA_TOTAL_STEP} so rank pruning happens within a few steps; "
        "train_step calls update_and_allocate. Not multi-adapter: PEFT allows one trainable AdaLoRA adapter and "
        "update_and_allocate only tracks that one",
    ),
    # Other adapter (tuner) methods
    Method(
        "ia3",
        "IA3",
        "IA3Config",
        options.ia3,
        note="attention q/v (k/v) + FFN output projection as feedforward_modules",
    ),
    Method("loha", "LOHA", "LoHaConfig", options.low_rank_product, note="r=8, alpha=8"),
    Method("lokr", "LOKR", "LoKrConfig", options.low_rank_product, note="r=8, alpha=8"),
    Method("boft", "BOFT", "BOFTConfig", options.simple(dropout_field="boft_dropout"), note="defaults (block size 4)"),
    Method("oft", "OFT", "OFTConfig", options.simple(dropout_field="module_dropout"), note="defaults (block size 32)"),
    Method("hra", "HRA", "HRAConfig", options.simple(rank_field="r"), note="defaults (r=8)"),
    Method(
        "vera",
        "VERA",
        "VeraConfig",
        options.simple(rank_field="r", dropout_field="vera_dropout"),
        note="defaults (r=256 shared projections)",
    ),
    Method(
        "pvera",
        "PVERA",
        "PveraConfig",
        options.simple(rank_field="r", dropout_field="pvera_dropout"),
        note="defaults (r=256 shared projections)",
    ),
    Method(
        "fourierft",
        "FOURIERFT",
        "FourierFTConfig",
        options.simple(n_frequency=256),
        note="n_frequency=256 (default 1000 is half of a 64x32 tiny weight)",
    ),
    Method(
        "vblora",
        "VBLORA",
        "VBLoRAConfig",
        options.simple(rank_field="r", dropout_field="vblora_dropout", vector_length=16, num_vectors=32),
        note="vector_length=16 must divide every in/out feature (64, 32; default 256); 32-vector bank",
    ),
    Method(
        "poly",
        "POLY",
        "PolyConfig",
        options.poly,
        cannot_run={
            **TUNER_LIMITS,
            "merge-unmerge": "PEFT's Poly has no merge (NotImplementedError)",
            "gradient-checkpointing": "the recompute runs outside the hook that injects task_ids",
        },
        note=f"n_tasks={NUM_TASKS}, n_skills=4, the batch carries task_ids. No merge (NotImplementedError); no "
        "gradient checkpointing (the recompute runs outside the hook that injects task_ids)",
        batch_keys=("task_ids",),
    ),
    Method("ln-tuning", "LN_TUNING", "LNTuningConfig", options.ln_tuning, note="trains copies of the layer norms"),
    Method(
        "c3a",
        "C3A",
        "C3AConfig",
        options.simple(block_size=16),
        note="block_size=16 must divide in and out features (default 256 > tiny dims)",
    ),
    Method(
        "road",
        "ROAD",
        "RoadConfig",
        options.simple(group_size=16),
        cannot_run={"hotswap": _HOTSWAP, (SEQ_CLS, "mixed-batch"): _NO_MIX_SEQ_CLS},
        note="group_size=16 must divide out_features (32 for the kv projections; default 64)",
    ),
    Method(
        "shira",
        "SHIRA",
        "ShiraConfig",
        options.simple(rank_field="r", r=4, random_seed=0),
        note="r=4: default r=32 asks for more sparse params than a 64x32 weight has; mask seeded",
    ),
    Method(
        "waveft",
        "WAVEFT",
        "WaveFTConfig",
        options.simple(n_frequency=256),
        note="n_frequency=256: default 2592 exceeds a 64x32 weight",
    ),
    Method("hira", "HIRA", "HiraConfig", options.simple(rank_field="r", dropout_field="hira_dropout"), note="defaults"),
    Method(
        "gralora",
        "GRALORA",
        "GraloraConfig",
        options.simple(rank_field="r", dropout_field="gralora_dropout"),
        note="defaults (r=32, k=2)",
    ),
    Method(
        "lily",
        "LILY",
        "LilyConfig",
        options.simple(rank_field="r"),
        cannot_run={**TUNER_LIMITS, "merge-unmerge": "PEFT has no merge for Lily"},
        note="defaults; PEFT has no merge for Lily",
    ),
    Method(
        "glora",
        "GLORA",
        "GloraConfig",
        options.simple(rank_field="r"),
        cannot_run={"hotswap": _HOTSWAP, (SEQ_CLS, "mixed-batch"): _NO_MIX_SEQ_CLS},
        note="defaults",
    ),
    Method("deft", "DEFT", "DeftConfig", options.simple(rank_field="r", dropout_field="deft_dropout"), note="defaults"),
    Method(
        "delora",
        "DELORA",
        "DeloraConfig",
        options.simple(rank_field="r", dropout_field="module_dropout"),
        note="defaults",
    ),
    Method(
        "frod",
        "FROD",
        "FrodConfig",
        options.simple(dropout_field="frod_dropout", progressbar=False),
        note="defaults (progress bar off)",
    ),
    Method(
        "randlora",
        "RANDLORA",
        "RandLoraConfig",
        options.simple(rank_field="r", dropout_field="randlora_dropout"),
        note="defaults",
    ),
    Method(
        "tinylora",
        "TINYLORA",
        "TinyLoraConfig",
        options.simple(rank_field="r", dropout_field="tinylora_dropout"),
        note="defaults",
    ),
    Method(
        "unilora",
        "UNILORA",
        "UniLoraConfig",
        options.simple(rank_field="r", dropout_field="unilora_dropout"),
        note="defaults",
    ),
    Method("miss", "MISS", "MissConfig", options.simple(dropout_field="miss_dropout"), note="defaults"),
    Method(
        "osf",
        "OSF",
        "OSFConfig",
        options.simple(),
        cannot_run={**TUNER_LIMITS, "merge-unmerge": "OSF models do not support unmerging"},
        note="defaults (effective_rank = half the smaller dim); PEFT's OSF cannot unmerge",
    ),
    Method("peanut", "PEANUT", "PeanutConfig", options.simple(rank_field="r"), note="defaults"),
    Method(
        "psoft",
        "PSOFT",
        "PsoftConfig",
        options.simple(rank_field="r", dropout_field="psoft_dropout"),
        note="defaults (SVD init)",
    ),
    Method(
        "supertuning",
        "SUPERTUNING",
        "SupertuningConfig",
        options.simple(dropout_field="lora_dropout"),
        note="defaults (sparsity 0.99)",
    ),
    Method(
        "beft",
        "BEFT",
        "BeftConfig",
        options.simple(),
        cannot_run={**TUNER_LIMITS, ("llama", "merge-unmerge"): _NO_MERGE_NO_BIAS},
        note="defaults (bias terms of the targeted layers)",
    ),
    Method(
        "adamss",
        "ADAMSS",
        "AdamssConfig",
        options.simple(r=16, num_subspaces=4, subspace_rank=1),
        requires=("sklearn",),
        note="r=16 SVD rank (default 100 > tiny dims), 4 subspaces; needs scikit-learn (KMeans)",
    ),
    Method(
        "shadow",
        "SHADOW",
        "ShadowConfig",
        options.shadow,
        cannot_run={
            **TUNER_LIMITS,
            SEQ_CLS: CAUSAL_LM_ONLY,
            "merge-unmerge": "its adaptation is input-dependent, not a weight delta, so PEFT refuses to merge it",
        },
        architecture_specific=False,
        note="wraps every decoder block, 1-layer mirrored shadow backbone; decoder-only; cannot be merged",
    ),
    Method(
        "xlora",
        "XLORA",
        "XLoraConfig",
        options.xlora,
        cannot_run={
            **TUNER_LIMITS,
            SEQ_CLS: CAUSAL_LM_ONLY,
            "multi-adapter": "add_adapter fails ('XLoraConfig' object has no attribute 'target_modules')",
            "merge-unmerge": "X-LoRA mixes its experts per token, so there is no one weight delta to merge",
            "gradient-checkpointing": "gradient checkpointing trips a CheckpointError",
        },
        note="2 random LoRA experts written to a temp dir, depth-1 classifier, use_cache off. Seq-cls fails to load "
        "the experts' classifier; gradient checkpointing trips a CheckpointError; merge is not meaningful",
        base_config_overrides={"use_cache": False},
        peft_apis=("peft.utils.get_peft_model_state_dict",),
    ),
    Method(
        "trainable-tokens",
        "TRAINABLE_TOKENS",
        "TrainableTokensConfig",
        options.trainable_tokens,
        cannot_run={
            **TUNER_LIMITS,
            ("qwen2", "multi-adapter"): f"{_TIED}: a second adapter fails ('wraps an unknown layer type')",
            ("opt", "multi-adapter"): f"{_TIED}: a second adapter fails ('wraps an unknown layer type')",
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
        options.prompt_learning(),
        cannot_run=_PROMPT_LIMITS,
        note=f"{NUM_VIRTUAL_TOKENS} random virtual tokens",
    ),
    Method(
        "multitask-prompt-tuning",
        "MULTITASK_PROMPT_TUNING",
        "MultitaskPromptTuningConfig",
        options.prompt_learning(num_tasks=NUM_TASKS),
        cannot_run=_PROMPT_LIMITS,
        note=f"{NUM_VIRTUAL_TOKENS} virtual tokens, {NUM_TASKS} tasks; the batch carries task_ids",
        batch_keys=("task_ids",),
    ),
    Method(
        "p-tuning",
        "P_TUNING",
        "PromptEncoderConfig",
        options.p_tuning,
        cannot_run=_PROMPT_LIMITS,
        note=f"{NUM_VIRTUAL_TOKENS} virtual tokens, MLP encoder of the model's hidden size",
    ),
    Method(
        "prefix-tuning",
        "PREFIX_TUNING",
        "PrefixTuningConfig",
        options.prompt_learning(),
        cannot_run=_KV_PREFIX_LIMITS,
        architecture_specific=True,
        note=f"{NUM_VIRTUAL_TOKENS} virtual tokens fed as past_key_values (per-architecture cache handling); "
        f"no gradient checkpointing: {_GC_PREFIX}",
    ),
    Method(
        "cartridge",
        "CARTRIDGE",
        "CartridgeConfig",
        options.prompt_learning(),
        cannot_run=_KV_PREFIX_LIMITS,
        architecture_specific=True,
        note=f"{NUM_VIRTUAL_TOKENS}-token trainable KV prefix fed as past_key_values, first token frozen; "
        f"no gradient checkpointing: {_GC_PREFIX}",
    ),
    Method(
        "cpt",
        "CPT",
        "CPTConfig",
        options.cpt,
        cannot_run={**TUNER_LIMITS, **_NO_WEIGHTS_TO_MERGE, SEQ_CLS: CAUSAL_LM_ONLY},
        note="one 4-token in-context example (types 1-4); no input_type_mask in the batch (CPT mutates it)",
    ),
    Method(
        "adaption-prompt",
        "ADAPTION_PROMPT",
        "AdaptionPromptConfig",
        options.adaption_prompt,
        cannot_run={
            **TUNER_LIMITS,
            SEQ_CLS: CAUSAL_LM_ONLY,
            "qwen2": _ADAPTION_ARCHS,
            "opt": _ADAPTION_ARCHS,
            "bert": _ADAPTION_ARCHS,
            "merge-unmerge": "it adds gated prompts to attention, not a weight delta to merge",
        },
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
