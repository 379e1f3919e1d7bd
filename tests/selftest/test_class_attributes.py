"""A class attribute changed or added: where only the package looks it up, the cases that ran a statement naming it;
where the class body is data (a dataclass's fields, an enum's members) or code outside may look it up, every case of
the class."""

from __future__ import annotations

import pytest

from compile_audit.selection.footprints_file import Footprints
from tests.selftest.test_added_methods import layer_change

pytestmark = pytest.mark.selftest

# m/a/x ran ``listing`` (it reads ``names``); m/b/x ran ``forward`` only.
LAYER = """import dataclasses
import enum


class Layer:
    names = ("a",)

    def forward(self, x):
        return x

    def listing(self):
        return self.names


class Sub(Layer):
    def forward(self, x):
        return -x


@dataclasses.dataclass
class Config:
    names: tuple = ("a",)

    def forward(self, x):
        return x

    def listing(self):
        return self.names


class Kind(str, enum.Enum):
    A = "a"

    def forward(self, x):
        return x

    def listing(self):
        return self.names
"""
CASES = ("m/a/x", "m/b/x")


def _footprints(cls: str) -> Footprints:
    return Footprints(
        CASES,
        {f"toy/layer.py::{cls}.forward": frozenset(CASES), f"toy/layer.py::{cls}.listing": frozenset({"m/a/x"})},
    )


def _selection(tmp_path, cls: str, old: str, new: str, outside: frozenset[str] | None = frozenset()):
    header = f"class {cls}"
    at = LAYER.index(header)
    head = LAYER[:at] + LAYER[at:].replace(old, new, 1)
    assert head != LAYER
    return layer_change(tmp_path, LAYER, head, _footprints(cls), outside)


def test_a_changed_attribute_of_a_plain_class_selects_the_cases_that_read_it(tmp_path):
    chosen = _selection(tmp_path, "Layer", 'names = ("a",)', 'names = ("a", "b")')
    assert chosen.cases == ("m/a/x",), chosen.reasons
    assert "an attribute of Layer, a plain class, that only the package looks up" in chosen.reasons[0]


def test_an_added_attribute_no_code_names_selects_no_case(tmp_path):
    chosen = _selection(tmp_path, "Layer", 'names = ("a",)', 'names = ("a",)\n    unread = {}')
    assert chosen.cases == (), chosen.reasons


@pytest.mark.parametrize("cls, old", [("Config", 'names: tuple = ("a",)'), ("Kind", 'A = "a"')])
def test_a_dataclass_field_or_an_enum_member_selects_every_case_of_its_class(tmp_path, cls, old):
    chosen = _selection(tmp_path, cls, old, old.replace('"a"', '"b"'))
    assert chosen.cases == CASES, chosen.reasons


@pytest.mark.parametrize(
    "outside, why",
    [(frozenset({"names"}), "code outside the package spells `names`"), (None, "outside the package is unknown")],
)
def test_an_attribute_code_outside_may_look_up_selects_every_case_of_its_class(tmp_path, outside, why):
    chosen = _selection(tmp_path, "Layer", 'names = ("a",)', 'names = ("b",)', outside)
    assert chosen.cases == CASES, chosen.reasons
    assert why in chosen.reasons[0], chosen.reasons
