"""The method registry: one entry per PEFT method (every PeftType that can wrap a tiny model) plus LoRA variants.

Each `Method.make_config(spec, rank=None, dropout=None)` returns a fresh PeftConfig sized for `spec` (the options
come from `config_builders`). What a method cannot run is declared in its `cannot_run`, with the reason, on top of
the default `TUNER_LIMITS`; a default the method does have is named in its `lifts`, with the reason. Every selector
(what a reason applies to) is typed and checked when this module is imported. The checks that read the limits are
in `skip_reasons`.

The registry lists every method whatever peft is installed (case ids stay stable); config classes are named, not
imported, so a method the installed peft lacks (its PeftType, config class, an option or API) is a skip with the
reason, e.g. "pvera: not in peft 0.18.1 (no peft.PeftType.PVERA, peft.PveraConfig)" (`installed_peft`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import ClassVar

import peft

from . import config_builders as options
from .config_builders import ADALORA_TOTAL_STEP, NUM_TASKS, NUM_VIRTUAL_TOKENS, TRAINABLE_TOKEN_IDS, Deferred, Options
from .models import CAUSAL_LM, IMAGE_CLS, MODELS, SEQ_CLS, ModelSpec

OPERATIONS = (
    "multi-adapter",
    "disable-adapter",
    "merge-unmerge",
    "mixed-batch",
    "hotswap",
    "gradient-checkpointing",
    "generate",
)
TASKS = (CAUSAL_LM, SEQ_CLS, IMAGE_CLS)
ARCHITECTURES = tuple(dict.fromkeys(spec.arch for spec in MODELS.values()))


# ------------------------------------------------------------------------------ selectors: what a reason applies to


@dataclass(frozen=True, repr=False)
class _Name:
    name: str
    KIND: ClassVar[str]
    KNOWN: ClassVar[tuple[str, ...]]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def unknown(self) -> list[str]:
        """This selector's names that the zoo lacks, each with its kind (empty when it names only known ones)."""
        if self.name in self.KNOWN:
            return []
        return [f"unknown {self.KIND} {self.name!r} (known: {', '.join(self.KNOWN)})"]


@dataclass(frozen=True, repr=False)
class Architecture(_Name):
    """A model architecture of the zoo (`ModelSpec.arch`): Architecture("bert")."""

    KIND: ClassVar[str] = "architecture"
    KNOWN: ClassVar[tuple[str, ...]] = ARCHITECTURES


@dataclass(frozen=True, repr=False)
class Task(_Name):
    """A model task (`ModelSpec.task`): Task(SEQ_CLS)."""

    KIND: ClassVar[str] = "task"
    KNOWN: ClassVar[tuple[str, ...]] = TASKS


@dataclass(frozen=True, repr=False)
class Operation(_Name):
    """A lifecycle operation, one of OPERATIONS: Operation("merge-unmerge")."""

    KIND: ClassVar[str] = "operation"
    KNOWN: ClassVar[tuple[str, ...]] = OPERATIONS

    def on(self, where: Architecture | Task) -> OperationOn:
        """The operation on one architecture or task only: Operation("merge-unmerge").on(Architecture("llama"))."""
        return OperationOn(where, self)


@dataclass(frozen=True, repr=False)
class OperationOn:
    """An operation PEFT has for the method, but not on this architecture or task."""

    where: Architecture | Task
    operation: Operation

    def __repr__(self) -> str:
        return f"{self.operation!r}.on({self.where!r})"

    def unknown(self) -> list[str]:
        """Its names that the zoo lacks, and a `where` that is no architecture or task."""
        if not isinstance(self.where, Architecture | Task):
            return [f"{self.where!r} where an Architecture or a Task belongs", *_unknown(self.operation)]
        return self.where.unknown() + _unknown(self.operation)


Selector = Architecture | Task | Operation | OperationOn


def _unknown(selector: object) -> list[str]:
    if not isinstance(selector, Selector):
        return [f"{selector!r}, which is not a selector (Architecture, Task, Operation or Operation(...).on(...))"]
    return selector.unknown()


def check_selectors(owner: str, table: Mapping[Selector, str]) -> None:
    """Raise ValueError naming `owner` and every name in `table`'s selectors that the zoo lacks."""
    unknown = [name for selector in table for name in _unknown(selector)]
    if unknown:
        raise ValueError(f"{owner} names {'; '.join(unknown)}")


# ------------------------------------------------------------------------------ reasons

# Operation support below was checked eagerly on every tiny model (bench_models.check_registry); the reasons
# quote what PEFT raises or does.
_MIXED_BATCH = "PEFT implements adapter_names (an adapter per row) only for LoRA, RoAd and GLoRA"
_HOTSWAP = "PEFT's hotswap_adapter swaps LoRA adapters only"
# What PEFT lacks for most tuners: every method's `cannot_run` adds to it, its `lifts` takes entries out.
TUNER_LIMITS: Mapping[Selector, str] = MappingProxyType(
    {Operation("mixed-batch"): _MIXED_BATCH, Operation("hotswap"): _HOTSWAP}
)
_LORA_MIXES = {Operation("mixed-batch"): "PEFT implements adapter_names for LoRA"}
_LORA_SWAPS = {Operation("hotswap"): "PEFT's hotswap_adapter swaps LoRA adapters"}

