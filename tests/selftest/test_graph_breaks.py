"""Graph-break counting fails, with reason and file:line, on toy modules that break on purpose."""

from __future__ import annotations

import pytest
import torch

from compile_audit.budgets import Budget
from compile_audit.case import CaseAudit
from compile_audit.graph_breaks import find_graph_breaks, one_line_reason
from tests.selftest import toys

pytestmark = pytest.mark.selftest


@pytest.mark.parametrize(
    ("toy", "planted", "reason_words"),
    [
        (toys.Prints, "print", "print"),
        (toys.CallsItem, "item", "item"),
        (toys.BranchesOnData, "branch", "Data-dependent"),
    ],
    ids=["print", "item", "data-dependent-branch"],
)
def test_break_is_counted_and_located(toy, planted, reason_words):
    report = find_graph_breaks(toy(), torch.randn(2, 4), call="forward")
    assert report.count >= 1
    locations = [b.location for b in report.breaks]
    assert toys.planted_line(planted) in locations, locations
    assert any(reason_words.lower() in b.reason.lower() for b in report.breaks), [b.reason for b in report.breaks]


def test_clean_module_has_no_break():
    assert find_graph_breaks(toys.Clean(), torch.randn(2, 4), call="forward").count == 0


def test_over_budget_message_names_reason_and_location():
    audit = CaseAudit("toy/branch/forward", Budget())
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    failures, _ = audit.failures()
    message = audit.failure_message(failures)
    assert "toy/branch/forward: graph breaks 1/0" in message
    assert "graph breaks: 1 > budget 0" in message
    assert toys.planted_line("branch") in message
    assert "if y.sum() > 0:" in message


def test_break_within_budget_passes():
    audit = CaseAudit("toy/branch/forward", Budget(graph_breaks=1, note="planted", recorded=True))
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    assert audit.failures() == ([], [])


def test_one_line_reason_keeps_headline_and_explanation():
    reason = "Unsupported method call\n  Explanation: Dynamo cannot trace `str.startswith`\n  Hint: avoid it\n"
    assert one_line_reason(reason) == "Unsupported method call: Dynamo cannot trace `str.startswith`"
