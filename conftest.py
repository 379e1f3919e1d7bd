"""What only this zoo knows: its options, case parametrization, the device, model building, and the case ids
and library versions handed to the compile gate (the ``compile_gate`` plugin does the rest)."""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
import torch._dynamo

import bench_models
from tests.cases import CPU_BACKENDS, Case, all_case_ids, cases_for, operation_of

WITH_CASES = pytest.StashKey[frozenset]()
ONLY_CASES = pytest.StashKey[frozenset]()
# Options and fixtures of the step benchmarks (tests/test_gpu_benchmarks.py).
pytest_plugins = ["tests.plugins.step_benchmarks"]
# Installed, the gate is a pytest11 entry point; a bare copy of the tree (the GPU machine's) has no install.
if not any(entry.name == "compile_gate" for entry in entry_points(group="pytest11")):
    pytest_plugins.append("compile_gate.plugin")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compile gate: zoo")
    group.addoption("--full-matrix", action="store_true", help="every method on every architecture")
    group.addoption("--cpu-backend", default="eager", help=f"backend of the CPU tier, one of {', '.join(CPU_BACKENDS)}")
    group.addoption(
        "--with-cases",
        metavar="FILE",
        help="the default selection plus these full-matrix cases (one id per line; scripts/gate --select change)",
    )
    group.addoption(
        "--cases",
        metavar="FILE",
        help="only these cases, from the full matrix (one id per line), and no other test (scripts/gate)",
    )
    group.addoption(
        "--fake-tensor-cache",
        action="store_true",
        help="keep Dynamo's fake-tensor cache on for CPU-tier cases too (their compile seconds then read as a user's)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Tiny models gain nothing from intra-op threads, and two xdist workers with two OpenMP threads
    # each oversubscribe a 2-core machine (an eager tiny forward went from 10 ms to 590 ms).
    torch.set_num_threads(1)
    backend = config.getoption("--cpu-backend")
    if backend not in CPU_BACKENDS:
        raise pytest.UsageError(f"--cpu-backend: {backend!r} is not one of {', '.join(CPU_BACKENDS)}")
    config.stash[WITH_CASES] = _case_ids("--with-cases", config.getoption("--with-cases"))
    config.stash[ONLY_CASES] = _case_ids("--cases", config.getoption("--cases"))


def _case_ids(option: str, path: str | None) -> frozenset[str]:
    """The ids of a cases FILE; an id no run could produce is a usage error naming its line."""
    if not path:
        return frozenset()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise pytest.UsageError(f"{option}: cannot read {path}: {error}") from None
    known, ids = all_case_ids(), set()
    for number, line in enumerate(lines, 1):
        case_id = line.split("#", 1)[0].strip()
        if case_id and case_id not in known:
            raise pytest.UsageError(f"{option}: {path}:{number}: {case_id!r} is no case of this suite")
        if case_id:
            ids.add(case_id)
    return frozenset(ids)


def pytest_compile_gate_case_ids(config: pytest.Config) -> set[str]:
    return all_case_ids()


def pytest_compile_gate_versions(config: pytest.Config) -> dict[str, str]:
    return bench_models.library_versions()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("scenario")
    if marker is None or "case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    only = config.stash[ONLY_CASES]
    cases = cases_for(
        marker.args[0],
        full_matrix=config.getoption("--full-matrix") or bool(only),
        cpu_backend=config.getoption("--cpu-backend"),
        with_cases=config.stash[WITH_CASES],
    )
    cases = [case for case in cases if case.id in only] if only else cases
    params = [pytest.param(c, id=c.id, marks=_marks(c)) for c in cases]
    metafunc.parametrize("case", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--cases FILE runs those cases and nothing else."""
    if not config.stash[ONLY_CASES]:
        return
    others = [
        item
        for item in items
        if not isinstance(getattr(item, "callspec", None) and item.callspec.params.get("case"), Case)
    ]
    if others:
        config.hook.pytest_deselected(items=others)
        items[:] = [item for item in items if item not in others]


def _marks(case: Case) -> list[pytest.MarkDecorator]:
    if case.tier == "cuda":
        return [pytest.mark.gpu]
    return [pytest.mark.inductor] if case.backend == "inductor" else []


@pytest.fixture
def device(case: Case) -> str:
    """The torch device of the case: CPU, or this xdist worker's own GPU."""
    if case.device == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        pytest.skip("GPU tier: CUDA is not available on this machine")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw") or 0) % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return f"cuda:{index}"


@pytest.fixture(autouse=True)
def eager_random_numbers_under_inductor(request: pytest.FixtureRequest):
    """Inductor generates its own random-number kernels, so a case judged for parity (one that uses ``case_audit``)
    with dropout on would differ from eager by its masks alone: there inductor calls eager's random ops instead."""
    case = request.getfixturevalue("case") if "case" in request.fixturenames else None
    if case is None or case.backend != "inductor" or "case_audit" not in request.fixturenames:
        yield
        return
    import torch._inductor.config

    with torch._inductor.config.patch(fallback_random=True):
        yield


@pytest.fixture(autouse=True)
def deterministic_attention_for_parity_on_cuda(request: pytest.FixtureRequest):
    """A GPU-tier case judged for parity runs attention on SDPA's math kernel. The fused CUDA kernels compare a
    compiled run with eager only within their own noise (the efficient-attention backward is not deterministic, and a
    LoRA A-gradient differed from eager by up to 1%), and they add a guard of their own on the sequence length's
    alignment (``size % 8 == 0``: one recompile when a batch of 12 tokens follows one of 8), neither PEFT's doing
    (results/README.md). The step benchmarks keep the fused kernels: their figures are what a user gets."""
    case = request.getfixturevalue("case") if "case" in request.fixturenames else None
    if case is None or case.tier != "cuda" or "case_audit" not in request.fixturenames:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield


@pytest.fixture(autouse=True)
def cpu_tier_traces_without_fake_tensor_cache(request: pytest.FixtureRequest):
    """Dynamo's fake-tensor cache makes each fresh tiny model trace slower, not faster: a case builds new modules, so
    nearly every lookup misses and pays for the entry it stores. A CPU-tier case judges what Dynamo does (breaks,
    guards, recompiles), which the cache does not change, so it traces without it (docs/scenarios.md gives the
    comparison). GPU-tier cases keep Dynamo's default: their compile seconds are what a user sees. So do the ranks of
    the ddp and fsdp2 cases (each starts from a fresh interpreter): under DDP the cache changes what Dynamo does (with
    it off, IA3's ranks specialise the labels' length and recompile), so those cases stay on Dynamo's default."""
    case = request.getfixturevalue("case") if "case" in request.fixturenames else None
    if case is None or case.tier != "cpu" or request.config.getoption("--fake-tensor-cache"):
        yield
        return
    with torch._dynamo.config.patch(fake_tensor_cache_enabled=False):
        yield


@pytest.fixture
def make_peft_model(case: Case, device: str):
    """Build the PEFT model of the case (seeded); a combination the zoo cannot run is a skip with its reason."""
    operation = operation_of(case.scenario)

    def build(**overrides):
        if operation is None:
            reason = bench_models.skip_reason(case.model, case.method)
        else:
            reason = bench_models.operation_skip_reason(case.model, case.method, operation)
        if reason:
            pytest.skip(reason)
        dtype = torch.bfloat16 if case.tier == "cuda" else None
        return bench_models.build_peft_model(case.model, case.method, device=device, dtype=dtype, **overrides)

    return build
