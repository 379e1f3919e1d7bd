"""scripts/check_floor.py, the check of the oldest-PEFT CI job, shown to fail on every kind of wrong report."""

from __future__ import annotations

import json

import peft
import pytest

import bench_models
from compile_audit.artifacts.report import SCHEMA
from scripts import check_floor

pytestmark = pytest.mark.selftest

MODEL, SCENARIO = "llama-tiny", "train-eval-train"


def run_as_registry_says() -> dict:
    """The report of a run that did what the registry says: skips with its reasons, every other case audited."""
    cases = []
    for case_id, method in check_floor.expected_cases(MODEL, SCENARIO):
        reason = bench_models.skip_reason(MODEL, method)
        status = "skipped" if reason else "passed"
        case = {"id": case_id, "model": MODEL, "method": method, "scenario": SCENARIO, "status": status}
        cases.append({**case, "message": reason, "audited": not reason})
    return {"schema": SCHEMA, "versions": bench_models.library_versions(), "cases": cases}


def with_case(report: dict, method: str, **changes) -> dict:
    report["cases"] = [{**c, **changes} if c["method"] == method else c for c in report["cases"]]
    return report


def problems(report: dict) -> list[str]:
    return check_floor.check(report, MODEL, SCENARIO)[0]


def test_a_run_as_the_registry_says_has_no_problem():
    found, lines = check_floor.check(run_as_registry_says(), MODEL, SCENARIO)
    assert found == []
    assert lines[0].endswith(", 0 problems")


def test_a_failed_but_audited_case_is_listed_not_a_problem():
    report = with_case(run_as_registry_says(), "lora", status="failed", message="over budget")
    found, lines = check_floor.check(report, MODEL, SCENARIO)
    assert found == []
    assert "- failed (budgets recorded on another version): llama-tiny/lora/train-eval-train" in lines


def test_a_missing_case_is_a_problem():
    report = run_as_registry_says()
    report["cases"] = [c for c in report["cases"] if c["method"] != "ia3"]
    assert problems(report) == ["llama-tiny/ia3/train-eval-train: not in the report (not collected, or not run)"]


def test_a_method_peft_lacks_that_ran_is_a_problem(monkeypatch):
    report = run_as_registry_says()  # vera ran
    monkeypatch.delattr(peft, "VeraConfig")  # ... on a peft without it
    assert problems(report) == [
        f"llama-tiny/vera/train-eval-train: expected a skip with 'vera: not in peft {peft.__version__} "
        "(no peft.VeraConfig)', got passed: no message"
    ]


def test_a_skip_for_another_reason_is_a_problem(monkeypatch):
    monkeypatch.delattr(peft, "VeraConfig")
    report = with_case(run_as_registry_says(), "vera", message="vera: something else")
    assert problems(report) == [
        f"llama-tiny/vera/train-eval-train: expected a skip with 'vera: not in peft {peft.__version__} "
        "(no peft.VeraConfig)', got skipped: vera: something else"
    ]


def test_a_skipped_method_that_peft_has_is_a_problem():
    report = with_case(run_as_registry_says(), "lora", status="skipped", message="lora: some reason", audited=False)
    assert problems(report) == [
        "llama-tiny/lora/train-eval-train: skipped, yet the installed peft has the method: lora: some reason"
    ]


def test_a_case_that_raised_before_its_audit_is_a_problem():
    report = with_case(run_as_registry_says(), "lora", status="failed", message="TypeError: x\nmore", audited=False)
    assert problems(report) == ["llama-tiny/lora/train-eval-train: failed before its audit: TypeError: x"]


def test_an_empty_selection_is_a_problem():
    assert check_floor.check(run_as_registry_says(), "no-such-model", SCENARIO)[0] == [
        "no case of model 'no-such-model' and scenario 'train-eval-train' in the default selection"
    ]


def test_exit_status(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(run_as_registry_says()))
    assert check_floor.main([str(path)]) == 0
    path.write_text(json.dumps(with_case(run_as_registry_says(), "lora", status="error", audited=False)))
    assert check_floor.main([str(path)]) == 1
    other = {**run_as_registry_says(), "versions": {**bench_models.library_versions(), "peft": "0.0.1"}}
    path.write_text(json.dumps(other))
    assert check_floor.main([str(path)]) == 2
    assert f"the report is from peft 0.0.1, this environment has peft {peft.__version__}" in capsys.readouterr().err
    path.write_text(json.dumps({"schema": SCHEMA, "versions": {"peft": peft.__version__}, "cases": []}))
    assert check_floor.main([str(path)]) == 2
    assert "does not name the versions of torch, transformers, peft" in capsys.readouterr().err
    path.write_text(json.dumps({"versions": {"peft": peft.__version__}, "cases": []}))
    assert check_floor.main([str(path)]) == 2
    assert "not a compile report" in capsys.readouterr().err
