"""The compile gate as a pytest plugin, used by a zoo that is not this one: two plain nn.Modules, no PEFT.

Each test writes a small project (conftest, test file, budgets file) and runs pytest on it in a subprocess
(pytester's in-process runs unload the torch modules a compile imported, and torch cannot import them twice);
the benchmark-only session compiles nothing and runs in process, so the test can count the report writes.
"""

from __future__ import annotations

import json
import os

import pytest

from compile_audit.rules.budgets import BudgetFile
from compile_gate import session as gate_session

pytestmark = pytest.mark.selftest
pytest_plugins = ["pytester"]

TOY_CONFTEST = """
import dataclasses

import pytest
import torch


@dataclasses.dataclass(frozen=True)
class ToyCase:
    model: str
    tier: str = "cpu"
    backend: str = "eager"

    @property
    def id(self):
        return f"{self.model}/plain/forward"


class Clean(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


class Breaks(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        torch._dynamo.graph_break()
        return y * 2


MODELS = {"clean": Clean, "breaks": Breaks}


def pytest_compile_gate_case_ids(config):
    return {ToyCase(name).id for name in MODELS}


def pytest_compile_gate_versions(config):
    return {"torch": torch.__version__, "toyzoo": "1.0"}


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", [ToyCase(name) for name in MODELS], ids=lambda c: c.id)


@pytest.fixture
def model(case):
    return MODELS[case.model]()
"""

TOY_TEST = """
import torch


def test_forward(case, model, case_audit):
    compiled = case_audit.compile(model)
    with case_audit.phase("call-1", "eval"):
        compiled(torch.ones(2, 3))
    with case_audit.phase("call-2", "eval"):
        compiled(torch.ones(2, 3))
    case_audit.steady_state_after("call-1")
"""


@pytest.fixture
def toy_zoo(pytester: pytest.Pytester):
    pytester.makeconftest(TOY_CONFTEST)
    pytester.makepyfile(test_toy=TOY_TEST)
    pytester.makefile(".toml", compile_budgets="")
    pytester.makeini("[pytest]\ncompile_budgets = compile_budgets.toml\n")
    return pytester


def _report(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "report.json").read_text())


def test_toy_zoo_gets_a_verdict_and_a_report(toy_zoo: pytest.Pytester):
    result = toy_zoo.runpytest_subprocess("--compile-report=report.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*breaks/plain/forward: graph breaks (roots) 1/0*", "*over budget*"])
    cases = {case["id"]: case for case in _report(toy_zoo)["cases"]}
    assert cases["clean/plain/forward"]["status"] == "passed"
    assert cases["breaks/plain/forward"]["status"] == "failed"
    assert cases["breaks/plain/forward"]["graph_breaks"]["count"] == 1
    assert _report(toy_zoo)["versions"]["toyzoo"] == "1.0"


def test_toy_zoo_budgets_record_and_hold(toy_zoo: pytest.Pytester):
    result = toy_zoo.runpytest_subprocess("--update-budgets", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    written = (toy_zoo.path / "compile_budgets.toml").read_text()
    assert '[cases."breaks/plain/forward"]' in written and "graph_breaks = 1" in written
    assert "conftest.py in forward: gb0025" in written
    toy_zoo.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)  # the recorded budget holds


