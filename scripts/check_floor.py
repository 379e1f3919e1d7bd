"""Check a compile report from a run on the oldest supported PEFT: every case ran, or skipped with the reason
the registry gives (for a method the installed peft lacks: "<method>: not in peft <version> (...)").

    pytest -k "llama-tiny and train-eval-train" --compile-report out/floor.json
    python scripts/check_floor.py out/floor.json --model llama-tiny --scenario train-eval-train

Run it in the environment of the pytest run: the expected skips are asked of the installed peft. Budgets are not
checked here: they were recorded on the newest peft, and an older one may break or recompile more. Cases over
budget are listed, not counted as problems. A problem is a case of the default selection missing from the report,
a case that skipped without the registry's reason, or one that did not reach its audit (an error, or an exception
before the first phase). Exit status: 0 no problem, 1 problems, 2 the report cannot be used.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import bench_models
from compile_audit.artifacts.records import CaseRecord
from compile_audit.artifacts.report import parse_report, read_cases
from tests.cases import cases_for

LIBRARIES = ("torch", "transformers", "peft")  # the versions a floor run names


def expected_cases(model: str, scenario: str) -> list[tuple[str, str]]:
    """(case id, method) of the default CPU selection for the model and scenario."""
    return [(c.id, c.method) for c in cases_for(scenario) if c.model == model and c.tier == "cpu"]


def case_problem(case: CaseRecord | None, case_id: str, expected_skip: str | None) -> str | None:
    """What is wrong with one case of the report, or None."""
    if case is None:
        return f"{case_id}: not in the report (not collected, or not run)"
    first_line = (case.message or "").strip().splitlines()[:1]
    said = first_line[0] if first_line else "no message"
    if expected_skip is not None:
        if case.status == "skipped" and case.message == expected_skip:
            return None
        return f"{case_id}: expected a skip with {expected_skip!r}, got {case.status}: {said}"
    if case.status == "skipped":
        return f"{case_id}: skipped, yet the installed peft has the method: {said}"
    if case.status == "error" or not case.audited:
        return f"{case_id}: {case.status} before its audit: {said}"
    return None


def check(report: Mapping[str, Any], model: str, scenario: str) -> tuple[list[str], list[str]]:
    """(problems, summary lines) for the report's cases of one model and scenario; ``report`` is its JSON."""
    parsed = parse_report(report, "the report")
    cases = parsed.by_id
    expected = expected_cases(model, scenario)
    if not expected:
        return [f"no case of model {model!r} and scenario {scenario!r} in the default selection"], []
    problems, skipped, failed, ran = [], [], [], 0
    for case_id, method in expected:
        expected_skip = bench_models.skip_reason(model, method)
        problem = case_problem(cases.get(case_id), case_id, expected_skip)
        if problem:
            problems.append(problem)
        elif expected_skip:
            skipped.append(expected_skip)
        else:
            ran += 1
            if cases[case_id].status == "failed":
                failed.append(case_id)
    versions = ", ".join(f"{k} {parsed.versions[k]}" for k in LIBRARIES)
    lines = [f"{versions}: {ran} ran ({len(failed)} failed), {len(skipped)} skipped, {len(problems)} problems"]
    lines += [f"- failed (budgets recorded on another version): {case_id}" for case_id in failed]
    lines += [f"- skipped: {reason}" for reason in skipped]
    lines += [f"- PROBLEM: {problem}" for problem in problems]
    return problems, lines


def load_report(path: str) -> Mapping[str, Any]:
    """The report's JSON (validated by the gate's own reader), if it is from the peft installed here (the expected
    skips are asked of it)."""
    report = read_cases(path)
    if not set(LIBRARIES) <= report.versions.keys():
        raise ValueError(f"{path}: the report does not name the versions of {', '.join(LIBRARIES)}")
    installed, recorded = bench_models.library_versions()["peft"], report.versions["peft"]
    if recorded != installed:
        raise ValueError(f"the report is from peft {recorded}, this environment has peft {installed}")
    return report.data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", help="the --compile-report JSON of the run")
    parser.add_argument("--model", default="llama-tiny")
    parser.add_argument("--scenario", default="train-eval-train")
    args = parser.parse_args(argv)
    try:
        report = load_report(args.report)
    except (OSError, ValueError) as error:
        print(f"check_floor: cannot use {args.report}: {error}", file=sys.stderr)
        return 2
    problems, lines = check(report, args.model, args.scenario)
    print("\n".join(lines or problems))
    return int(bool(problems))


if __name__ == "__main__":
    sys.exit(main())
