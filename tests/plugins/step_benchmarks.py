"""Options and fixtures of the step benchmarks (time, compile time, memory); see tests/test_gpu_benchmarks.py.

Options (all optional):
  --gpu-tier-device cuda|cpu   cpu runs the gpu-marked benchmarks on CPU with llama-tiny and inductor, so
                               their code path is exercised on every machine (scripts/gpu_check.sh --cpu)
  --gpu-bench-rounds N         timed steps per run (default 10 on CUDA, 3 on CPU)
  --gpu-bench-warmup N         untimed steps before them (default 3 on CUDA, 1 on CPU)
  --gpu-bench-batch-size N     (default 4 on CUDA, 2 on CPU)
  --gpu-bench-seq-len N        (default 512 on CUDA, 32 on CPU)
  --gpu-bench-models KEY,...   the models benchmarked (default: the GPU slice's on CUDA, llama-tiny on CPU; e.g.
                               llama-small, sized for CPU measurements)
  --save-compile-artifacts F   the session's compile artifacts saved to F at its end (one process: not under xdist)
  --load-compile-artifacts F   loaded before anything compiles: a later run starts warm (compile_audit.probe.warm_start)

The figures go into pytest-benchmark's ``extra_info`` and, through the compile gate's
``record_compile_benchmarks`` fixture, into the ``benchmarks`` of the report's record of the same case id
(the train-eval-train case of that model, method and tier; a record of its own when that case did not run).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench_models import MODELS
from compile_audit.probe.warm_start import WarmStartError, load_artifacts, save_artifacts
from tests.cases import CORE_METHODS, GPU_MODELS, Case

BENCHMARK_SCENARIO = "train-eval-train"  # the case whose report record receives the figures
CPU_MODELS = ("llama-tiny",)
CPU_BACKEND = "inductor"  # the GPU tier's backend, on CPU
# (rounds, warmup, batch size, sequence length) per device kind.
DEFAULTS = {"cuda": (10, 3, 4, 512), "cpu": (3, 1, 2, 32)}


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    device_kind: str  # "cuda" or "cpu"
    rounds: int
    warmup: int
    batch_size: int
    seq_len: int

    @property
    def backend(self) -> str:
        return "inductor" if self.device_kind == "cuda" else CPU_BACKEND


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compile gate: GPU tier")
    group.addoption(
        "--gpu-tier-device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="cpu: run the gpu-marked benchmarks on CPU (llama-tiny, inductor) so their code path runs anywhere",
    )
    for name, meaning in (
        ("rounds", "timed steps per run"),
        ("warmup", "untimed steps before the timed ones"),
        ("batch-size", "batch size of the benchmark steps"),
        ("seq-len", "sequence length of the benchmark steps"),
    ):
        group.addoption(f"--gpu-bench-{name}", type=int, default=None, metavar="N", help=meaning)
    group.addoption("--gpu-bench-models", default=None, metavar="KEY,...", help="the models benchmarked")
    group.addoption(
        "--save-compile-artifacts",
        type=Path,
        default=None,
        metavar="FILE",
        help="at the end of the session, this process's compile artifacts (inductor, AOTAutograd, autotuning) to FILE",
    )
    group.addoption(
        "--load-compile-artifacts",
        type=Path,
        default=None,
        metavar="FILE",
        help="before anything compiles, the artifacts an earlier run saved: its compiles start warm",
    )


def bench_settings(config: pytest.Config) -> BenchSettings:
    kind = config.getoption("--gpu-tier-device")
    rounds, warmup, batch_size, seq_len = DEFAULTS[kind]

    def pick(name: str, default: int, minimum: int) -> int:
        value = config.getoption(f"--gpu-bench-{name}")
        if value is None:
            return default
        if value < minimum:
            raise pytest.UsageError(f"--gpu-bench-{name} must be >= {minimum}, got {value}")
        return value

    return BenchSettings(
        device_kind=kind,
        rounds=pick("rounds", rounds, 1),
        warmup=pick("warmup", warmup, 0),
        batch_size=pick("batch-size", batch_size, 1),
        seq_len=pick("seq-len", seq_len, 2),
    )


def _models(config: pytest.Config, default: tuple[str, ...]) -> tuple[str, ...]:
    given = config.getoption("--gpu-bench-models")
    if not given:
        return default
    models = tuple(key.strip() for key in given.split(",") if key.strip())
    unknown = [key for key in models if key not in MODELS]
    if unknown:
        raise pytest.UsageError(f"--gpu-bench-models: unknown model(s) {unknown}; valid models: {', '.join(MODELS)}")
    return models


def pytest_configure(config: pytest.Config) -> None:
    bench_settings(config)  # a bad value is a usage error before anything runs
    _models(config, ())
    artifacts = config.getoption("--load-compile-artifacts")
    if artifacts is not None:
        try:
            load_artifacts(artifacts)
        except WarmStartError as error:
            raise pytest.UsageError(f"--load-compile-artifacts: {error}") from None


def pytest_sessionfinish(session: pytest.Session) -> None:
    artifacts = session.config.getoption("--save-compile-artifacts")
    if artifacts is not None and not hasattr(session.config, "workerinput"):
        try:
            size = save_artifacts(artifacts)
        except WarmStartError as error:
            print(f"\n--save-compile-artifacts: {error}")
        else:
            print(
                f"\ncompile artifacts: {size} bytes in {artifacts} (--load-compile-artifacts starts a later run warm)"
            )


def benchmark_cases(config: pytest.Config) -> list[Case]:
    """The GPU slice (GPU_MODELS x CORE_METHODS, inductor) or, with --gpu-tier-device cpu, its CPU stand-in."""
    settings = bench_settings(config)
    if settings.device_kind == "cpu":
        models = _models(config, CPU_MODELS)
        return [Case(m, method, BENCHMARK_SCENARIO, "cpu", CPU_BACKEND) for m in models for method in CORE_METHODS]
    models = _models(config, GPU_MODELS)
    return [Case(m, method, BENCHMARK_SCENARIO, "cuda", "inductor") for m in models for method in CORE_METHODS]


@pytest.fixture
def gpu_bench(request: pytest.FixtureRequest) -> BenchSettings:
    return bench_settings(request.config)
