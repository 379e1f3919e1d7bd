"""What only this zoo knows: the device, model building, and the case ids, library versions and compile policy
handed to the compile gate (the ``compile_gate`` plugin does the rest; ``tests/plugins/case_selection.py`` decides
which cases a run parametrizes)."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

import pytest
import torch

import bench_models
from compile_audit.probe.policy import CompilePolicy
from tests.cases import Case, all_case_ids, operation_of

# Which cases a run parametrizes, and the options of the step benchmarks (tests/test_gpu_benchmarks.py).
pytest_plugins = ["tests.plugins.case_selection", "tests.plugins.step_benchmarks"]
# Installed, the gate is a pytest11 entry point; a bare copy of the tree (the GPU machine's) has no install.
if not any(entry.name == "compile_gate" for entry in entry_points(group="pytest11")):
    pytest_plugins.append("compile_gate.plugin")


def pytest_compile_gate_case_ids(config: pytest.Config) -> set[str]:
    return all_case_ids()


def pytest_compile_gate_versions(config: pytest.Config) -> dict[str, str]:
    return bench_models.library_versions()


def pytest_compile_gate_policy(case: Case, audited: bool, config: pytest.Config) -> CompilePolicy:
    return case.compile_policy(
        audited,
        fake_tensor_cache=config.getoption("--fake-tensor-cache"),
        regional=config.getoption("--compile-regions"),
    )


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
        dtype = getattr(torch, case.dtype) if case.dtype else None
        return bench_models.build_peft_model(case.model, case.method, device=device, dtype=dtype, **overrides)

    return build
