"""The global-state leak check: every watched setting is seen when it changes and put back by ``restore``; through
the plugin, a toy case that sets the float32 matmul precision and does not restore it fails, naming it."""

from __future__ import annotations

import pytest
import torch

from compile_audit.probe import global_state

pytestmark = pytest.mark.selftest
pytest_plugins = ["pytester"]

CHANGES = {
    "torch.get_float32_matmul_precision()": lambda: torch.set_float32_matmul_precision("high"),
    "torch.get_default_dtype()": lambda: torch.set_default_dtype(torch.float64),
    "torch.is_grad_enabled()": lambda: torch.set_grad_enabled(False),
    "torch.are_deterministic_algorithms_enabled()": lambda: torch.use_deterministic_algorithms(True),
    "torch._dynamo.config.recompile_limit": lambda: setattr(torch._dynamo.config, "recompile_limit", 3),
    "torch.backends.cudnn.benchmark": lambda: setattr(torch.backends.cudnn, "benchmark", True),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_each_setting_that_changes_is_named_and_restored(name):
    before = global_state.snapshot()
    try:
        CHANGES[name]()
        leaked = global_state.leaks(before, global_state.snapshot())
    finally:
        global_state.restore(before)
    assert [line.split(":")[0] for line in leaked] == [name.split(":")[0]] and "->" in leaked[0]
    assert global_state.leaks(before, global_state.snapshot()) == []


def test_nothing_changed_is_no_leak():
    assert global_state.leaks(global_state.snapshot(), global_state.snapshot()) == []


TOY_CONFTEST = """
import dataclasses

import pytest
import torch


@dataclasses.dataclass(frozen=True)
class ToyCase:
    name: str
    tier: str = "cpu"
    backend: str = "eager"

    @property
    def id(self):
        return f"toy/{self.name}/leak"


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", [ToyCase("plain")], ids=lambda c: c.id)


@pytest.fixture
def sets_default_dtype():
    torch.set_default_dtype(torch.float64)  # and never puts it back
"""

TOY_TEST = """
import torch


def test_sets_matmul_precision(case):
    torch.set_float32_matmul_precision("high")  # what torchao once did on import


def test_sets_and_restores(case):
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    torch.set_float32_matmul_precision(previous)


def test_audited_case_that_leaks(case, case_audit):
    torch._dynamo.config.recompile_limit = 2


def test_fixture_leaks(case, sets_default_dtype):
    pass


def test_not_a_case():
    torch.set_float32_matmul_precision("medium")
    torch.set_float32_matmul_precision("highest")
"""


def test_a_case_that_leaks_the_matmul_precision_fails_naming_it(pytester: pytest.Pytester):
    pytester.makeconftest(TOY_CONFTEST)
    pytester.makepyfile(test_toy=TOY_TEST)
    pytester.makefile(".toml", compile_budgets="")
    pytester.makeini("[pytest]\ncompile_budgets = compile_budgets.toml\n")
    before = global_state.snapshot()
    result = pytester.inline_run("-p", "no:cacheprovider")
    after = global_state.snapshot()
    global_state.restore(before)

    reports = result.getreports("pytest_runtest_logreport")
    failed = {r.nodeid.split("::")[-1].split("[")[0]: r.longreprtext for r in reports if r.failed}
    assert sorted(failed) == ["test_audited_case_that_leaks", "test_fixture_leaks", "test_sets_matmul_precision"]
    assert "toy/plain/leak: global state leaked in the test body" in failed["test_sets_matmul_precision"]
    assert "torch.get_float32_matmul_precision(): 'highest' -> 'high'" in failed["test_sets_matmul_precision"]
    assert "torch._dynamo.config.recompile_limit: 8 -> 2" in failed["test_audited_case_that_leaks"]
    assert "leaked by its fixtures" in failed["test_fixture_leaks"]
    assert "torch.get_default_dtype(): torch.float32 -> torch.float64" in failed["test_fixture_leaks"]
    assert global_state.leaks(before, after) == [], "the gate did not restore what the toy cases leaked"