CAUSAL_LM_ONLY = "supports: causal-lm"
_NO_WEIGHTS_TO_MERGE = {Operation("merge-unmerge"): "it adds virtual tokens, not a weight delta to merge"}
_TIED = "tied input/output embeddings"
EMBEDDING_HOTSWAP = "PEFT's hotswap_adapter raises KeyError on the adapted embedding's keys"
_NO_MERGE_TIED = f"{_TIED}: merging the embedding adapter also changes the tied lm_head (peft#2777)"
_NO_SECOND_TIED = f"{_TIED}: a second adapter fails ('wraps an unknown layer type')"
_NO_MIX_SEQ_CLS = "adapter_names only reaches the method's own layers, not the classifier's modules_to_save copy"
_NO_MERGE_NO_BIAS = "llama's linear layers have no bias to merge the bias adapter into"
_PROMPT_SEQ_CLS = "PEFT's disable_adapter() raises UnboundLocalError for prompt learning on seq-cls models"
_PREFIX_NOT_BERT = "PEFT's prefix tuning needs past_key_values, which BertModel.forward does not take"
_ADAPTION_ARCHS = "PEFT's adaption prompt only supports the llama, mistral and gpt2 model types"
_GC_PREFIX = "gradient checkpointing drops the cache, so the prefix keys/values are lost (shape mismatch)"
_KV_PREFIX_LIMITS = {
    **_NO_WEIGHTS_TO_MERGE,
    Architecture("bert"): _PREFIX_NOT_BERT,
    Operation("gradient-checkpointing"): _GC_PREFIX,
}
# Architectures of the zoo with no weight kept as nn.Parameter (ModelSpec.expert_parameters) for target_parameters.
_NO_EXPERT_PARAMETERS = {
    Architecture(arch): "no nn.Parameter target (MoE experts) in this architecture"
    for arch in ARCHITECTURES
    if not any(spec.expert_parameters for spec in MODELS.values() if spec.arch == arch)
}
# Architectures whose default targets are not Linear layers (ModelSpec.target_kind), or not Conv2d ones.
_NOT_LINEAR_TARGETS = {
    Architecture(spec.arch): f"its default targets are {spec.target_kind}, whose weights are no 2-D parameter of a"
    " Linear layer"
    for spec in MODELS.values()
    if spec.target_kind != "Linear"
}
_NOT_CONV2D_TARGETS = {
    Architecture(spec.arch): f"use_effective_conv2d applies to convolutions; its default targets are {spec.target_kind}"
    for spec in MODELS.values()
    if spec.target_kind != "Conv2d"
}
# Architectures of the zoo with no convolution of groups > 1 (ModelSpec.grouped_conv_modules).
_NO_GROUPED_CONV = {
    Architecture(arch): "no convolution with groups > 1 in this architecture"
    for arch in ARCHITECTURES
    if not any(spec.grouped_conv_modules for spec in MODELS.values() if spec.arch == arch)
}
# Methods that adapt token embeddings or prepend virtual tokens need token ids; an image classifier takes pixels.
_TOKENS = "it adapts token embeddings or adds virtual tokens; an image classifier takes pixel values"
_PROMPT_LIMITS = {
    **_NO_WEIGHTS_TO_MERGE,
    Operation("disable-adapter").on(Task(SEQ_CLS)): _PROMPT_SEQ_CLS,
    Task(IMAGE_CLS): _TOKENS,
}

# PeftModelForSequenceClassification adds the classifier to modules_to_save; hotswap swaps lora_* only.
_NO_HOTSWAP_SEQ_CLS = "hotswap swaps only LoRA weights, not the classifier copy every seq-cls adapter trains"
# Cases no method can run, in the same form; the reason is the whole skip message ({model}, {task}: the case's).
ZOO_RULES: dict[Selector, str] = {
    Operation("gradient-checkpointing").on(Architecture("convnext")): "transformers' ConvNeXt does not support "
    "activation checkpointing (ValueError)",
    Operation("generate").on(Task(SEQ_CLS)): "generate needs a causal LM, {model} is {task}",
    Operation("generate").on(Task(IMAGE_CLS)): "generate needs a causal LM, {model} is {task}",
    Operation("hotswap").on(Task(SEQ_CLS)): _NO_HOTSWAP_SEQ_CLS,
}
check_selectors("ZOO_RULES", ZOO_RULES)


# ------------------------------------------------------------------------------ methods


def _limit_problems(cannot_run: Mapping[Selector, str], lifts: Mapping[Selector, str]) -> list[str]:
    """What is wrong with a method's `cannot_run` and `lifts` beyond unknown names."""
    problems = [f"lifts {s!r}, which is not in TUNER_LIMITS" for s in lifts if s not in TUNER_LIMITS]
    problems += [f"{s!r} is both in cannot_run and in lifts" for s in lifts if s in cannot_run]
    problems += [
        f"cannot_run repeats TUNER_LIMITS' reason for {s!r}" for s, r in cannot_run.items() if r == TUNER_LIMITS.get(s)
    ]
    problems += [f"no reason for {s!r}" for s, r in {**cannot_run, **lifts}.items() if not r.strip()]
    return problems