def test_record_budgets_judges_as_usual_and_writes_the_entries_elsewhere(toy_zoo: pytest.Pytester):
    """First contact on new hardware: the verdicts against the committed file, and the entries this run would
    record in another file; the judged file stays as it was."""
    judged = toy_zoo.path / "compile_budgets.toml"
    before = judged.read_text()
    result = toy_zoo.runpytest_subprocess("--record-budgets=recorded.toml", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*breaks/plain/forward: graph breaks (roots) 1/0*", "*budgets recorded: 2 case(s)*"])
    assert judged.read_text() == before
    recorded = BudgetFile.load(toy_zoo.path / "recorded.toml")
    assert recorded.entries["breaks/plain/forward"].graph_breaks == 1
    assert "torch" in recorded.versions["cpu"]
    result = toy_zoo.runpytest_subprocess("--budgets=recorded.toml", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)  # what it recorded holds


BENCHMARK_ONLY_TEST = """
def test_benchmark(case, record_compile_benchmarks):
    record_compile_benchmarks(case, {"compiled_step_ms": 1.5, "speedup": float("nan")})
"""


def test_benchmark_only_session_reaches_the_report_written_once(toy_zoo: pytest.Pytester, monkeypatch):
    writes = []
    real_write = gate_session.write_report
    monkeypatch.setattr(
        gate_session, "write_report", lambda path, report: (writes.append(path), real_write(path, report))
    )
    (toy_zoo.path / "test_toy.py").unlink()
    toy_zoo.makepyfile(test_bench=BENCHMARK_ONLY_TEST)
    result = toy_zoo.inline_run("--compile-report=report.json", "-p", "no:cacheprovider")
    result.assertoutcome(passed=2)
    assert len(writes) == 1
    cases = {case["id"]: case for case in _report(toy_zoo)["cases"]}
    assert cases["clean/plain/forward"]["benchmarks"] == {"compiled_step_ms": 1.5, "speedup": None, "policy": {}}
    assert cases["clean/plain/forward"]["audited"] is False and cases["clean/plain/forward"]["status"] == "passed"


TIMED_TEST = """
def test_timed(case, benchmark, record_compile_benchmarks):
    benchmark.pedantic(sum, args=([1, 2],), rounds=2, warmup_rounds=1)
    record_compile_benchmarks(case, {"compiled_step_ms": 1.0})
"""


def test_a_case_timed_by_pytest_benchmark_runs_without_the_footprint_recorder(toy_zoo: pytest.Pytester):
    """pytest-benchmark pauses profilers around its rounds; the recorder's cProfile must not be one of them."""
    (toy_zoo.path / "test_toy.py").unlink()
    toy_zoo.makepyfile(test_timed=TIMED_TEST)
    result = toy_zoo.inline_run("--compile-report=report.json", "-p", "no:cacheprovider")
    result.assertoutcome(passed=2)


HAND_WRITTEN = """# budgets of the toy zoo
[cases."breaks/plain/forward"]
graph_breaks   = 1   # aligned by hand
note = "planted on purpose: see the conftest"
break_signatures = ["conftest.py in forward: gb0025"]
"""


def test_partial_update_leaves_every_other_entry_byte_for_byte(toy_zoo: pytest.Pytester):
    """--update-budgets -k clean rewrites only the clean case's entry; the hand-edited one stays as it was."""
    (toy_zoo.path / "compile_budgets.toml").write_text(HAND_WRITTEN)
    result = toy_zoo.runpytest_subprocess("--update-budgets", "-k", "clean", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, deselected=1)
    written = (toy_zoo.path / "compile_budgets.toml").read_text()
    assert HAND_WRITTEN.split("\n", 1)[1].rstrip("\n") in written
    assert '[cases."clean/plain/forward"]' not in written  # recorded, and it says only the default


CRASH_TEST = """
import torch


def test_crash(case, case_audit):
    compiled = case_audit.compile(torch.nn.Identity())
    with case_audit.phase("call-1", "eval"):
        compiled(torch.ones(2))
    raise RuntimeError("absmax must be float32")
"""


def test_a_crash_is_a_known_failure_only_when_the_reason_names_its_type(toy_zoo: pytest.Pytester):
    """Both toy cases raise RuntimeError; one known failure names that type, the other names another."""
    (toy_zoo.path / "test_toy.py").unlink()
    toy_zoo.makepyfile(test_crash=CRASH_TEST)
    (toy_zoo.path / "compile_budgets.toml").write_text(
        '[cases."clean/plain/forward"]\nknown_failure = "absmax"\nknown_raises = "RuntimeError"\n\n'
        '[cases."breaks/plain/forward"]\nknown_failure = "a ValueError"\nknown_raises = "ValueError"\n'
    )
    result = toy_zoo.runpytest_subprocess("-rxf", "--compile-report=report.json", "-p", "no:cacheprovider")
    result.assert_outcomes(xfailed=1, failed=1)
    result.stdout.fnmatch_lines(["*known failure (absmax); today: the case raised RuntimeError: absmax*"])
    result.stdout.fnmatch_lines(["*RuntimeError: absmax must be float32*"])
    cases = {case["id"]: case for case in _report(toy_zoo)["cases"]}
    assert {case_id: case["status"] for case_id, case in cases.items()} == {
        "clean/plain/forward": "xfailed",
        "breaks/plain/forward": "failed",
    }
    # The report's message starts with the exception, so that the diff's one line says why.
    assert cases["breaks/plain/forward"]["message"].splitlines()[0] == "RuntimeError: absmax must be float32"


def test_runxfail_shows_every_known_failure_as_the_failure_it_is(toy_zoo: pytest.Pytester):
    """pytest.xfail() does nothing under --runxfail: a held crash and a held verdict must fail, not pass."""
    toy_zoo.makepyfile(test_crash=CRASH_TEST)
    (toy_zoo.path / "compile_budgets.toml").write_text(
        '[cases."clean/plain/forward"]\nknown_failure = "absmax"\nknown_raises = "RuntimeError"\n\n'
        '[cases."breaks/plain/forward"]\nknown_failure = "the planted break"\nknown_check = "scenario check"\n'
    )
    selection = "test_crash and clean/ or test_forward and breaks/"
    result = toy_zoo.runpytest_subprocess("--runxfail", "-rf", "-k", selection, "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2, deselected=2)
    result.stdout.fnmatch_lines(["FAILED test_crash.py::test_crash[[]clean/plain/forward[]] - RuntimeError: absmax*"])
    result.stdout.fnmatch_lines(
        [
            "breaks/plain/forward: graph breaks (roots) 1/0*",
            "*did not occur*",
            "*- over budget*graph breaks: 1 > budget 0*",
        ]
    )


# Usage errors and the file's creation happen before anything compiles: these run in process, fast.


def test_missing_budgets_file_is_a_usage_error_naming_it(toy_zoo: pytest.Pytester):
    missing = toy_zoo.path / "none.toml"
    result = toy_zoo.runpytest("--budgets", str(missing), "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*budgets file {missing} does not exist (--update-budgets creates it)*"])


def test_update_budgets_creates_a_missing_file(toy_zoo: pytest.Pytester):
    created = toy_zoo.path / "new.toml"
    result = toy_zoo.runpytest(
        "--budgets", str(created), "--update-budgets", "--collect-only", "-p", "no:cacheprovider"
    )
    assert result.ret == 0
    assert created.is_file() and BudgetFile.load(created).entries == {}


def test_malformed_file_stops_the_session_with_a_clear_error(toy_zoo: pytest.Pytester):
    path = toy_zoo.path / "bad.toml"
    path.write_text('[cases."x/y/z"]\ngraph_breaks = "many"\n')
    result = toy_zoo.runpytest(f"--budgets={path}", "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*malformed budgets file: {path}:1: entry 'x/y/z': graph_breaks must be*"])


