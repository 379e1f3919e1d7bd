"""Which cases exist: zoo (models x methods) x scenarios x tiers, each with a stable readable id."""

from __future__ import annotations

import dataclasses
import enum

from bench_models import CORE_METHODS, METHODS, MODELS, OPERATIONS
from compile_audit.case_ids import CaseId
from compile_audit.probe.policy import CompilePolicy

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
DISTRIBUTED_SCENARIOS = ("ddp", "fsdp2")
CPU_BACKENDS = ("eager", "aot_eager", "inductor")
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
# Compiled-vs-eager parity per (device, backend) (compile_audit.probe.parity): elementwise for fp32 with Dynamo's own
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
    def judged_by_causes(self) -> bool:
        """A method the registry does not know yet: with no entry, it may have what the budgets' causes explain."""
        return METHODS[self.method].derived

    @property
    def dtype(self) -> str | None:
        """The dtype the case's model is built in (a ``torch`` attribute name); None: the model's own (fp32)."""
        return "bfloat16" if self.tier == "cuda" else None

    def compile_policy(self, audited: bool, fake_tensor_cache: bool = False, regional: bool = False) -> CompilePolicy:
        """The settings the case runs under besides its backend (applied and recorded by the gate); ``audited``: its
        test is judged for parity, ``fake_tensor_cache``: keep Dynamo's cache on in the CPU tier too, ``regional``:
        compile each repeated block instead of the whole model."""
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
        # Every dimension dynamic from the first compile: a scenario's batches change length between phases, and a
        # case judges PEFT's code, not automatic dynamic's one recompile per new length (the dynamic-modes scenario
        # judges that, with dynamic=None named at its call).
        return CompilePolicy(
            dynamo=dynamo, inductor=inductor, attention=attention, threads=1, dynamic=True, regional=regional
        )

    @property
    def tolerance(self) -> dict[str, float]:
        """Keyword arguments of compile_audit.probe.parity's comparisons for this case."""
        return TOLERANCES[(self.tier, self.backend)]

    def report_fields(self) -> dict[str, str | bool]:
        """The case's identity in the compile report."""
        fields = ("model", "method", "scenario", "device", "backend")
        # A derived method's case: base may lack the method (scripts/gate runs it on head only).
        return {**{name: getattr(self, name) for name in fields}, "tier": self.tier, "derived": self.judged_by_causes}

    @property
    def id(self) -> str:
        base = f"{self.model}/{self.method}/{self.scenario}"
        if (self.device, self.backend) == ("cpu", "eager"):
            return base
        return f"{base}@{self.device}-{self.backend}"


def operation_of(scenario: str) -> str | None:
    return SCENARIOS[scenario]


# Which cases exist is SELECTION, one table of rows: a case exists where a row names its scenario, model and method
# and the method supports the scenario's operation (its limits in bench_models). The default run has the rows that are
# not full_matrix_only, --full-matrix has every row. A row belongs to the runs of its cpu_backends (--cpu-backend):
# its CPU-tier cases run on that backend, its GPU-tier cases on inductor.


class Group(enum.Enum):
    """Methods named by what they share, read from the registry (bench_models.METHODS)."""

    EVERY = "every method"
    ARCHITECTURE_SPECIFIC = "every method with architecture-specific code"
    CORE = "the core methods (bench_models.CORE_METHODS)"
    DERIVED = "every method the registry does not know yet, derived from what PEFT declares"

    def includes(self, method: str) -> bool:
        if self is Group.EVERY:
            return True
        if self is Group.DERIVED:
            return METHODS[method].derived
        if self is Group.ARCHITECTURE_SPECIFIC:
            return METHODS[method].architecture_specific
        return method in CORE_METHODS