@dataclass(frozen=True)
class Method:
    name: str
    peft_type: str
    # The PeftConfig subclass, by name: looked up in the installed peft only when needed, so that a method the
    # installed peft lacks is a skip with its reason, never an import error.
    config_class: str
    # (spec, *, rank=None, dropout=None) -> the config's keyword arguments.
    options: Callable[..., Options] = field(compare=False, repr=False)
    # Selector -> why the method cannot run there, added to TUNER_LIMITS (an entry for one of TUNER_LIMITS' selectors
    # gives the method's own reason instead of the default one).
    cannot_run: Mapping[Selector, str] = field(default_factory=dict, compare=False)
    # A TUNER_LIMITS selector -> why the method has it after all ("PEFT implements adapter_names for LoRA").
    lifts: Mapping[Selector, str] = field(default_factory=dict, compare=False)
    requires: tuple[str, ...] = ()
    architecture_specific: bool = False
    # The person's words on the configuration: never a restatement of a reason above.
    note: str = ""
    # Extra inputs the forward needs ("task_ids"); make_batch adds them.
    batch_keys: tuple[str, ...] = ()
    # Token ids the batch must contain for the adapter to see a gradient (trainable tokens); make_batch adds them.
    batch_token_ids: tuple[int, ...] = ()
    # Attributes set on the base model's config before wrapping (X-LoRA refuses use_cache=True).
    base_config_overrides: dict[str, object] = field(default_factory=dict, compare=False)
    # Other PEFT APIs the method uses, as dotted names ("peft.utils.get_peft_model_state_dict").
    peft_apis: tuple[str, ...] = ()
    # No registry entry: derived from what the installed PEFT declares (bench_models.derived_methods).
    derived: bool = False
    # (spec) -> adapters added beside the one under test right after wrapping, by name -> their LoraConfig's keyword
    # arguments: what the adapter under test reads of others (Arrow's router mixes its task adapters).
    companions: Callable[[ModelSpec], Mapping[str, Options]] | None = field(default=None, compare=False, repr=False)
    # Everything the method cannot run, derived: TUNER_LIMITS less `lifts`, plus `cannot_run`.
    limits: Mapping[Selector, str] = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        check_selectors(f"method {self.name!r} cannot_run", self.cannot_run)
        check_selectors(f"method {self.name!r} lifts", self.lifts)
        problems = _limit_problems(self.cannot_run, self.lifts)
        if problems:
            raise ValueError(f"method {self.name!r}: {'; '.join(problems)}")
        kept = {selector: reason for selector, reason in TUNER_LIMITS.items() if selector not in self.lifts}
        object.__setattr__(self, "limits", MappingProxyType({**kept, **self.cannot_run}))

    def make_config(self, spec: ModelSpec, *, rank: int | None = None, dropout: float | None = None):
        """A fresh PeftConfig sized for `spec`, of the installed peft's config class."""
        kwargs = self.options(spec, rank=rank, dropout=dropout)
        resolved = {k: v.compute() if isinstance(v, Deferred) else v for k, v in kwargs.items()}
        return getattr(peft, self.config_class)(**resolved)

    def supports(self, operation: str) -> bool:
        """Whether PEFT has `operation` for the method (an architecture or task may still rule it out)."""
        return Operation(operation) not in self.limits


