"""Every break Dynamo records is in the report: a break before any operation ends an empty graph that no backend
sees, and the report is reconciled with Dynamo's own record, so a probe that misses one fails the case."""

from __future__ import annotations

import pytest
import torch

from compile_audit.probe import frame_records
from compile_audit.rules.budgets import Budget
from compile_audit.rules.case import CaseAudit
from compile_audit.rules.verdict import Kind
from tests.selftest import toys

pytestmark = pytest.mark.selftest


def _audited(module: torch.nn.Module) -> CaseAudit:
    audit = CaseAudit("toy/first/train", Budget(), under_test=("tests",))
    compiled = audit.compile(module)
    for name in ("train-1", "train-2"):
        with audit.phase(name, "train"):
            compiled(torch.randn(2, 4))
    return audit


@pytest.mark.parametrize(
    ("toy", "planted", "function"),
    [
        (toys.BreaksFirst, "first-statement", "forward"),
        (toys.BreaksInHelperFirst, "helper-first", "_batch_size"),
        (lambda: toys.Wraps(toys.BreaksFirst()), "first-statement", "forward"),
    ],
    ids=["first-statement", "helper-before-any-operation", "inner-forward-first"],
)
def test_a_break_before_any_operation_fails_its_case_at_its_line(toy, planted, function):
    audit = _audited(toy())
    (root,) = audit.result.roots
    assert root.location == toys.planted_line(planted) and root.function == function
    verdict = audit.verdict()
    assert verdict.status == "failed"
    assert [p.kind for p in verdict.problems] == [Kind.OVER_BUDGET]
    assert f"{toys.planted_line(planted)} in {function} [train-1" in verdict.message
    assert "graph breaks (roots) 1/0" in verdict.message


def test_a_clean_module_reconciles_with_nothing_missed():
    verdict = _audited(toys.Clean()).verdict()
    assert verdict.status == "passed", verdict.message


@pytest.mark.parametrize("toy", [toys.BreaksFirst, toys.Prints, toys.BranchesOnData, toys.BreaksInHelperFirst])
def test_the_report_holds_every_break_dynamo_recorded(toy):
    audit = _audited(toy())
    assert not [p for p in audit.verdict().problems if p.kind is Kind.MISSED_BREAK]


def test_a_probe_that_misses_the_empty_graph_break_fails_with_where_dynamo_recorded_it(monkeypatch):
    """The probe as it was: breaks only from graphs and frames run eagerly. Dynamo's counter and the resume function
    it compiled still tell of the break, so the case fails, naming the line."""
    monkeypatch.setattr(frame_records.FrameRecords, "breaks_without_graph", lambda self, counted: [])
    audit = _audited(toys.BreaksFirst())
    assert audit.result.roots == []
    verdict = audit.verdict()
    missed = [p for p in verdict.problems if p.kind is Kind.MISSED_BREAK]
    assert missed and verdict.status == "failed"
    assert "the probe missed 1 graph break(s) Dynamo recorded" in verdict.message
    assert f"Dynamo resumed after a break at {toys.planted_line('first-statement')} in forward" in verdict.message
    assert "Dynamo's graph-break counter added 1, the report has 0" in verdict.message
    assert not verdict.feeds_budget


def test_a_known_failure_does_not_hold_a_missed_break(monkeypatch):
    monkeypatch.setattr(frame_records.FrameRecords, "breaks_without_graph", lambda self, counted: [])
    audit = _audited(toys.BreaksFirst())
    audit.budget = Budget(known_check=("scenario check",), known_failure="a reason", recorded=True)
    assert audit.verdict().status == "failed"