@dataclasses.dataclass(frozen=True)
class Methods:
    """A row's methods: these by name and every method of these groups, less those it leaves out by name."""

    names: tuple[str, ...] = ()
    groups: tuple[Group, ...] = ()
    left_out: tuple[str, ...] = ()

    def plus(self, *names: str) -> Methods:
        return dataclasses.replace(self, names=(*self.names, *names))

    def but(self, *names: str) -> Methods:
        return dataclasses.replace(self, left_out=(*self.left_out, *names))

    def resolve(self) -> list[str]:
        """The methods, in registry order."""
        return [m for m in METHODS if self._includes(m) and m not in self.left_out]

    def _includes(self, method: str) -> bool:
        return method in self.names or any(group.includes(method) for group in self.groups)

    def problems(self) -> list[str]:
        """What is wrong with the set: a name the registry does not have (the registry lists every method whatever
        peft is installed, so none is dropped), a group that is not a Group, a method left out that it lacks."""
        problems = [f"{group!r} is not a method group (Group)" for group in self.groups if not isinstance(group, Group)]
        problems += [
            f"unknown method {name!r} (not in bench_models.METHODS)"
            for name in (*self.names, *self.left_out)
            if name not in METHODS
        ]
        if problems:
            return problems
        problems += [
            f"leaves out {name!r}, which it does not include" for name in self.left_out if not self._includes(name)
        ]
        # The derived methods are those the installed peft adds: none, until a pull request adds one.
        return problems or ([] if self.resolve() or Group.DERIVED in self.groups else ["no method"])


def named(*names: str) -> Methods:
    return Methods(names=names)


EVERY_METHOD = Methods(groups=(Group.EVERY,))
ARCHITECTURE_SPECIFIC = Methods(groups=(Group.ARCHITECTURE_SPECIFIC,))
CORE = Methods(groups=(Group.CORE,))
DERIVED = Methods(groups=(Group.DERIVED,))

DEVICES = ("cpu", "cuda")
GPU_BACKEND = "inductor"
# The --cpu-backend runs of the CPU matrix and of the GPU tier. Inductor on CPU compiles in tens of seconds per graph
# on 2 cores, so --cpu-backend inductor runs its own rows only, with or without --full-matrix.
DYNAMO_BACKENDS = ("eager", "aot_eager")


@dataclasses.dataclass(frozen=True)
class Row:
    """Cases of SELECTION: every scenario x model x method of the row whose method supports the scenario, on
    ``device`` (the tier), in the runs of ``cpu_backends``, by default or with --full-matrix only; ``why`` in one
    line. A single scenario, model or backend may be given as a string."""

    scenarios: tuple[str, ...]
    models: tuple[str, ...]
    methods: Methods
    why: str
    device: str = "cpu"
    cpu_backends: tuple[str, ...] = DYNAMO_BACKENDS
    full_matrix_only: bool = False

    def __post_init__(self):
        for name in ("scenarios", "models", "cpu_backends"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, (getattr(self, name),))
        problems = self.problems()
        if problems:
            raise ValueError(f"{self} in SELECTION (tests/cases.py): {'; '.join(problems)}")

    def __str__(self) -> str:
        scenarios = ", ".join(self.scenarios)
        if len(self.scenarios) > 3:
            scenarios = f"{', '.join(self.scenarios[:3])}, ... ({len(self.scenarios)} scenarios)"
        return f"the row ({scenarios}; {', '.join(self.models)}; why {self.why!r})"

    def problems(self) -> list[str]:
        problems = [f"unknown scenario {s!r} (not in SCENARIOS)" for s in self.scenarios if s not in SCENARIOS]
        problems += [f"unknown model {m!r} (not in bench_models.MODELS)" for m in self.models if m not in MODELS]
        if self.device == "cpu":
            problems += [
                f"model {m!r} is not in the CPU matrix (its ModelSpec.cpu_matrix is False)"
                for m in self.models
                if m in MODELS and not MODELS[m].cpu_matrix
            ]
        elif self.device not in DEVICES:
            problems.append(f"unknown device {self.device!r} (one of {', '.join(DEVICES)})")
        problems += [
            f"unknown backend {b!r} (one of {', '.join(CPU_BACKENDS)})"
            for b in self.cpu_backends
            if b not in CPU_BACKENDS
        ]
        if isinstance(self.methods, Methods):
            problems += self.methods.problems()
        else:
            problems.append(
                f"methods {self.methods!r} is not a Methods (named(...), EVERY_METHOD, ARCHITECTURE_SPECIFIC, CORE)"
            )
        empty = [name for name in ("scenarios", "models", "cpu_backends") if not getattr(self, name)]
        problems += [f"no {name}" for name in empty] + ([] if str(self.why).strip() else ["no why"])
        return problems