_METHOD_LIST = [
    # LoRA and its variants
    Method(
        "lora",
        "LORA",
        "LoraConfig",
        options.lora,
        lifts={**_LORA_MIXES, **_LORA_SWAPS},
        note="r=8, alpha=16, dropout 0.1 on the q/v projections",
    ),
    Method(
        "lora-dora",
        "LORA",
        "LoraConfig",
        options.lora_dora,
        cannot_run={
            Operation("mixed-batch"): "PEFT refuses adapter_names with DoRA",
            Operation("hotswap"): "hotswap does not know DoRA's magnitude vector",
        },
        note="use_dora",
    ),
    Method(
        "lora-rslora",
        "LORA",
        "LoraConfig",
        options.lora_rslora,
        lifts={**_LORA_MIXES, **_LORA_SWAPS},
        note="use_rslora (alpha/sqrt(r) scaling)",
    ),
    Method(
        "lora-embedding",
        "LORA",
        "LoraConfig",
        options.lora_embedding,
        cannot_run={
            Operation("hotswap"): EMBEDDING_HOTSWAP,
            Operation("merge-unmerge").on(Architecture("qwen2")): _NO_MERGE_TIED,
            Operation("merge-unmerge").on(Architecture("opt")): _NO_MERGE_TIED,
            Operation("merge-unmerge").on(Architecture("gpt2")): _NO_MERGE_TIED,
        },
        lifts=_LORA_MIXES,
        architecture_specific=False,
        note="LoRA on the input embedding only; behaviour depends on whether the arch ties lm_head to it",
    ),
    Method(
        "lora-modules-to-save",
        "LORA",
        "LoraConfig",
        options.lora_modules_to_save,
        cannot_run={Operation("hotswap"): "PEFT's hotswap_adapter raises KeyError on the modules_to_save copy's keys"},
        lifts=_LORA_MIXES,
        architecture_specific=False,
        note="LoRA on q/v + a trained copy of lm_head / classifier; the lm_head copy unties tied embeddings",
    ),
    Method(
        "lora-trainable-token-indices",
        "LORA",
        "LoraConfig",
        options.lora_trainable_tokens,
        cannot_run={Operation("hotswap"): "PEFT's hotswap_adapter raises KeyError on the trainable tokens' delta"},
        lifts=_LORA_MIXES,
        architecture_specific=False,
        note="LoRA on q/v + trainable_token_indices (TrainableTokens on the embedding, tied to lm_head if tied)",
        batch_token_ids=TRAINABLE_TOKEN_IDS,
    ),
    Method(
        "lora-bias",
        "LORA",
        "LoraConfig",
        options.lora_bias,
        cannot_run={Operation("merge-unmerge").on(Architecture("llama")): _NO_MERGE_NO_BIAS},
        lifts={**_LORA_MIXES, **_LORA_SWAPS},
        note="lora_bias=True (bias on lora_B)",
    ),
    Method(
        "lora-parameters",
        "LORA",
        "LoraConfig",
        options.lora_parameters,
        cannot_run={
            **_NO_EXPERT_PARAMETERS,
            Operation("mixed-batch"): "lora.ParamWrapper does not support mixed adapter batches yet (a ValueError)",
        },
        note="target_parameters on the MoE experts' gate_up_proj and down_proj (peft's ParamWrapper), no module; "
        "r=8, alpha=16, dropout 0 (ParamWrapper refuses any other)",
    ),
    Method(
        "lora-conv-groups",
        "LORA",
        "LoraConfig",
        options.lora_conv_groups,
        cannot_run={
            **_NO_GROUPED_CONV,
            Operation("merge-unmerge"): "PEFT does not merge LoRA into convolutions with groups > 1 "
            "(NotImplementedError)",
            Operation("hotswap"): "PEFT cannot pad a Conv2d LoRA adapter with groups > 1 to a target rank its groups"
            " do not divide (ValueError)",
        },
        lifts=_LORA_MIXES,
        note="LoRA on the depthwise convolutions (groups = channels), the rank raised to a multiple of their groups",
    ),
    Method(
        "lora-parameters-dense",
        "LORA",
        "LoraConfig",
        options.lora_parameters_dense,
        cannot_run={
            **_NOT_LINEAR_TARGETS,
            Operation("mixed-batch"): "lora.ParamWrapper does not support mixed adapter batches yet (a ValueError)",
        },
        note="target_parameters on the attention projections' 2-D weights (peft's ParamWrapper and its parameter"
        " proxy), no module; dropout 0 (ParamWrapper refuses any other)",
    ),
    Method(
        "adalora",
        "ADALORA",
        "AdaLoraConfig",
        options.adalora,
        cannot_run={
            Operation("multi-adapter"): "PEFT allows one trainable AdaLoRA adapter and update_and_allocate only "
            "tracks that one",
        },
        note=f"init_r=12 -> target_r=8, total_step={ADALORA_TOTAL_STEP} so rank pruning happens within a few steps; "
        "train_step calls update_and_allocate",
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
    Method(
        "loha-conv-cp",
        "LOHA",
        "LoHaConfig",
        options.with_fixed(options.low_rank_product, use_effective_conv2d=True),
        cannot_run=_NOT_CONV2D_TARGETS,
        note="r=8, alpha=8, use_effective_conv2d: a convolution's weights as a CP decomposition (HadaWeightCP)",
    ),
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
            Operation("merge-unmerge"): "PEFT's Poly has no merge (NotImplementedError)",
            Operation("gradient-checkpointing"): "the recompute runs outside the hook that injects task_ids",
        },
        note=f"n_tasks={NUM_TASKS}, n_skills=4, the batch carries task_ids",
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
        cannot_run={Operation("mixed-batch").on(Task(SEQ_CLS)): _NO_MIX_SEQ_CLS},
        lifts={Operation("mixed-batch"): "PEFT implements adapter_names for RoAd"},
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
        cannot_run={Operation("merge-unmerge"): "PEFT has no merge for Lily"},
        note="defaults",
    ),
    Method(
        "glora",
        "GLORA",
        "GloraConfig",
        options.simple(rank_field="r"),
        cannot_run={Operation("mixed-batch").on(Task(SEQ_CLS)): _NO_MIX_SEQ_CLS},
        lifts={Operation("mixed-batch"): "PEFT implements adapter_names for GLoRA"},
        note="defaults",
    ),
    Method(
        "glora-vector",
        "GLORA",
        "GloraConfig",
        options.simple(rank_field="r", config_A_B="vector", config_C="vector", config_D_E="vector"),
        cannot_run={Operation("mixed-batch").on(Task(SEQ_CLS)): _NO_MIX_SEQ_CLS},
        lifts={Operation("mixed-batch"): "PEFT implements adapter_names for GLoRA"},
        note="every path a vector (config_A_B, config_C, config_D_E: GloraVectorPath)",
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
        cannot_run={Operation("merge-unmerge"): "OSF models do not support unmerging"},
        note="defaults (effective_rank = half the smaller dim)",
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
        cannot_run={Operation("merge-unmerge").on(Architecture("llama")): _NO_MERGE_NO_BIAS},
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
            Task(SEQ_CLS): CAUSAL_LM_ONLY,
            Operation("merge-unmerge"): "its adaptation is input-dependent, not a weight delta, so PEFT refuses to "
            "merge it",
        },
        architecture_specific=False,
        note="wraps every decoder block, 1-layer mirrored shadow backbone",
    ),
    Method(
        "xlora",
        "XLORA",
        "XLoraConfig",
        options.xlora,
        cannot_run={
            Task(SEQ_CLS): CAUSAL_LM_ONLY,
            Operation("multi-adapter"): "add_adapter fails ('XLoraConfig' object has no attribute 'target_modules')",
            Operation("merge-unmerge"): "X-LoRA mixes its experts per token, so there is no one weight delta to merge",
            Operation("gradient-checkpointing"): "gradient checkpointing trips a CheckpointError",
        },
        note="2 random LoRA experts written to a temp dir, depth-1 classifier, use_cache off; on a seq-cls model it "
        "fails to load the experts' classifier",
        base_config_overrides={"use_cache": False},
        peft_apis=("peft.utils.get_peft_model_state_dict",),
    ),
    Method(
        "trainable-tokens",
        "TRAINABLE_TOKENS",
        "TrainableTokensConfig",
        options.trainable_tokens,
        cannot_run={
            Operation("multi-adapter").on(Architecture("qwen2")): _NO_SECOND_TIED,
            Operation("multi-adapter").on(Architecture("opt")): _NO_SECOND_TIED,
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
        note=f"{NUM_VIRTUAL_TOKENS} virtual tokens fed as past_key_values (per-architecture cache handling)",
    ),
    Method(
        "cartridge",
        "CARTRIDGE",
        "CartridgeConfig",
        options.prompt_learning(),
        cannot_run=_KV_PREFIX_LIMITS,
        architecture_specific=True,
        note=f"{NUM_VIRTUAL_TOKENS}-token trainable KV prefix fed as past_key_values, first token frozen",
    ),
    Method(
        "cpt",
        "CPT",
        "CPTConfig",
        options.cpt,
        cannot_run={**_NO_WEIGHTS_TO_MERGE, Task(SEQ_CLS): CAUSAL_LM_ONLY},
        note="one 4-token in-context example (types 1-4); no input_type_mask in the batch (CPT mutates it)",
    ),
    Method(
        "adaption-prompt",
        "ADAPTION_PROMPT",
        "AdaptionPromptConfig",
        options.adaption_prompt,
        cannot_run={
            Task(SEQ_CLS): CAUSAL_LM_ONLY,
            Architecture("qwen2"): _ADAPTION_ARCHS,
            Architecture("opt"): _ADAPTION_ARCHS,
            Architecture("bert"): _ADAPTION_ARCHS,
            Operation("merge-unmerge"): "it adds gated prompts to attention, not a weight delta to merge",
        },
        architecture_specific=True,
        note=f"adapter_len={NUM_VIRTUAL_TOKENS} on the top layer (PEFT re-implements llama attention)",
    ),
]

