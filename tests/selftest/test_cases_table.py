"""tests/cases.py's SELECTION: one table of typed rows, checked when it is built; a bad name is an error naming it."""

from __future__ import annotations

import dataclasses
import enum

import pytest

from bench_models import METHODS
from tests import cases

pytestmark = pytest.mark.selftest


def strings_in(value) -> list[str]:
    """Every string in a table's data (dicts, tuples, dataclasses), typed values (enums) aside."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, enum.Enum):
        return []
    if dataclasses.is_dataclass(value):
        value = [getattr(value, field.name) for field in dataclasses.fields(value)]
    elif isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    elif not isinstance(value, list | tuple | set | frozenset):
        return []
    return [string for item in value for string in strings_in(item)]


def test_the_table_holds_no_sentinel_strings_among_method_names():
    sentinels = [s for s in strings_in(cases.SELECTION) if s.startswith("<")]
    assert not sentinels, f"SELECTION names method sets by sentinel strings: {sorted(set(sentinels))}"


def test_the_table_is_rows_of_typed_method_sets_naming_registry_methods_only():
    assert isinstance(cases.SELECTION, tuple) and cases.SELECTION
    for row in cases.SELECTION:
        assert isinstance(row, cases.Row)
        assert isinstance(row.methods, cases.Methods), row
        assert all(isinstance(group, cases.Group) for group in row.methods.groups), row
        assert set(row.methods.names) | set(row.methods.left_out) <= set(METHODS), row


BAD_ROWS = [
    ({"methods": ("named", "lora", "lorra")}, r"unknown method 'lorra' \(not in bench_models.METHODS\)"),
    ({"methods": ("every-but", "dora")}, r"unknown method 'dora'"),
    ({"methods": ("lora", "<every method>")}, r"is not a Methods"),
    ({"models": ("llama-tiny", "llama-tinyy")}, r"unknown model 'llama-tinyy'"),
    ({"models": "llama-3.2-1b"}, r"model 'llama-3.2-1b' is not in the CPU matrix"),
    ({"scenarios": "train-eval-trian"}, r"unknown scenario 'train-eval-trian'"),
    ({"cpu_backends": ("eager", "aot-eager")}, r"unknown backend 'aot-eager'"),
    ({"device": "mps"}, r"unknown device 'mps'"),
    ({"methods": ("named-but", "lora", "ia3")}, r"leaves out 'ia3', which it does not include"),
    ({"why": " "}, r"no why"),
]


def methods_of(spec):
    """The Methods a BAD_ROWS spec stands for (built here, so that the list is read without tests.cases)."""
    if spec[0] == "named":
        return cases.named(*spec[1:])
    if spec[0] == "every-but":
        return cases.EVERY_METHOD.but(*spec[1:])
    if spec[0] == "named-but":
        return cases.named(spec[1]).but(*spec[2:])
    return spec


@pytest.mark.parametrize(("change", "message"), BAD_ROWS, ids=[", ".join(change) for change, _ in BAD_ROWS])
def test_a_bad_row_is_an_error_naming_the_bad_name_and_the_row(change, message):
    row = {"scenarios": "train-eval-train", "models": "llama-tiny", "methods": cases.named("lora"), "why": "the why"}
    change = {key: methods_of(value) if key == "methods" else value for key, value in change.items()}
    with pytest.raises(ValueError, match=message) as raised:
        cases.Row(**{**row, **change})
    assert str(raised.value).startswith("the row (") and "in SELECTION (tests/cases.py): " in str(raised.value)


def test_typed_method_sets_resolve_in_registry_order():
    architecture_specific = [m for m, method in METHODS.items() if method.architecture_specific]
    assert cases.EVERY_METHOD.resolve() == list(METHODS)
    assert cases.ARCHITECTURE_SPECIFIC.resolve() == architecture_specific
    fewer = cases.ARCHITECTURE_SPECIFIC.plus("lora").but(architecture_specific[0])
    assert fewer.resolve() == ["lora", *architecture_specific[1:]]
    assert cases.named("ia3", "lora").resolve() == ["lora", "ia3"]


def test_every_scenario_has_a_row():
    assert {s for row in cases.SELECTION for s in row.scenarios} == set(cases.SCENARIOS)


def test_a_full_matrix_only_row_runs_with_full_matrix_or_with_its_case_only(monkeypatch):
    added = "qwen2-tiny/ia3/ddp"  # under DDP, the other tiny architectures run LoRA only
    row = cases.Row("ddp", "qwen2-tiny", cases.named("ia3"), "a full-matrix-only row", full_matrix_only=True)
    assert added not in {c.id for c in cases.cases_for("ddp", full_matrix=True)}
    monkeypatch.setattr(cases, "SELECTION", (*cases.SELECTION, row))
    assert added not in {c.id for c in cases.cases_for("ddp")}
    assert added in {c.id for c in cases.cases_for("ddp", full_matrix=True)}
    assert cases.cases_for("ddp", with_cases=frozenset({added}))[-1].id == added
