"""Which cases exist: zoo (models x methods) x scenarios x tiers, each with a stable readable id."""

from __future__ import annotations

import dataclasses

from bench_models import CORE_METHODS, METHODS, MODELS, OPERATIONS
from compile_audit.policy import CompilePolicy

# Scenario -> the lifecycle operation a method must support to run it (None: every method). Each lifecycle
# operation is a scenario of the same name.
SCENARIOS: dict[str, str | None] = {
    "train-eval-train": None,
    **{operation: operation for operation in OPERATIONS},
    "dynamic-modes": None,
    "depth": None,
    "trainer": None,
    "save-load": None,
    "inject-compiled": None,
    "inject-compiled-base": None,
    "ddp": None,
    "fsdp2": None,
}
EVERY = "<every method>"
ARCHITECTURE_SPECIFIC = "<every method with architecture-specific code>"
TINY_MODELS = tuple(key for key, spec in MODELS.items() if spec.cpu_matrix and not spec.quantization)
QUANTIZED_MODELS = tuple(key for key, spec in MODELS.items() if spec.cpu_matrix and spec.quantization)
LIFECYCLE_DEFAULT_METHODS = ("lora",)
QUANTIZED_DEFAULT_METHODS = ("lora", "lora-dora")
DISTRIBUTED_DEFAULT_METHODS = {"ddp": ("lora", "ia3"), "fsdp2": ("lora",)}
DISTRIBUTED_SCENARIOS = tuple(DISTRIBUTED_DEFAULT_METHODS)


@dataclasses.dataclass(frozen=True)
class Selection:
    """The CPU tier's cases of one scenario: model -> methods, by default and with --full-matrix, and why in one
    line. A method list may hold EVERY or ARCHITECTURE_SPECIFIC (the methods with architecture-specific code)."""

    default: dict[str, tuple[str, ...]]
    full: dict[str, tuple[str, ...]]
    why: str


_EVERY_TINY = dict.fromkeys(TINY_MODELS, (EVERY,))
_LIFECYCLE = Selection(
    {"llama-tiny": LIFECYCLE_DEFAULT_METHODS, "bert-tiny": LIFECYCLE_DEFAULT_METHODS},
    _EVERY_TINY,
    "LoRA on a causal LM and on the classifier (PEFT's two task paths); every method that supports it with"
    " --full-matrix",
)
_ON_LLAMA = Selection(
    {"llama-tiny": LIFECYCLE_DEFAULT_METHODS}, _EVERY_TINY, "LoRA on llama-tiny; every method with --full-matrix"
)


def _distributed(scenario: str) -> Selection:
    return Selection(
        {"llama-tiny": DISTRIBUTED_DEFAULT_METHODS[scenario]},
        {"llama-tiny": CORE_METHODS, **dict.fromkeys([m for m in TINY_MODELS if m != "llama-tiny"], ("lora",))},
        "two ranks each: the core methods on llama-tiny and LoRA on the other models with --full-matrix only",
    )