TRAIN_EVAL_TRAIN = "train-eval-train"
# Spelled out, not read from SCENARIOS, so that a new scenario has no row until one says which cases it runs.
SINGLE_PROCESS = (
    TRAIN_EVAL_TRAIN,
    *OPERATIONS,
    "dynamic-modes",
    "depth",
    "trainer",
    "save-load",
    "inject-compiled",
    "inject-compiled-base",
)
TINY_MODELS = tuple(key for key, spec in MODELS.items() if spec.cpu_matrix and not spec.quantization)
# The tiny architectures whose adapted layers are nn.Linear alone: where a method PEFT adds is expected to build. On
# GPT-2's Conv1D or MoE experts PEFT may refuse a new tuner's layers, which its registry entry then says.
LINEAR_TINY_MODELS = tuple(
    key for key in TINY_MODELS if key not in ("gpt2-tiny", "qwen3-moe-tiny", "convnext-tiny", "mha-tiny")
)
# Of the methods PEFT has a Conv2d layer for (the others skip on convnext-tiny with PEFT's words, bench_models.methods),
# the default run compiles one of each family of conv code (LoRA's, DoRA's, grouped, a scaling, an orthogonal one).
CONV_DEFAULT_METHODS = ("lora", "lora-dora", "lora-conv-groups", "ia3", "oft")
QUANTIZED_MODELS = tuple(key for key, spec in MODELS.items() if spec.cpu_matrix and spec.quantization)
QUANTIZED_DEFAULT_METHODS = ("lora", "lora-dora")  # QLoRA's two setups
GPU_MODELS = ("llama-tiny", "llama-3.2-1b", "llama-3.2-3b", "qwen2.5-0.5b")
GPU_QUANTIZED_MODELS = ("llama-tiny-bnb4", "llama-tiny-bnb4-fp4")
_LORA_ON_BOTH_TASK_PATHS = (*(op for op in OPERATIONS if op != "gradient-checkpointing"), "dynamic-modes", "trainer")

_unknown_core = [m for m in CORE_METHODS if m not in METHODS]
if _unknown_core:
    raise ValueError(f"CORE_METHODS (bench_models/slices.py) names unknown method(s) {_unknown_core}")