# Methods whose layers do not take GPT-2's Conv1D (gpt2-tiny's c_attn), in PEFT's words: what get_peft_model raises
# (bench_models.check_registry --all --models gpt2-tiny, peft 0.21.2).
_ONLY = "Target module Conv1D is not supported. Currently, only {} supported"
_NO_CONV1D = {
    "loha": "currently only adapters for Conv2d, Conv1d, Linear are supported (TypeError on Conv1D)",
    "lokr": "currently only adapters for Conv2d, Conv1d, Linear are supported (TypeError on Conv1D)",
    "boft": _ONLY.format("`torch.nn.Linear` and `torch.nn.Conv2d` (optionally quantized) are"),
    "oft": _ONLY.format("`torch.nn.Linear`, `torch.nn.Conv2d`, `torch.nn.Embedding` (optionally quantized) are"),
    "hra": _ONLY.format("`torch.nn.Linear` and `torch.nn.Conv2d` are"),
    "poly": _ONLY.format("`torch.nn.Linear` is"),
    "c3a": _ONLY.format("`torch.nn.Linear` is"),
    "road": _ONLY.format("`torch.nn.Linear` is"),
    "shira": _ONLY.format("`torch.nn.Linear` is"),
    "lily": "Lily does not support target modules of type Conv1D yet",
    "glora": "Target module Conv1D is not a plain torch.nn.Linear (after unwrapping); GLoRA does not support this "
    "layer type",
    "delora": _ONLY.format("`torch.nn.Linear` is"),
    "miss": _ONLY.format("`torch.nn.Linear` (optionally quantized) is"),
    "osf": "OSF wraps no Conv1D, so nothing is trainable (the optimizer gets an empty parameter list)",
    "peanut": "PEANuT does not support target modules of type Conv1D yet",
    "psoft": "Target module Conv1D is not supported by minimal PSOFT. Only torch.nn.Linear is supported",
    "supertuning": _ONLY.format("`torch.nn.Linear` is"),
    "beft": _ONLY.format("`torch.nn.Linear` is"),
    "adamss": _ONLY.format("`torch.nn.Linear` is"),
    "xlora": "X-LoRA fails to load LoRA experts on Conv1D ('Got unexpected keys!': the experts' c_attn lora_A/lora_B)",
}

