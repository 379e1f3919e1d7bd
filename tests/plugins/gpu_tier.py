"""GPU tier options and fixtures (benchmarks, memory); see tests/test_gpu_benchmarks.py.

Options (all optional):
  --gpu-tier-device cuda|cpu   cpu runs the gpu-marked benchmarks on CPU with llama-tiny and aot_eager, so
                               their code path is exercised on every machine (scripts/gpu_check.sh --cpu)
  --gpu-bench-rounds N         timed steps per run (default 10 on CUDA, 3 on CPU)
  --gpu-bench-warmup N         untimed steps before them (default 3 on CUDA, 1 on CPU)
  --gpu-bench-batch-size N     (default 4 on CUDA, 2 on CPU)
  --gpu-bench-seq-len N        (default 512 on CUDA, 32 on CPU)

The benchmark figures go into pytest-benchmark's ``extra_info`` and, when ``--compile-report`` is given,
into the ``benchmarks`` field of the report's record for the same case id (the train-eval-train case of
that model, method and tier, when it ran in the same session): after conftest writes the report, this
plugin adds the figures to it. Figures of a case without a record are listed in the terminal summary.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from compile_audit.memory import format_bytes
from tests.cases import GPU_METHODS, GPU_MODELS, Case

BENCHMARK_SCENARIO = "train-eval-train"  # the case whose report record receives the figures
CPU_MODELS = ("llama-tiny",)
CPU_BACKEND = "aot_eager"
# (rounds, warmup, batch size, sequence length) per device kind.
DEFAULTS = {"cuda": (10, 3, 4, 512), "cpu": (3, 1, 2, 32)}
USER_PROPERTY = "gpu_benchmarks"

_FIGURES = pytest.StashKey[dict]()  # case id -> figures, collected on the controller
_MERGED = pytest.StashKey[list]()  # case ids whose report record received them
_CONFIG: list[pytest.Config] = []  # the running config, for report hooks that do not receive it


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
        help="cpu: run the gpu-marked benchmarks on CPU (llama-tiny, aot_eager) so their code path runs anywhere",
    )
    for name, meaning in (
        ("rounds", "timed steps per run"),
        ("warmup", "untimed steps before the timed ones"),
        ("batch-size", "batch size of the benchmark steps"),
        ("seq-len", "sequence length of the benchmark steps"),
    ):
        group.addoption(f"--gpu-bench-{name}", type=int, default=None, metavar="N", help=meaning)


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


def pytest_configure(config: pytest.Config) -> None:
    bench_settings(config)  # a bad value is a usage error before anything runs
    config.stash[_FIGURES] = {}
    _CONFIG[:] = [config]


def benchmark_cases(config: pytest.Config) -> list[Case]:
    """The GPU slice (GPU_MODELS x GPU_METHODS, inductor) or, with --gpu-tier-device cpu, its CPU stand-in."""
    settings = bench_settings(config)
    if settings.device_kind == "cpu":
        return [Case(m, method, BENCHMARK_SCENARIO, "cpu", CPU_BACKEND) for m in CPU_MODELS for method in GPU_METHODS]
    return [Case(m, method, BENCHMARK_SCENARIO, "cuda", "inductor") for m in GPU_MODELS for method in GPU_METHODS]


@pytest.fixture
def gpu_bench(request: pytest.FixtureRequest) -> BenchSettings:
    return bench_settings(request.config)


@pytest.fixture
def record_gpu_benchmarks(request: pytest.FixtureRequest):
    """``record(case_id, figures)``: the figures travel with the test report (xdist included) to the
    controller, which adds them to the compile report's record of ``case_id``."""

    def record(case_id: str, figures: dict[str, Any]) -> None:
        request.node.user_properties.append((USER_PROPERTY, {"id": case_id, "figures": _json_safe(figures)}))

    return record


def _json_safe(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in figures.items()}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" or not _CONFIG:
        return
    for name, value in report.user_properties:
        if name == USER_PROPERTY:
            _CONFIG[0].stash[_FIGURES][value["id"]] = value["figures"]


@pytest.hookimpl(trylast=True)  # after conftest has written the compile report
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    figures = config.stash.get(_FIGURES, {})
    path = config.getoption("--compile-report")
    if hasattr(config, "workerinput") or not figures or not path or not Path(path).is_file():
        return
    from compile_audit.report import load_report, write_report

    report = load_report(path)
    config.stash[_MERGED] = merge_benchmarks(report, figures)
    write_report(path, report)


def merge_benchmarks(report: dict[str, Any], figures: dict[str, dict[str, Any]]) -> list[str]:
    """Add each case's figures to the ``benchmarks`` of the report record with that id; the ids merged."""
    merged = []
    for case in report.get("cases", []):
        if case.get("id") in figures:
            case["benchmarks"] = {**(case.get("benchmarks") or {}), **figures[case["id"]]}
            merged.append(case["id"])
    return merged


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    figures = config.stash.get(_FIGURES, {})
    if hasattr(config, "workerinput") or not figures:
        return
    terminalreporter.section("GPU tier: benchmarks (reported, never asserted)")
    rows = [("case", "eager ms", "compiled ms", "speedup", "compile s", "frames", "reserved max")]
    for case_id, f in sorted(figures.items()):
        rows.append(
            (
                case_id,
                _fmt(f.get("eager_step_ms"), "{:.1f}"),
                _fmt(f.get("compiled_step_ms"), "{:.1f}"),
                _fmt(f.get("speedup"), "{:.2f}x"),
                _fmt(f.get("compile_seconds"), "{:.1f}"),
                _fmt(f.get("frames_compiled"), "{}"),
                format_bytes(f.get("reserved_max_bytes"), unavailable="n/a (CPU)"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        terminalreporter.write_line("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not config.getoption("--compile-report"):
        return
    merged = config.stash.get(_MERGED, [])
    terminalreporter.write_line(f"benchmark figures added to the compile report for {len(merged)} case(s)")
    missing = sorted(set(figures) - set(merged))
    if missing:
        terminalreporter.write_line(
            f"no compile-report record for {missing}: run their {BENCHMARK_SCENARIO} case in the same session"
            " to get the figures into the report (they are in --benchmark-json either way)"
        )


def _fmt(value: Any, spec: str) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return spec.format(value)