# Known failures run in the default run wherever time allows, since they hold only what they name
# (compile_audit.rules.verdict): FRoD, Poly, ShiRA and WaveFT on llama-tiny, at the recompile limit, among them. The
# default rows leave out what is too slow for a 10-minute run or judged elsewhere; --full-matrix runs it.
SELECTION: tuple[Row, ...] = (
    # The CPU tier, --full-matrix
    Row(SINGLE_PROCESS, TINY_MODELS, EVERY_METHOD, "every method on every tiny architecture", full_matrix_only=True),
    Row(
        TRAIN_EVAL_TRAIN,
        QUANTIZED_MODELS,
        EVERY_METHOD,
        "every method on the quantized bases (those PEFT has no layer for skip with the reason); FP4 only here, as it"
        " compiles as NF4 does (LoRA: the same counts; DoRA: the same recompile-limit known failure)",
        full_matrix_only=True,
    ),
    Row(
        DISTRIBUTED_SCENARIOS,
        "llama-tiny",
        CORE,
        "two ranks each: the core methods on llama-tiny",
        full_matrix_only=True,
    ),
    Row(
        DISTRIBUTED_SCENARIOS,
        ("qwen2-tiny", "opt-tiny", "bert-tiny"),
        named("lora"),
        "two ranks each: LoRA on the other tiny architectures",
        full_matrix_only=True,
    ),
    # The CPU tier, default run
    Row(
        TRAIN_EVAL_TRAIN,
        LINEAR_TINY_MODELS,
        DERIVED,
        "a method the registry does not know yet (a pull request adding it), on every tiny architecture of Linear"
        " layers",
    ),
    Row(OPERATIONS, "llama-tiny", DERIVED, "a method the registry does not know yet: every operation its layers have"),
    Row(
        TRAIN_EVAL_TRAIN,
        "llama-tiny",
        EVERY_METHOD.but("lora-dora", "cartridge"),
        "every method on llama-tiny, but DoRA, at the recompile limit here (llama-tiny/lora-dora/trainer guards its"
        " breaks), and Cartridge (its default case is in dynamic-modes)",
    ),
    Row(
        TRAIN_EVAL_TRAIN,
        ("qwen2-tiny", "opt-tiny"),
        ARCHITECTURE_SPECIFIC.plus("lora").but("cartridge"),
        "LoRA and the methods with architecture-specific code, but Cartridge",
    ),
    Row(
        TRAIN_EVAL_TRAIN,
        "bert-tiny",
        ARCHITECTURE_SPECIFIC.plus("lora", "prompt-tuning"),
        "LoRA, the methods with architecture-specific code and the classifier's prompt path",
    ),
    Row(
        TRAIN_EVAL_TRAIN, "gpt2-tiny", named("lora"), "LoRA on GPT-2's Conv1D (fan_in_fan_out): a layer kind of its own"
    ),
    Row(
        TRAIN_EVAL_TRAIN,
        "qwen3-moe-tiny",
        named("lora-parameters"),
        "LoRA on MoE experts kept as nn.Parameter (target_parameters, peft's ParamWrapper), a layer kind of its own",
    ),
    Row(
        TRAIN_EVAL_TRAIN,
        "convnext-tiny",
        named(*CONV_DEFAULT_METHODS),
        "a method of each family of conv code, on ConvNeXt's plain and depthwise (groups > 1) convolutions; the"
        " other methods with a Conv2d layer with --full-matrix",
    ),
    Row(
        (TRAIN_EVAL_TRAIN, "merge-unmerge"),
        "mha-tiny",
        named("lora"),
        "LoRA on nn.MultiheadAttention, which it merges into the module's packed in-projection on every forward"
        " (hot-swap: a sequence classifier's, which no method has)",
    ),
    Row(TRAIN_EVAL_TRAIN, "llama-tiny-bnb4", named("lora"), "QLoRA on NF4 (DoRA on NF4 is at the recompile limit)"),
    Row(
        "mixed-batch",
        "llama-tiny-bnb4",
        named("lora"),
        "LoRA's adapter per row on a 4-bit base: Linear4bit's own _mixed_batch_forward",
    ),
    Row(TRAIN_EVAL_TRAIN, "llama-tiny-int8", named(*QUANTIZED_DEFAULT_METHODS), "QLoRA's two setups on torchao int8"),
    Row(
        _LORA_ON_BOTH_TASK_PATHS,
        ("llama-tiny", "bert-tiny"),
        named("lora"),
        "LoRA on a causal LM and on the classifier (PEFT's two task paths)",
    ),
    Row(
        "gradient-checkpointing",
        "bert-tiny",
        named("lora"),
        "LoRA on the classifier; on llama-tiny, checkpointing with dropout is a known failure (peft#3020)",
    ),
    # Cartridge recompiles on every call; in train-eval-train how those recompiles split into expected and
    # unexpected ones depends on when the garbage collector frees the class it makes per call, in dynamic-modes not.
    Row("dynamic-modes", "llama-tiny", named("cartridge"), "Cartridge's default case, a known failure"),
    Row("trainer", "llama-tiny", named("lora-dora"), "DoRA, under the recompile limit here, so its breaks stay judged"),
    Row(
        ("depth", "save-load", "inject-compiled"),
        "llama-tiny",
        named("lora"),
        "LoRA on llama-tiny (depth: at 1 and 4 layers); inject-compiled-base, a known failure (`_orig_mod.` keys),"
        " with --full-matrix only",
    ),
    Row("ddp", "llama-tiny", named("lora", "ia3"), "two ranks: LoRA and IA3 (DoRA is at the recompile limit)"),
    Row("fsdp2", "llama-tiny", named("lora"), "two ranks: LoRA (IA3 compiles as LoRA does here, DoRA is at the limit)"),
    # --cpu-backend inductor
    Row(
        TRAIN_EVAL_TRAIN,
        "llama-tiny",
        named("lora", "lora-dora", "ia3", "prompt-tuning"),
        "the GPU tier's backend on four core methods: inductor's compile, AOTAutograd with inductor and parity at"
        " inductor's tolerance on every change",
        cpu_backends="inductor",
    ),
    # The GPU tier
    Row(SINGLE_PROCESS, GPU_MODELS, EVERY_METHOD, "every method", device="cuda", full_matrix_only=True),
    Row(TRAIN_EVAL_TRAIN, GPU_MODELS, CORE, "the core methods", device="cuda"),
    Row(
        tuple(s for s in (*SINGLE_PROCESS, *DISTRIBUTED_SCENARIOS) if s != TRAIN_EVAL_TRAIN),
        GPU_MODELS,
        named("lora"),
        "LoRA in every other scenario; under DDP and FSDP2 (NCCL, one GPU per rank) with --full-matrix too",
        device="cuda",
    ),
    Row(
        TRAIN_EVAL_TRAIN,
        GPU_QUANTIZED_MODELS,
        named(*QUANTIZED_DEFAULT_METHODS),
        "QLoRA's two setups on bitsandbytes NF4 and FP4",
        device="cuda",
    ),
)
_missing = [s for s in SCENARIOS if not any(s in row.scenarios for row in SELECTION)]
if _missing:
    raise ValueError(f"scenario(s) {_missing} have no entry in SELECTION (tests/cases.py): say which cases they run")


