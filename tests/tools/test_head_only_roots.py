"""Which of head's failures need no base run (gate_tools.head_only_roots): a root outside the budget at a line of
PEFT that base's source lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from compile_audit.artifacts.json_fields import Where
from compile_audit.artifacts.records import CaseRecord, Root
from compile_audit.rules.budgets import BudgetFile
from gate_tools.head_only_roots import BaseLines, base_is_recorded_release, decided_on_head

pytestmark = pytest.mark.selftest

CASE = "llama-tiny/lora/train-eval-train"
HELD_IDENTITY = "peft/tuners/lora/layer.py in forward: gb0036"
BUDGETS = f'''[versions.cpu]
peft = "0.21.2"

[causes."toy"]
note = "a toy cause"
signatures = ["{HELD_IDENTITY}"]

[cases."{CASE}"]
graph_breaks = 1
break_signatures = ["{HELD_IDENTITY}"]

[cases."{CASE.replace("llama", "opt")}"]
graph_breaks = 1
break_signatures = ["{HELD_IDENTITY}"]
recorded_with = {{ peft = "0.20.0" }}
'''


@pytest.fixture
def base(tmp_path: Path) -> Path:
    package = tmp_path / "peft"
    (package / "tuners" / "lora").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.21.2"\n')
    (package / "tuners" / "lora" / "layer.py").write_text("def forward(self, x):\n    return self.base(x)\n")
    return package


@pytest.fixture
def budgets(tmp_path: Path) -> BudgetFile:
    path = tmp_path / "compile_budgets.toml"
    path.write_text(BUDGETS)
    return BudgetFile.load(path)


def root(source: str, location: str = "peft/tuners/lora/layer.py:2", gb: str = "gb0025") -> Root:
    return Root(identity=f"{location.partition(':')[0]} in forward: {gb}", location=location, source=source)


def failed(*roots: Root, problem: str = "over budget", held: bool = False) -> CaseRecord:
    return CaseRecord.from_dict(
        {
            "id": CASE,
            "status": "failed",
            "audited": True,
            "graph_breaks": {"count": len(roots), "roots": [r.to_dict() for r in roots]},
            "problems": [{"kind": problem, "held": held}],
        },
        Where("test"),
    )


@pytest.mark.parametrize(
    ("source", "location", "lacks"),
    [
        ("torch._dynamo.graph_break()", "peft/tuners/lora/layer.py:2", True),
        ("    return self.base(x)", "peft/tuners/lora/layer.py:9", False),  # moved and re-indented: base has it
        ("", "peft/tuners/lora/layer.py:2", False),  # no source text: nothing decided
        ("# a comment", "peft/tuners/lora/layer.py:2", False),
        ("torch._dynamo.graph_break()", "peft/tuners/lora/new_file.py:2", True),  # a file base lacks
        ("torch._dynamo.graph_break()", "transformers/modeling_utils.py:2", False),  # not the package under change
    ],
)
def test_a_line_is_heads_own_only_where_base_has_no_line_of_its_text_in_that_file(base, source, location, lacks):
    assert BaseLines(base).lacks(root(source, location)) is lacks


def test_a_case_failing_its_budget_at_a_new_line_is_decided_on_head(base, budgets):
    [decided] = decided_on_head([failed(root("torch._dynamo.graph_break()"))], base, budgets)
    assert decided.case.id == CASE and decided.roots[0].location == "peft/tuners/lora/layer.py:2"


def test_a_root_the_budget_holds_decides_nothing_wherever_its_line(base, budgets):
    held = root("x = torch.nonzero(y)", gb="gb0036")
    assert held.identity == HELD_IDENTITY
    assert decided_on_head([failed(held)], base, budgets) == []


@pytest.mark.parametrize(("problem", "held"), [("check", False), ("over budget", True)])
def test_a_case_not_failing_its_budget_decides_nothing(base, budgets, problem, held):
    assert (
        decided_on_head([failed(root("torch._dynamo.graph_break()"), problem=problem, held=held)], base, budgets) == []
    )


def test_only_base_at_the_budgets_release_is_decided_for(base):
    assert base_is_recorded_release(base, {"peft": "0.21.2"})
    assert not base_is_recorded_release(base, {"peft": "0.22.0"})
    (base / "__init__.py").write_text("from .version import __version__\n")
    assert not base_is_recorded_release(base, {"peft": "0.21.2"})


def test_an_entry_recorded_on_other_versions_decides_nothing(base, budgets):
    case = failed(root("torch._dynamo.graph_break()"))
    elsewhere = type(case).from_dict({**case.to_dict(), "id": CASE.replace("llama", "opt")}, Where("test"))
    assert [item.case.id for item in decided_on_head([case, elsewhere], base, budgets)] == [CASE]
