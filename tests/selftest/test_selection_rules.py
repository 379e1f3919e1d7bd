"""Every selection rule by its id (``RULES`` in compile_audit.selection.change_selection): each named here or in
another self-test on a toy change it decides, and each exercised by a plant shape of the recall harness
(``gate_tools.recall.sites.SHAPE_RULES``). A rule without either fails, as does a pick naming no rule."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from compile_audit.selection import change_selection
from compile_audit.selection.change_selection import RULES, Pick, select_between
from compile_audit.selection.footprints_file import Footprints
from gate_tools.recall.sites import SHAPE_RULES
from tests.selftest.test_change_selection import BASE, TOY_FOOTPRINTS, _toy

pytestmark = pytest.mark.selftest

SELFTESTS = Path(__file__).parent
LAYER = BASE["layer.py"]
CACHED = "import functools\n\n\n@functools.cache\ndef cached():\n    return 1\n"
UNRUN = LAYER.replace("return RANKS", "return RANKS if unrun() else ()") + "\n\ndef unrun():\n    return 1\n"
READ_AT_IMPORT = LAYER + "\n\ndef unrun():\n    return 1\n\n\nLIMIT = unrun()\n"
PLAIN_ATTRIBUTE = LAYER.replace("class Linear:\n", "class Linear:\n    zq_kind = 'a'\n\n")
TABLE = LAYER + "\n\nTABLE = {'a': 1}\n\n\ndef keys():\n    return list(TABLE)\n"
VARIANT_FIELD = "    alpha: int = 16\n    use_x: bool = field(default=False, metadata={'is_lora_variant': True})\n"
VERSION = "__version__ = '1.0'\n\n\ndef card(lines):\n    return f'v {__version__}' in lines\n"
VARIANTS = LAYER + "\n\ndef lora_variants():\n    return {(): None, ('use_dora',): 'dora'}\n"
WITH_X = VARIANTS.replace("('use_dora',): 'dora'}", "('use_dora',): 'dora', ('use_x',): 'x'}")
VARIANT_RUNS = {"toy/layer.py::lora_variants": frozenset({"m/a/train", "m/b/train"})}

# rule -> (base files over the toy's BASE, head files over base, extra footprints, the cases selected or None: every)
CASES = {
    "unparsable-file": ({}, {"layer.py": LAYER + "\ndef broken(:\n"}, {}, None),
    "added-module-hook": ({}, {"layer.py": LAYER + "\n\ndef __getattr__(name):\n    return name\n"}, {}, None),
    "added-function": ({}, {"layer.py": LAYER + "\n\ndef extra():\n    return 1\n"}, {}, ()),
    "added-method": (
        {},
        {"layer.py": LAYER.replace("    def merge", "    def zq_extra(self):\n        return 1\n\n    def merge")},
        {},
        (),
    ),
    "cached-function": (
        {"cache.py": CACHED},
        {"cache.py": CACHED.replace("return 1", "return 2")},
        {"toy/cache.py::cached": frozenset({"m/c/train"})},
        ("m/c/train",),
    ),
    "changed-statements": (
        {},
        {"layer.py": LAYER.replace("return helper()", "return helper() + 1")},
        {},
        ("m/a/merge",),
    ),
    "ran-function": ({}, {"layer.py": LAYER.split("\n\ndef uses_alpha")[0] + "\n"}, {}, ("m/b/train",)),
    "read-at-import": (
        {"layer.py": READ_AT_IMPORT},
        {"layer.py": READ_AT_IMPORT.replace("return 1", "return 2")},
        {},
        None,
    ),
    "unrun-function": ({"layer.py": UNRUN}, {"layer.py": UNRUN.replace("return 1", "return 2")}, {}, ("m/a/merge",)),
    "class-attribute": ({"layer.py": PLAIN_ATTRIBUTE}, {"layer.py": PLAIN_ATTRIBUTE.replace("'a'", "'b'")}, {}, ()),
    "class-statement": ({}, {"layer.py": LAYER + "\n\nclass Extra:\n    pass\n"}, {}, ()),
    "class-body": (
        {},
        {"config.py": BASE["config.py"].replace("alpha: int = 16", "alpha: int = 32")},
        {},
        ("m/a/merge", "m/a/train", "m/b/train"),
    ),
    "version-string": (
        {"version.py": VERSION},
        {"version.py": VERSION.replace("1.0", "1.1")},
        {"toy/version.py::card": frozenset({"m/c/train"})},
        (),
    ),
    "module-name-readers": ({}, {"layer.py": LAYER.replace("RANKS = (1, 2)", "RANKS = (1, 2, 4)")}, {}, ("m/a/merge",)),
    "table-gains-entries": (
        {"layer.py": TABLE},
        {"layer.py": TABLE.replace("{'a': 1}", "{'a': 1, 'b': 2}")},
        {"toy/layer.py::keys": frozenset({"m/c/train"})},
        ("m/c/train",),
    ),
    "table-key-set": (
        {"layer.py": TABLE},
        {"layer.py": TABLE + "TABLE['b'] = 2\n"},
        {"toy/layer.py::keys": frozenset({"m/c/train"})},
        ("m/c/train",),
    ),
    "import-time-effect": ({}, {"__init__.py": BASE["__init__.py"] + "configure_everything()\n"}, {}, None),
    "variant-switch-added": (
        {},
        {"config.py": BASE["config.py"].replace("    alpha: int = 16\n", VARIANT_FIELD)},
        {},
        (),
    ),
    "variant-entry-added": (
        {"layer.py": VARIANTS},
        {"config.py": BASE["config.py"].replace("    alpha: int = 16\n", VARIANT_FIELD), "layer.py": WITH_X},
        VARIANT_RUNS,
        (),
    ),
}


@pytest.mark.parametrize(
    "config, layer",
    [
        pytest.param(BASE["config.py"], WITH_X, id="the-switch-is-not-added"),
        pytest.param(
            BASE["config.py"].replace("    alpha: int = 16\n", VARIANT_FIELD),
            WITH_X.replace("'dora', ('use_x',)", "'dora' if x else None, ('use_x',)"),
            id="other-code-changes-too",
        ),
        pytest.param(
            BASE["config.py"].replace("    alpha: int = 16\n", VARIANT_FIELD),
            WITH_X.replace("('use_x',)", "('use_x', 'use_a')"),
            id="an-unsorted-key",
        ),
        pytest.param(
            BASE["config.py"].replace("    alpha: int = 16\n", VARIANT_FIELD),
            WITH_X.replace("('use_x',): 'x'", "('use_x',): make_x()"),
            id="a-value-that-calls",
        ),
    ],
)
def test_a_variant_entry_added_otherwise_selects_the_cases_that_ran_the_mapping(tmp_path, config, layer):
    footprints = Footprints(TOY_FOOTPRINTS.cases, {**TOY_FOOTPRINTS.runs, **VARIANT_RUNS})
    base = _toy(tmp_path / "base", {"layer.py": VARIANTS})
    head = _toy(tmp_path / "head", {"layer.py": layer, "config.py": config})
    chosen = select_between(footprints, base, head)
    assert "variant-entry-added" not in {decision.rule for decision in chosen.decisions}, chosen.decisions
    assert {"m/a/train", "m/b/train"} <= set(chosen.cases), chosen.reasons


@pytest.mark.parametrize("rule", sorted(CASES))
def test_the_rule_decides_its_toy_change(tmp_path, rule):
    base_files, head_files, runs, expected = CASES[rule]
    footprints = Footprints(TOY_FOOTPRINTS.cases, {**TOY_FOOTPRINTS.runs, **runs})
    base = _toy(tmp_path / "base", base_files)
    head = _toy(tmp_path / "head", {**base_files, **head_files})
    chosen = select_between(footprints, base, head)
    assert rule in {decision.rule for decision in chosen.decisions}, chosen.decisions
    if rule in ("variant-switch-added", "variant-entry-added"):
        assert chosen.new_cases and not chosen.unjudged, chosen  # the new variant's cases stand for it
    if expected is None:
        assert chosen.everything, chosen.reasons
    else:
        assert not chosen.everything and chosen.cases == expected, chosen.reasons


def _rules_named_in_selftests() -> set[str]:
    text = "\n".join(path.read_text(encoding="utf-8") for path in SELFTESTS.glob("test_*.py"))
    quoted = set(re.findall(r'"([a-z-]+)"', text))
    return (quoted & set(RULES)) | set(CASES)


def test_every_rule_has_a_self_test_and_a_recall_plant_shape():
    without_test = sorted(set(RULES) - _rules_named_in_selftests())
    assert not without_test, f"rules no self-test names: {without_test}"
    exercised = {rule for rules in SHAPE_RULES.values() for rule in rules}
    assert not sorted(set(RULES) - exercised), (
        f"rules no recall plant shape exercises: {sorted(set(RULES) - exercised)}"
    )
    assert not exercised - set(RULES), f"SHAPE_RULES names unknown rules: {sorted(exercised - set(RULES))}"


def test_every_pick_names_a_rule_and_an_unknown_one_is_refused():
    source = Path(change_selection.__file__).read_text(encoding="utf-8")
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Pick"
    ]
    unnamed = [node.lineno for node in calls if not any(k.arg == "rule" for k in node.keywords)]
    assert calls and not unnamed, f"Pick(...) without rule= at lines {unnamed}"
    with pytest.raises(ValueError, match="names no rule"):
        Pick(frozenset(), "a reason", rule="no-such-rule")
