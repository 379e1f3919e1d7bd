"""A cause's shared allowance (``in_cases`` / ``allows`` / ``at_most``): what it holds, and where it stops."""

from __future__ import annotations

import pytest
import torch

from compile_audit.rules.budgets import BudgetFile, BudgetFileError
from compile_audit.rules.case import CaseAudit
from compile_audit.rules.verdict import Kind, headline, observed
from tests.selftest.test_roots import BreaksBelowAHook

pytestmark = pytest.mark.selftest

CASE = "toy/allow/train"


class Linear(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _budgets(tmp_path, identity: str, at_most: int = 1, in_cases: str = "toy/allow/*") -> BudgetFile:
    path = tmp_path / "budgets.toml"
    path.write_text(
        "[causes.shared]\n"
        'note = "met by every case of the scenario"\n'
        f"signatures = [{identity!r}]\n"
        f"in_cases = [{in_cases!r}]\n"
        f"allows = [{identity!r}]\n"
        f"at_most = {at_most}\n"
    )
    return BudgetFile.load(path)


def _run(module: torch.nn.Module, budgets: BudgetFile, lengths=(2,), **compile_kwargs) -> CaseAudit:
    audit = CaseAudit(CASE, budgets.budget_for(CASE), under_test=("tests",))
    compiled = audit.compile(module, **compile_kwargs)
    for n, length in enumerate(lengths):
        with audit.phase(f"train-{n + 1}", kind="train"):
            compiled(torch.ones(length))
    return audit


def _root_identity(tmp_path) -> str:
    return _run(BreaksBelowAHook(), BudgetFile(tmp_path / "none.toml")).result.roots[0].identity


def _recompile_signature(tmp_path) -> str:
    audit = _run(Linear(), BudgetFile(tmp_path / "none.toml"), lengths=(2, 3, 4), dynamic=False)
    (signature,) = audit.result.recompile_signatures
    return signature


def test_a_root_the_cause_allows_in_the_case_needs_no_entry(tmp_path):
    budgets = _budgets(tmp_path, _root_identity(tmp_path))
    audit = _run(BreaksBelowAHook(), budgets)
    verdict = audit.verdict()
    assert verdict.status == "passed", verdict.message
    assert observed(audit.result, audit.budget).graph_breaks == 0
    assert audit.result.graph_break_count == 1  # still reported, only not counted against the entry


def test_the_allowance_holds_only_in_the_cases_it_names(tmp_path):
    budgets = _budgets(tmp_path, _root_identity(tmp_path), in_cases="other/*")
    verdict = _run(BreaksBelowAHook(), budgets).verdict()
    assert verdict.status == "failed" and verdict.message.startswith(f"{CASE}: graph breaks (roots) 1/0")


def test_up_to_at_most_recompiles_are_held_and_one_more_makes_them_all_count(tmp_path):
    signature = _recompile_signature(tmp_path)
    held = _run(Linear(), _budgets(tmp_path, signature, at_most=2), lengths=(2, 3, 4), dynamic=False)
    assert held.verdict().status == "passed", held.verdict().message
    assert "allowed by causes beside the entry: 2 x" in headline(CASE, held.result, held.budget)

    over = _run(Linear(), _budgets(tmp_path, signature, at_most=1), lengths=(2, 3, 4), dynamic=False)
    verdict = over.verdict()
    assert verdict.status == "failed"
    assert "unexpected recompiles 2/0" in verdict.message.splitlines()[0]
    assert any(p.kind is Kind.OVER_BUDGET for p in verdict.problems)


def test_an_entry_still_listing_what_the_cause_now_allows_asks_to_be_tightened(tmp_path):
    identity = _root_identity(tmp_path)
    path = tmp_path / "listed.toml"
    path.write_text(
        _budgets(tmp_path, identity).dumps()
        + f'[cases."{CASE}"]\ngraph_breaks = 1\nbreak_signatures = [{identity!r}]\n'
    )
    verdict = _run(BreaksBelowAHook(), BudgetFile.load(path)).verdict()
    assert [p.kind for p in verdict.problems] == [Kind.TIGHTEN]


@pytest.mark.parametrize(
    "fields, expected",
    [
        ('in_cases = ["a/*"]', "in_cases and allows go together"),
        ('in_cases = ["a/*"]\nallows = ["x.py in f: gb1"]\nat_most = 0', "at_most must be a whole number >= 1"),
        ('in_cases = ["a/*"]\nallows = ["y.py in g: gb2"]', "allows 'y.py in g: gb2', which none of its signatures"),
    ],
)
def test_a_malformed_allowance_names_the_file_and_the_cause(tmp_path, fields, expected):
    path = tmp_path / "bad.toml"
    path.write_text(f'[causes.c]\nnote = "n"\nsignatures = ["x.py in f: *"]\n{fields}\n')
    with pytest.raises(BudgetFileError, match=expected) as error:
        BudgetFile.load(path)
    assert str(path) in str(error.value) and "cause 'c'" in str(error.value)


def test_an_allowance_no_case_it_covers_met_asks_to_be_removed(tmp_path):
    budgets = _budgets(tmp_path, "x.py in f: gb0001")
    (unmet,) = budgets.unmet_allowances({CASE: set(), "other/case/x": {("shared", "x.py in f: gb0001")}})
    assert "cause 'shared' allows 'x.py in f: gb0001' in 1 case(s) that ran, and none of them met it" in unmet
    assert budgets.unmet_allowances({CASE: {("shared", "x.py in f: gb0001")}}) == []
    assert budgets.unmet_allowances({"other/case/x": set()}) == []  # none of its cases ran: not judged


def _other_break(x: torch.Tensor) -> torch.Tensor:
    x = x - 1
    torch._dynamo.graph_break()
    return x / 2


class BreaksTwice(BreaksBelowAHook):
    """The hook toy's root, then one more in another function."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _other_break(super().forward(x))


def test_a_failure_leads_with_the_roots_to_fix_and_lists_the_allowed_ones_after(tmp_path):
    verdict = _run(BreaksTwice(), _budgets(tmp_path, _root_identity(tmp_path))).verdict()
    lines = verdict.message.splitlines()
    assert lines[0].startswith(f"{CASE}: graph breaks (roots) 1/0")
    assert lines[1] == "roots (where Dynamo stopped; fix these):" and "in _other_break" in lines[2]
    allowed = lines.index("roots a cause allows in this case (not counted):")
    assert "in _breaks_inside" in lines[allowed + 1]
    assert not any("in _breaks_inside" in line for line in lines[1:allowed])  # the headline names what was held