# Methods with no layer for ConvNeXt's plain Conv2d (convnext-tiny's default targets), in PEFT's words
# (bench_models.check_registry --all --models convnext-tiny, peft 0.21.2).
_LINEAR_ONLY = "Target module Conv2d is not supported. Currently, only `torch.nn.Linear` is supported"
_LINEAR_CONV1D = "Target module Conv2d is not supported. Currently, only `torch.nn.Linear`, `Conv1D` are supported"
_NO_CONV2D = {
    **dict.fromkeys(
        ("fourierft", "poly", "c3a", "road", "shira", "waveft", "delora", "supertuning", "beft", "adamss"), _LINEAR_ONLY
    ),
    **dict.fromkeys(("vblora", "gralora", "unilora", "deft"), _LINEAR_CONV1D),
    "vera": "No layers types compatible with VeRA were found (VeRA has no Conv2d layer)",
    "pvera": "No layers types compatible with PVeRA were found (PVeRA has no Conv2d layer)",
    "frod": "No layer types compatible with FRoD were found (FRoD has no Conv2d layer)",
    "randlora": "No layers types compatible with RandLora were found (RandLoRA has no Conv2d layer)",
    "lily": "Lily does not support target modules of type Conv2d yet",
    "glora": "Target module Conv2d is not a plain torch.nn.Linear (after unwrapping); GLoRA does not support this "
    "layer type",
    "tinylora": "TinyLoRA has layers for Linear and Embedding only: a Conv2d target raises KeyError",
    "miss": "Target module Conv2d is not supported. Currently, only `torch.nn.Linear` (optionally quantized) is "
    "supported",
    "osf": "OSF wraps no Conv2d, so nothing is trainable (the optimizer gets an empty parameter list)",
    "peanut": "PEANuT does not support target modules of type Conv2d yet",
    "psoft": "Target module Conv2d is not supported by minimal PSOFT. Only torch.nn.Linear is supported",
}
# Methods with no layer for nn.MultiheadAttention (mha-tiny's default target), in PEFT's words
# (bench_models.check_registry --all --models mha-tiny, peft 0.21.2). LoRA adapts it as a whole.
_NOT_MHA = "Target module MultiheadAttention is not supported. Currently, only {} supported"
_NO_MHA = {
    **{
        name: _NOT_MHA.format("`torch.nn.Linear` is")
        for name in ("fourierft", "poly", "c3a", "road", "shira", "waveft", "delora", "supertuning", "beft", "adamss")
    },
    **{name: _NOT_MHA.format("`torch.nn.Linear`, `Conv1D` are") for name in ("vblora", "gralora", "unilora", "deft")},
    **{name: _NOT_MHA.format("`torch.nn.Linear`, `torch.nn.Conv2d`, ... are") for name in ("adalora", "ia3", "hira")},
    **{name: _NOT_MHA.format("`torch.nn.Linear` and `torch.nn.Conv2d` are") for name in ("boft", "oft", "hra")},
    "lora-dora": "MultiheadAttention does not support DoRA (yet), please set use_dora to False",
    "loha": "Target module of type MultiheadAttention not supported, currently only adapters for Conv2d, Conv1d, Linear"
    " are supported",
    "lokr": "Target module of type MultiheadAttention not supported, currently only adapters for Conv2d, Conv1d, Linear"
    " are supported",
    "vera": "No layers types compatible with VeRA were found (VeRA has no MultiheadAttention layer)",
    "pvera": "No layers types compatible with PVeRA were found (PVeRA has no MultiheadAttention layer)",
    "frod": "No layer types compatible with FRoD were found (FRoD has no MultiheadAttention layer)",
    "randlora": "No layers types compatible with RandLora were found (RandLoRA has no MultiheadAttention layer)",
    "lily": "Lily does not support target modules of type MultiheadAttention yet",
    "glora": "Target module MultiheadAttention is not a plain torch.nn.Linear (after unwrapping); GLoRA does not "
    "support this layer type",
    "tinylora": "TinyLoRA has layers for Linear and Embedding only: a MultiheadAttention target raises KeyError",
    "miss": _NOT_MHA.format("`torch.nn.Linear` (optionally quantized) is"),
    "peanut": "PEANuT does not support target modules of type MultiheadAttention yet",
    "psoft": "Target module MultiheadAttention is not supported by minimal PSOFT. Only torch.nn.Linear is supported",
    "prefix-tuning": "PEFT's prefix tuning reads the model's transformer_backbone_name, which a model outside "
    "transformers' families lacks (AttributeError)",
    "cartridge": "PEFT's cartridge reads the model's transformer_backbone_name, which a model outside transformers' "
    "families lacks (AttributeError)",
}
_MHA_NO_MIX = "lora.MultiheadAttention does not support mixed adapter batches (TypeError)"
# Method -> what it cannot run on the zoo's architectures of other layer kinds, besides its own limits.
_ON_LAYER_KINDS: dict[str, dict[Selector, str]] = {}
for _arch, _table in (("gpt2", _NO_CONV1D), ("convnext", _NO_CONV2D), ("mha_classifier", _NO_MHA)):
    for _name, _reason in _table.items():
        _ON_LAYER_KINDS.setdefault(_name, {})[Architecture(_arch)] = _reason
