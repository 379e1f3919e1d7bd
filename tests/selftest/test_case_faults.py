"""A case that hangs or whose process dies is a verdict: hung or crashed, named with its phase, the session going on
and nothing already recorded lost (compile_gate.time_limits, compile_gate.crashes). Toy zoo of test_plugin.py."""

from __future__ import annotations

import json

import pytest

from tests.selftest.test_plugin import TOY_CONFTEST

pytestmark = pytest.mark.selftest
pytest_plugins = ["pytester"]

# The "breaks" case waits forever (or dies) in its second phase; the "clean" one runs to the end.
FAULTY_TEST = """
import os
import threading

import torch


def test_forward(case, case_audit):
    compiled = case_audit.compile(torch.nn.Identity())
    with case_audit.phase("call-1", "eval"):
        compiled(torch.ones(2))
    with case_audit.phase("call-2", "eval"):
        if case.model == "breaks":
            FAULT
        compiled(torch.ones(2))
"""
HANGS = "threading.Event().wait()  # PLANTED: waits forever"
DIES = "os._exit(3)  # PLANTED: the process dies"
LIMIT_S = 30  # well above what a toy case takes on a loaded machine


@pytest.fixture
def faulty_zoo(pytester: pytest.Pytester):
    def make(fault: str, hanging_first: bool = False) -> pytest.Pytester:
        conftest = TOY_CONFTEST
        if hanging_first:
            conftest = conftest.replace('{"clean": Clean, "breaks": Breaks}', '{"breaks": Breaks, "clean": Clean}')
        pytester.makeconftest(conftest)
        pytester.makepyfile(test_toy=FAULTY_TEST.replace("FAULT", fault))
        pytester.makefile(".toml", compile_budgets="")
        pytester.makeini("[pytest]\ncompile_budgets = compile_budgets.toml\n")
        return pytester

    return make


def _cases(pytester: pytest.Pytester) -> dict[str, dict]:
    return {case["id"]: case for case in json.loads((pytester.path / "report.json").read_text())["cases"]}


def test_a_case_past_its_time_limit_fails_as_hung_with_its_phase_and_the_session_goes_on(faulty_zoo):
    zoo = faulty_zoo(HANGS)
    args = (f"--case-timeout={LIMIT_S}", "--compile-report=report.json", "-p", "no:cacheprovider")
    result = zoo.runpytest_subprocess(*args, timeout=300)
    result.assert_outcomes(passed=1, failed=1)
    cases = _cases(zoo)
    hung = cases["breaks/plain/forward"]
    assert hung["status"] == "failed" and hung["raised"] == "Timeout", hung
    expected = f"hung: ran past its time limit of {LIMIT_S} s in phase call-2; waiting at threading.py:"
    assert hung["error"].startswith(expected), hung["error"]
    assert hung["error"].endswith(" in wait, reached from test_toy.py:13 in test_forward"), hung["error"]
    assert cases["clean/plain/forward"]["status"] == "passed"


def test_limits_follow_the_recorded_durations_with_a_floor(faulty_zoo):
    from compile_gate import time_limits

    durations = {"fast": 1.0, "slow": 100.0}
    assert time_limits.limit_for("fast", durations) == time_limits.FLOOR_S
    assert time_limits.limit_for("slow", durations) == 100.0 * time_limits.TIMES_RECORDED
    assert time_limits.limit_for("new", durations) == time_limits.UNRECORDED_S


def test_a_bad_case_timeout_is_a_usage_error(faulty_zoo):
    zoo = faulty_zoo(HANGS)
    result = zoo.runpytest_subprocess("--case-timeout=soon", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--case-timeout 'soon': expected 'auto' or a number of seconds*"])


def test_a_case_whose_worker_dies_is_recorded_as_crashed_with_its_exit_code_and_phase(faulty_zoo):
    zoo = faulty_zoo(DIES)
    args = ("-n", "1", "--compile-report=report.json", "-p", "no:cacheprovider", "-p", "no:randomly")
    result = zoo.runpytest_subprocess(*args, timeout=300)
    result.assert_outcomes(passed=1, failed=1)
    cases = _cases(zoo)
    crashed = cases["breaks/plain/forward"]
    assert crashed["status"] == "failed" and crashed["raised"] == "ProcessDied", crashed
    assert crashed["error"] == "crashed: the process running it died (exit code 3) in phase call-2", crashed
    assert cases["clean/plain/forward"]["status"] == "passed"


def test_after_enough_hung_cases_the_rest_are_skipped_naming_them(faulty_zoo):
    zoo = faulty_zoo(HANGS, hanging_first=True)
    args = (f"--case-timeout={LIMIT_S}", "--max-hung-cases=1", "--compile-report=report.json", "-p", "no:cacheprovider")
    result = zoo.runpytest_subprocess(*args, "-p", "no:randomly", timeout=300)
    result.assert_outcomes(failed=1, skipped=1)  # "breaks" runs first and hangs; "clean" is not run
    clean = _cases(zoo)["clean/plain/forward"]
    assert clean["status"] == "skipped", clean
    assert "not run: 1 case(s) of this run hung already (breaks/plain/forward)" in clean["message"], clean