def _supports(method: str, scenario: str) -> bool:
    operation = SCENARIOS[scenario]
    return operation is None or METHODS[method].supports(operation)


_MODEL_ORDER = {model: i for i, model in enumerate(MODELS)}
_METHOD_ORDER = {method: i for i, method in enumerate(METHODS)}


def _order(case: Case) -> tuple:
    # Tier by tier; within one, the full-precision bases before the quantized ones, each in MODELS order (the GPU
    # tier's full-size models come after the quantized tiny ones in MODELS); methods in registry order.
    model = MODELS[case.model]
    return (case.device != "cpu", bool(model.quantization), _MODEL_ORDER[case.model], _METHOD_ORDER[case.method])


def cases_for(
    scenario: str, *, full_matrix: bool = False, cpu_backend: str = "eager", with_cases: frozenset[str] = frozenset()
) -> list[Case]:
    """The scenario's cases: the default selection, or the full matrix; ``with_cases``: the default selection plus
    the full-matrix cases of these ids (a selection by change, compile_audit.selection.change_selection)."""
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
    rows = [row for row in SELECTION if scenario in row.scenarios]
    if not rows:
        raise ValueError(f"scenario {scenario!r} has no entry in SELECTION (tests/cases.py): say which cases it runs")
    cases = {
        Case(model, method, scenario, row.device, cpu_backend if row.device == "cpu" else GPU_BACKEND)
        for row in rows
        if cpu_backend in row.cpu_backends and (full_matrix or not row.full_matrix_only)
        for model in row.models
        for method in row.methods.resolve()
        if _supports(method, scenario)
    }
    return sorted(cases, key=_order)


def all_case_ids() -> set[str]:
    """Every case any run could produce (full matrix, both tiers): entries outside it are stale."""
    return {
        case.id
        for scenario in SCENARIOS
        for backend in CPU_BACKENDS
        for case in cases_for(scenario, full_matrix=True, cpu_backend=backend)
    }


def _full_matrix_only() -> dict[tuple[str, str], tuple[str, ...]]:
    left_out: dict[tuple[str, str], list[str]] = {}
    for scenario in SCENARIOS:
        default = set(_cases_for(scenario, full_matrix=False, cpu_backend="eager"))
        for case in _cases_for(scenario, full_matrix=True, cpu_backend="eager"):
            if case.tier == "cpu" and case not in default:
                left_out.setdefault((case.model, scenario), []).append(case.method)
    return {key: tuple(methods) for key, methods in left_out.items()}


# (model, scenario) -> the CPU tier's methods that run with --full-matrix only, derived from SELECTION.
FULL_MATRIX_ONLY = _full_matrix_only()


def derived_case_templates(cpu_backend: str = "eager") -> list[str]:
    """The ids of the cases a method the registry does not know gets in the default run, ``{method}`` in place of its
    name (before its layers' limits leave some out): what a pull request adding a method runs on the gate."""
    return sorted(
        str(CaseId(model, "{method}", scenario, row.device, cpu_backend))
        for row in SELECTION
        if Group.DERIVED in row.methods.groups and row.device == "cpu" and not row.full_matrix_only
        if cpu_backend in row.cpu_backends
        for model in row.models
        for scenario in row.scenarios
    )