for _name in ("lora", "lora-rslora", "lora-modules-to-save", "lora-trainable-token-indices", "lora-bias"):
    _ON_LAYER_KINDS.setdefault(_name, {})[Operation("mixed-batch").on(Architecture("mha_classifier"))] = _MHA_NO_MIX
_ON_LAYER_KINDS.setdefault("oft", {})[Operation("merge-unmerge").on(Architecture("convnext"))] = (
    "the model merged from OFT's Conv2d layers gives other logits than the unmerged one (eager, check_registry)"
)
# A configuration of a method has the method's layers, and what they lack.
for _name, _of in (("glora-vector", "glora"), ("loha-conv-cp", "loha")):
    _ON_LAYER_KINDS[_name] = {**_ON_LAYER_KINDS.get(_of, {}), **_ON_LAYER_KINDS.get(_name, {})}
# What needs token ids or a causal LM cannot run on an image classifier.
_TOKEN_METHODS = ("lora-embedding", "lora-trainable-token-indices", "trainable-tokens", "prefix-tuning", "cartridge")
for _name in _TOKEN_METHODS:
    _ON_LAYER_KINDS.setdefault(_name, {})[Task(IMAGE_CLS)] = _TOKENS


def _image_limits(method: Method) -> dict[Selector, str]:
    causal_only = method.cannot_run.get(Task(SEQ_CLS)) == CAUSAL_LM_ONLY
    return {Task(IMAGE_CLS): CAUSAL_LM_ONLY} if causal_only else {}


_METHOD_LIST = [
    replace(m, cannot_run={**m.cannot_run, **_image_limits(m), **_ON_LAYER_KINDS.get(m.name, {})}) for m in _METHOD_LIST
]

REGISTERED: dict[str, Method] = {m.name: m for m in _METHOD_LIST}

# PeftTypes of older peft releases that a method here covers under their current name. Only those the installed
# peft exports are excluded, so the exclusions never name a PeftType that does not exist.
_RETIRED_PEFT_TYPES = {
    "BONE": "Bone is MiSS under its old name (the miss method); peft deprecated BoneConfig for MissConfig and "
    "removed it in 0.19",
}
EXCLUDED_PEFT_TYPES: dict[str, str] = {
    name: reason for name, reason in _RETIRED_PEFT_TYPES.items() if name in peft.PeftType.__members__
}


# ------------------------------------------------------------------------------ LoRA's variants

# Every LoRA variant the installed peft declares is a method (bench_models.lora_variants), derived from PEFT's
# declarations: its field, the value defaults give, its layer classes. An entry here makes it known (it has budgets,
# so the gate no longer runs it as a new case) and gives what the declarations cannot, each once, by name.


@dataclass(frozen=True)
class KnownVariant:
    """A LoRA variant the registry knows. ``value``: (spec) -> the value of its LoraConfig field where the derived one
    (True for a flag, the config class's defaults) does not fit; ``cannot_run`` adds to what its variant class says,
    ``lifts`` takes out what it rules out but PEFT has (``python -m bench_models.check_registry --unclaimed``)."""

    value: Callable[[ModelSpec], object] | None = None
    cannot_run: Mapping[Selector, str] = field(default_factory=dict)
    lifts: Mapping[Selector, str] = field(default_factory=dict)
    note: str = ""
    batch_token_ids: tuple[int, ...] = ()
    companions: Callable[[ModelSpec], Mapping[str, Options]] | None = None  # as Method.companions


_VARIANT_STATE_IS_LORA = "its adapter state is lora_A and lora_B only, which hotswap_adapter swaps"
# aLoRA applies its weights from the last occurrence of these tokens on; make_batch puts them after the first token.
ALORA_INVOCATION_TOKENS = (13, 17)


def _block_diagonal_attention(spec: ModelSpec):
    """BD-LoRA's two block-diagonal kinds, one on each attention projection the LoRA options target."""
    first, second = spec.attention_modules[:2]
    return peft.BdLoraConfig(target_modules_bd_a=[first], target_modules_bd_b=[second], nblocks=2)