def _usage_error(toy_zoo: pytest.Pytester, *args: str) -> str:
    result = toy_zoo.runpytest(*args, "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    return result.stderr.str()


@pytest.mark.parametrize(
    ("option", "under"), [("--record-budgets", "sub/recorded.toml"), ("--compile-report", "r.json")]
)
def test_an_output_under_a_file_is_a_usage_error_naming_that_file(toy_zoo: pytest.Pytester, option, under):
    """Before the first case: the option, the path, and why (a file stands where a folder must be)."""
    blocker = toy_zoo.path / "blocker"
    blocker.write_text("")
    target = blocker / under
    missing = f"cannot create the folder {target.parent}: " if target.parent != blocker else ""
    error = _usage_error(toy_zoo, f"{option}={target}")
    assert f"{option}: cannot write {target}: {missing}{blocker} is a file, not a folder" in error


def test_budgets_that_are_a_folder_are_a_usage_error_with_or_without_update(toy_zoo: pytest.Pytester):
    """--update-budgets writes the --budgets file: it is checked like every other output, before the first case."""
    folder = toy_zoo.path / "budgets"
    folder.mkdir()
    error = _usage_error(toy_zoo, f"--budgets={folder}", "--update-budgets")
    assert f"--update-budgets: cannot write {folder}: it is a folder" in error
    assert f"budgets file {folder}: cannot read it: Is a directory" in _usage_error(toy_zoo, f"--budgets={folder}")


def test_an_output_in_a_read_only_folder_is_a_usage_error(toy_zoo: pytest.Pytester):
    folder = toy_zoo.path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("this user writes into read-only folders (root)")
        error = _usage_error(toy_zoo, f"--compile-report={folder / 'report.json'}")
    finally:
        folder.chmod(0o755)
    assert f"--compile-report: cannot write {folder / 'report.json'}: {folder} is not writable (Permission" in error