# Every scenario's selection (a scenario missing here fails collection, naming it). Cases also left out of the
# default run are in FULL_MATRIX_ONLY (below).
SELECTION: dict[str, Selection] = {
    "train-eval-train": Selection(
        {
            "llama-tiny": (EVERY,),
            "qwen2-tiny": ("lora", ARCHITECTURE_SPECIFIC),
            "opt-tiny": ("lora", ARCHITECTURE_SPECIFIC),
            "bert-tiny": ("lora", "prompt-tuning", ARCHITECTURE_SPECIFIC),
            **dict.fromkeys(QUANTIZED_MODELS, QUANTIZED_DEFAULT_METHODS),
        },
        {**_EVERY_TINY, **dict.fromkeys(QUANTIZED_MODELS, (EVERY,))},
        "every method on llama-tiny; elsewhere LoRA, the architecture-specific methods and bert-tiny's prompt path;"
        " QLoRA's two setups on the quantized bases",
    ),
    **{operation: _LIFECYCLE for operation in OPERATIONS},
    "dynamic-modes": Selection(
        {"llama-tiny": (*LIFECYCLE_DEFAULT_METHODS, "cartridge"), "bert-tiny": LIFECYCLE_DEFAULT_METHODS},
        _EVERY_TINY,
        "LoRA on both task paths, and Cartridge, whose one default case this is (a known failure: it recompiles on"
        " every call); every method that supports it with --full-matrix",
    ),
    "depth": Selection(
        {"llama-tiny": ("lora",)}, _EVERY_TINY, "LoRA at 1 and 4 layers; every method with --full-matrix"
    ),
    "trainer": Selection(
        {"llama-tiny": ("lora", "lora-dora"), "bert-tiny": ("lora",)},
        _EVERY_TINY,
        "LoRA on both task paths and DoRA (under the recompile limit here, so its breaks stay judged)",
    ),
    "save-load": _ON_LLAMA,
    "inject-compiled": _ON_LLAMA,
    "inject-compiled-base": _ON_LLAMA,
    **{scenario: _distributed(scenario) for scenario in DISTRIBUTED_SCENARIOS},
}

# Cases run with --full-matrix only, to keep the default run at 10 minutes; known failures hold only what they name
# (compile_audit.verdict), so a known failure that is cheap stays in the default run, FRoD, Poly, ShiRA and WaveFT
# (at the recompile limit) among them. (model, scenario) -> methods: DoRA in train-eval-train, here and on
# bitsandbytes NF4, at the recompile limit (its breaks are guarded by llama-tiny/lora-dora/trainer, under the limit);
# Cartridge, which recompiles on every call and whose split of those recompiles into expected and unexpected ones
# depends on when the garbage collector frees the class it makes per call (its default case is dynamic-modes, whose
# counts do not); LoRA with gradient checkpointing and dropout (peft#3020; bert-tiny's case stays) and
# inject-compiled-base (`_orig_mod.` keys). DoRA at depth and under DDP and FSDP2 are left out of SELECTION's defaults.
FULL_MATRIX_ONLY: dict[tuple[str, str], tuple[str, ...]] = {
    ("llama-tiny", "train-eval-train"): ("lora-dora", "cartridge"),
    ("llama-tiny-bnb4", "train-eval-train"): ("lora-dora",),
    ("qwen2-tiny", "train-eval-train"): ("cartridge",),
    ("opt-tiny", "train-eval-train"): ("cartridge",),
    # Not a known failure: FP4 compiles as NF4 does (LoRA: the same counts; DoRA: the same recompile-limit known
    # failure; 12 and), and NF4, QLoRA's default, runs by default.
    ("llama-tiny-bnb4-fp4", "train-eval-train"): ("lora", "lora-dora"),
    ("llama-tiny", "gradient-checkpointing"): ("lora",),
    ("llama-tiny", "inject-compiled-base"): ("lora",),
}
# Quantized bases (bench_models/quantized.py) run train-eval-train only: LoRA and DoRA by default (QLoRA's two
# setups; but FULL_MATRIX_ONLY), every method PEFT puts on their layers with --full-matrix; bitsandbytes also on the
# GPU tier.
GPU_QUANTIZED_MODELS = ("llama-tiny-bnb4", "llama-tiny-bnb4-fp4")
GPU_MODELS = ("llama-tiny", "llama-3.2-1b", "llama-3.2-3b", "qwen2.5-0.5b")