ARROW_TASK_ADAPTERS = ("task_0", "task_1")
_ARROW_ROUTES_ALIKE = (
    "a second Arrow router over the same task adapters routes alike, so its output is the first's and the"
    " scenario's check cannot tell the adapters apart"
)


def _arrow_router(spec: ModelSpec):
    """Arrow's router as create_arrow_model configures it (it sets the adapter names, which __init__ does not take)."""
    router = peft.ArrowConfig(top_k=1, rng_seed=0)
    router.task_adapter_names, router.gks_adapter_names = list(ARROW_TASK_ADAPTERS), []
    return router


def _arrow_task_adapters(spec: ModelSpec) -> dict[str, Options]:
    """Arrow's task adapters as create_arrow_model finds them: LoRA on the router's targets, trained (random lora_B,
    init_lora_weights=False), so that their prototypes (the top singular vector of each B @ A) are not zero."""
    return {name: options.lora_options(spec, None, None, init_lora_weights=False) for name in ARROW_TASK_ADAPTERS}


# Variant name (its LoraConfig field, or its init_lora_weights value) -> what the registry knows of it.
LORA_VARIANTS: dict[str, KnownVariant] = {
    "velora_config": KnownVariant(note="VeloraConfig defaults (64 groups: the tiny models' 64-wide inputs)"),
    "alora_invocation_tokens": KnownVariant(
        value=lambda spec: list(ALORA_INVOCATION_TOKENS),
        cannot_run={Task(SEQ_CLS): CAUSAL_LM_ONLY},
        lifts={Operation("hotswap"): _VARIANT_STATE_IS_LORA},
        note=f"invocation tokens {list(ALORA_INVOCATION_TOKENS)}, in every row of the batch",
        batch_token_ids=ALORA_INVOCATION_TOKENS,
    ),
    "monteclora_config": KnownVariant(
        cannot_run={
            Operation("gradient-checkpointing"): "MonteCLoRA's buffered sampler hands out the next sample on every"
            " forward, so the recompute perturbs lora_A differently and the gradients differ",
        },
        note="MontecloraConfig defaults (8 samples)",
    ),
    "use_bdlora": KnownVariant(
        value=_block_diagonal_attention,
        cannot_run={
            Architecture("gpt2"): "GPT-2 has one fused attention projection (c_attn), and BD-LoRA's two block-diagonal"
            " kinds need two",
        },
        note="nblocks=2; block-diagonal lora_A on the first attention projection, lora_B on the second (the defaults "
        "name no module, which PEFT refuses)",
    ),
    "kasa_config": KnownVariant(
        cannot_run={
            Operation("disable-adapter"): "KaSA truncates the base weight when the adapter is created, so the model"
            " with the adapter disabled is not the base model",
            Architecture("gpt2"): "PEFT: KaSA does not support `fan_in_fan_out=True` layers (GPT-2's Conv1D)",
        },
        note="KasaConfig defaults (truncates the base weight's r smallest singular values)",
    ),
    "arrow_config": KnownVariant(
        value=_arrow_router,
        companions=_arrow_task_adapters,
        cannot_run={
            Operation("multi-adapter"): _ARROW_ROUTES_ALIKE,
            Operation("mixed-batch"): _ARROW_ROUTES_ALIKE,
            Operation("gradient-checkpointing"): "with gradient checkpointing no gradient reaches the router's"
            " weights (check_registry)",
        },
        note=f"the router (top_k=1) over two trained task adapters {list(ARROW_TASK_ADAPTERS)}, added beside it as"
        " create_arrow_model loads them",
    ),
    "mica": KnownVariant(
        lifts={Operation("hotswap"): _VARIANT_STATE_IS_LORA},
        note="init_lora_weights='mica' (lora_B frozen to the base weight's smallest singular vectors)",
    ),
}
# Variants PEFT declares that get no method, with the reason.
EXCLUDED_LORA_VARIANTS: dict[str, str] = {}


# ------------------------------------------------------------------------------ methods on the input embedding

# Method -> (the PEFT class that adapts its embedding, what it cannot run there besides its own limits and
# embedding_methods.EMBEDDING_LIMITS). Each is also a method "<name>-embedding" (bench_models.embedding_methods).
EMBEDDING_LAYERS: dict[str, tuple[str, Mapping[Selector, str]]] = {
    "lora-dora": ("peft.tuners.lora.variants.DoraEmbeddingVariant", {}),
    "lora-mica": ("peft.tuners.lora.variants.MiCAEmbeddingVariant", {}),
    "oft": ("peft.tuners.oft.layer.Embedding", {}),
    "hira": ("peft.tuners.hira.layer.Embedding", {}),
    "tinylora": ("peft.tuners.tinylora.layer.Embedding", {}),
    "xlora": (
        "peft.tuners.xlora.layer.XLoraEmbeddingLayer",
        {
            Operation("disable-adapter"): "with the adapter disabled, the output still differs from the base model's"
            " (eager, check_registry)",
            Architecture("gpt2"): "X-LoRA fails to load LoRA experts of GPT-2's embedding ('Got unexpected keys!')",
        },
    ),
}
