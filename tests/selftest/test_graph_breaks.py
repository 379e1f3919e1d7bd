"""Graph-break counting fails, with reason and file:line, on toy modules that break on purpose."""

from __future__ import annotations

import pytest
import torch

from compile_audit.probe.graph_breaks import find_graph_breaks, one_line_reason
from compile_audit.rules.budgets import Budget
from compile_audit.rules.case import CaseAudit
from compile_audit.rules.verdict import Kind
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
    verdict = audit.verdict()
    assert verdict.status == "failed" and [p.kind for p in verdict.problems] == [Kind.OVER_BUDGET]
    message = verdict.message
    assert "toy/branch/forward: graph breaks (roots) 1/0" in message
    assert "graph breaks: 1 > budget 0" in message
    assert toys.planted_line("branch") in message
    assert "if y.sum() > 0:" in message


def _branch_signature() -> str:
    audit = CaseAudit("toy/branch/forward", Budget())
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    (root,) = audit.result.roots
    return root.identity


def test_break_within_budget_passes():
    budget = Budget(graph_breaks=1, note="planted", recorded=True, break_signatures=(_branch_signature(),))
    audit = CaseAudit("toy/branch/forward", budget)
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    assert audit.verdict().status == "passed"


def test_signature_names_file_function_and_graph_break_id_without_the_line():
    signature = _branch_signature()
    assert signature == "tests/selftest/toys.py in forward: gb0170", signature  # Data-dependent branching


def test_new_break_within_the_count_fails_with_its_location():
    """A new break that replaces an allowed one keeps the count, and still fails: identity, not only counts."""
    budget = Budget(graph_breaks=1, note="planted", recorded=True, break_signatures=("peft/x.py in f: print",))
    audit = CaseAudit("toy/branch/forward", budget, under_test=("tests",))
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    verdict = audit.verdict(where="budgets.toml:3")
    assert verdict.status == "failed"
    kinds = [p.kind for p in verdict.problems]
    assert kinds == [Kind.NEW_ROOT, Kind.TIGHTEN], kinds  # the allowed one vanished: tighten too
    assert "not in the budget (budgets.toml:3)" in verdict.message
    assert f"new graph break {_branch_signature()!r} at {toys.planted_line('branch')}" in verdict.message
    assert "Data-dependent branching" in verdict.message


def test_vanished_signature_asks_to_tighten():
    budget = Budget(graph_breaks=0, recorded=True, break_signatures=("peft/x.py in f: print",), note="x")
    audit = CaseAudit("toy/clean/forward", budget)
    audit.graph_breaks(toys.Clean(), torch.randn(2, 4), call="forward")
    verdict = audit.verdict()
    assert [p.kind for p in verdict.problems] == [Kind.TIGHTEN]
    assert "graph break 'peft/x.py in f: print' is gone" in verdict.message


def test_one_line_reason_keeps_headline_and_explanation():
    reason = "Unsupported method call\n  Explanation: Dynamo cannot trace `str.startswith`\n  Hint: avoid it\n"
    assert one_line_reason(reason) == "Unsupported method call: Dynamo cannot trace `str.startswith`"


def test_a_frame_dynamo_runs_eagerly_counts_its_root_and_lists_the_frame_under_it():
    """peft#3558: the whole forward ran eagerly and no graph told of it; the count read 0. The break is where
    Dynamo stopped (in the attribute's getter); forward, run eagerly because of it, is its consequence."""
    audit = CaseAudit("toy/eager-frame/forward", Budget())
    compiled = audit.compile(toys.RunsEagerlyAfterAttributeBreak())
    with audit.phase("call-1", "train"):
        compiled(torch.randn(2, 4))
    with audit.phase("call-2", "train"):
        compiled(torch.randn(2, 4))
    result = audit.result
    eager = [b for report in result.graph_breaks for b in report.breaks if b.eager_function]
    assert len(eager) == 1, result.graph_breaks
    (brk,) = eager
    assert brk.location == toys.planted_line("eager-frame")
    assert brk.eager_function.startswith("forward at tests/selftest/toys.py:")
    assert brk.graph_break_id == "gb0025"
    assert brk.stopped_at == toys.planted_line("inner-break")
    (root,) = result.roots
    assert result.graph_break_count == 1
    assert root.location == toys.planted_line("inner-break") and root.eager_frames == [brk]
    assert root.identity.startswith("tests/selftest/toys.py in ") and root.identity.endswith(": gb0025")
    verdict = audit.verdict()
    assert verdict.status == "failed"
    assert f"{toys.planted_line('inner-break')} in " in verdict.message
    assert "so Dynamo ran 1 enclosing frame(s) eagerly: forward at tests/selftest/toys.py:" in verdict.message
    assert result.to_dict()["graph_breaks"]["signatures"] == [root.identity]


def test_compile_work_per_phase_counts_operations_and_guards():
    audit = CaseAudit("toy/clean/forward", Budget())
    compiled = audit.compile(toys.Clean())
    with audit.phase("call-1", "eval") as first:
        compiled(torch.randn(2, 4))
    with audit.phase("call-2", "eval") as second:
        compiled(torch.randn(2, 4))
    assert first.operations_captured > 0 and first.guards > 0
    assert (second.frames_compiled, second.operations_captured, second.guards) == (0, 0, 0)
    assert {"operations_captured", "guards"} <= set(audit.result.to_dict()["phases"][0])


def _rejects_each_graph_once(gm, example_inputs):
    """A backend that, like AOTAutograd turning a Python float into a tensor, rejects a graph the first time and
    makes Dynamo trace its frame again."""
    key = gm.code
    if key not in _rejects_each_graph_once.seen:
        _rejects_each_graph_once.seen.add(key)
        raise torch._dynamo.exc.TensorifyScalarRestartAnalysis
    return gm.forward


def test_a_graph_the_backend_rejects_for_a_restart_is_not_counted():
    _rejects_each_graph_once.seen = set()
    torch._dynamo.reset()
    audit = CaseAudit("toy/branch/forward", Budget(), backend=_rejects_each_graph_once)
    compiled = audit.compile(toys.BranchesOnData())
    with audit.phase("call-1", "train") as phase:
        compiled(torch.randn(2, 4))
    assert _rejects_each_graph_once.seen, "the backend never rejected a graph: the toy proves nothing"
    assert (phase.graphs_compiled, len(phase.graph_breaks)) == (2, 1), (phase.graphs_compiled, phase.graph_breaks)