CPU_BACKENDS = ("eager", "aot_eager", "inductor")
# Inductor on CPU compiles in tens of seconds per graph on 2 cores, so --cpu-backend inductor runs this selection only
# (scenario -> model -> methods), with or without --full-matrix: the GPU tier's backend on the core methods, so that
# inductor's compile, AOTAutograd with inductor and parity at inductor's tolerance run on every change.
INDUCTOR_SELECTION: dict[str, dict[str, tuple[str, ...]]] = {
    "train-eval-train": {"llama-tiny": ("lora", "lora-dora", "ia3", "prompt-tuning")},
}
# The plan of the scenarios that run a model more than once per case (depth: two depths; ddp/fsdp2: two ranks and an
# eager reference), shorter than train-eval-train's: (phase, kind, sequence length). Two lengths before the first
# eval exercise dynamic shapes; the first train -> eval -> train cycle ends at train-3, after which nothing may
# compile.
SHORT_CYCLE_PLAN = [
    ("train-1", "train", 8),
    ("train-2", "train", 12),
    ("eval-1", "eval", 8),
    ("train-3", "train", 8),
    ("eval-2", "eval", 12),
    ("train-4", "train", 12),
]
SHORT_CYCLE_ENDS = "train-3"
# Compiled-vs-eager parity per (device, backend) (compile_audit.parity): elementwise for fp32 with Dynamo's own
# backends, whose kernels are eager's; per-tensor relative error for inductor's fused kernels, in fp32 on CPU and
# in bf16 on CUDA (bf16 rounds at about 4e-3 per element, a scaled or dropped gradient moves the whole tensor).
TOLERANCES: dict[tuple[str, str], dict[str, float]] = {
    ("cpu", "eager"): {"rtol": 1e-4, "atol": 1e-5},
    ("cpu", "aot_eager"): {"rtol": 1e-4, "atol": 1e-5},
    ("cpu", "inductor"): {"relative_norm": 1e-4},
    ("cuda", "inductor"): {"relative_norm": 2e-2},
}


@dataclasses.dataclass(frozen=True)
class Case:
    model: str
    method: str
    scenario: str
    device: str = "cpu"  # "cpu" or "cuda"
    backend: str = "eager"

    @property
    def tier(self) -> str:
        return "cpu" if self.device == "cpu" else "cuda"

    @property
    def dtype(self) -> str | None:
        """The dtype the case's model is built in (a ``torch`` attribute name); None: the model's own (fp32)."""
        return "bfloat16" if self.tier == "cuda" else None

    def compile_policy(self, audited: bool, fake_tensor_cache: bool = False) -> CompilePolicy:
        """The settings the case runs under besides its backend (applied and recorded by the gate); ``audited``: its
        test is judged for parity, ``fake_tensor_cache``: keep Dynamo's cache on in the CPU tier too."""
        dynamo = {}
        # Dynamo's fake-tensor cache makes each fresh tiny model trace slower, not faster: a case builds new modules,
        # so nearly every lookup misses and pays for the entry it stores. A CPU-tier case judges what Dynamo does
        # (breaks, guards, recompiles), which the cache does not change (docs/scenarios.md gives the comparison).
        # The GPU tier keeps it: its compile seconds are what a user sees. So do the ranks of ddp and fsdp2, which
        # start from fresh interpreters: under DDP the cache changes what Dynamo does (with it off, IA3's ranks
        # specialise the labels' length and recompile).
        if self.tier == "cpu" and not fake_tensor_cache and self.scenario not in DISTRIBUTED_SCENARIOS:
            dynamo["fake_tensor_cache_enabled"] = False
        # Inductor generates its own random-number kernels, so with dropout on a case judged for parity would differ
        # from eager by its masks alone: there inductor calls eager's random ops instead.
        inductor = {"fallback_random": True} if audited and self.backend == "inductor" else {}
        # SDPA's fused CUDA kernels match eager only within their own noise (the efficient-attention backward is not
        # deterministic) and guard on the sequence length's alignment, neither PEFT's doing (results/README.md):
        # a GPU case judged for parity runs attention on the math kernel; the step benchmarks keep the fused ones.
        attention = "MATH" if audited and self.tier == "cuda" else None
        # Tiny models gain nothing from intra-op threads, and two xdist workers with two OpenMP threads each
        # oversubscribe a 2-core machine.
        return CompilePolicy(dynamo=dynamo, inductor=inductor, attention=attention, threads=1)

    @property
    def tolerance(self) -> dict[str, float]:
        """Keyword arguments of compile_audit.parity's comparisons for this case."""
        return TOLERANCES[(self.tier, self.backend)]

    def report_fields(self) -> dict[str, str]:
        """The case's identity in the compile report."""
        fields = ("model", "method", "scenario", "device", "backend")
        return {**{name: getattr(self, name) for name in fields}, "tier": self.tier}

    @property
    def id(self) -> str:
        base = f"{self.model}/{self.method}/{self.scenario}"
        if (self.device, self.backend) == ("cpu", "eager"):
            return base
        return f"{base}@{self.device}-{self.backend}"


def operation_of(scenario: str) -> str | None:
    return SCENARIOS[scenario]


def _supports(method: str, scenario: str) -> bool:
    operation = SCENARIOS[scenario]
    return operation is None or METHODS[method].supports(operation)


def _resolve(methods: tuple[str, ...]) -> list[str]:
    if EVERY in methods:
        return list(METHODS)
    if ARCHITECTURE_SPECIFIC in methods:
        return [m for m in METHODS if m in methods or METHODS[m].architecture_specific]
    return [m for m in methods if m in METHODS]


def _cpu_methods(model: str, scenario: str, full_matrix: bool) -> list[str]:
    if scenario not in SELECTION:
        raise ValueError(f"scenario {scenario!r} has no entry in SELECTION (tests/cases.py): say which cases it runs")
    selection = SELECTION[scenario]
    return _resolve((selection.full if full_matrix else selection.default).get(model, ()))


def cases_for(
    scenario: str, *, full_matrix: bool = False, cpu_backend: str = "eager", with_cases: frozenset[str] = frozenset()
) -> list[Case]:
    """The scenario's cases: the default selection, or the full matrix; ``with_cases``: the default selection plus
    the full-matrix cases of these ids (a selection by change, compile_audit.change_selection)."""
    cases = _cases_for(scenario, full_matrix=full_matrix, cpu_backend=cpu_backend)
    if full_matrix or not with_cases:
        return cases
    chosen = {case.id for case in cases}
    extra = [
        case
        for case in _cases_for(scenario, full_matrix=True, cpu_backend=cpu_backend)
        if case.id in with_cases and case.id not in chosen
    ]
    return cases + extra


def _cases_for(scenario: str, *, full_matrix: bool, cpu_backend: str) -> list[Case]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known scenarios: {', '.join(SCENARIOS)}")
    if cpu_backend not in CPU_BACKENDS:
        raise ValueError(f"--cpu-backend must be one of {CPU_BACKENDS}, got {cpu_backend!r}")
    if cpu_backend == "inductor":
        return [
            Case(model, method, scenario, "cpu", cpu_backend)
            for model, methods in INDUCTOR_SELECTION.get(scenario, {}).items()
            for method in methods
            if method in METHODS
        ]
    cases = []
    for model, spec in MODELS.items():
        if not spec.cpu_matrix:
            continue
        cases += [
            Case(model, method, scenario, "cpu", cpu_backend)
            for method in _cpu_methods(model, scenario, full_matrix)
            if _supports(method, scenario)
            and (full_matrix or method not in FULL_MATRIX_ONLY.get((model, scenario), ()))
        ]
    gpu_methods = list(METHODS) if full_matrix else [m for m in CORE_METHODS if m in METHODS]
    if scenario in DISTRIBUTED_SCENARIOS or (scenario != "train-eval-train" and not full_matrix):
        gpu_methods = [m for m in LIFECYCLE_DEFAULT_METHODS if m in METHODS]
    for model in GPU_MODELS:
        cases += [Case(model, m, scenario, "cuda", "inductor") for m in gpu_methods if _supports(m, scenario)]
    if scenario == "train-eval-train":
        cases += [
            Case(m, method, scenario, "cuda", "inductor")
            for m in GPU_QUANTIZED_MODELS
            for method in QUANTIZED_DEFAULT_METHODS
        ]
    return cases


def all_case_ids() -> set[str]:
    """Every case any run could produce (full matrix, both tiers): entries outside it are stale."""
    return {
        case.id
        for scenario in SCENARIOS
        for backend in CPU_BACKENDS
        for case in cases_for(scenario, full_matrix=True, cpu_backend=backend)
    }
