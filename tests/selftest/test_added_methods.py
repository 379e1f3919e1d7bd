"""A method added to a class that existed: it changes a case only where something looks its name up."""

from __future__ import annotations

import pytest

from compile_audit.selection.change_selection import compare_sources, package_files, select
from compile_audit.selection.footprints_file import Footprints
from compile_audit.selection.outside_names import spelled_outside, suite_files

pytestmark = pytest.mark.selftest

# ``Layer`` is every case's class; ``check`` (run by m/b/x only) looks a name up by string; ``Base.fresh``, which
# ``Layer`` inherits, ran in m/c/x; ``Other.other_only``, of an unrelated class, ran in m/b/x.
BASE = {
    "layer.py": (
        "from os import sep as imported_name\n\n\n"
        "class Base:\n"
        "    def fresh(self):\n        return 1\n\n\n"
        "class Layer(Base):\n"
        "    def forward(self, x):\n        return x\n\n"
        "    def check(self):\n        return hasattr(self, 'looked_up')\n\n\n"
        "class Other:\n"
        "    def other_only(self):\n        return 1\n\n\n"
        "class Listed:\n"
        "    names = ('listed',)\n\n"
        "    def forward(self, x):\n        return x\n"
    ),
}
CASES = ("m/a/x", "m/b/x", "m/c/x")
FOOTPRINTS = Footprints(
    CASES,
    {
        "toy/layer.py::Layer.forward": frozenset(CASES),
        "toy/layer.py::Layer.check": frozenset({"m/b/x"}),
        "toy/layer.py::Base.fresh": frozenset({"m/c/x"}),
        "toy/layer.py::Other.other_only": frozenset({"m/b/x"}),
        "toy/layer.py::Listed.forward": frozenset({"m/a/x"}),
    },
)


def layer_change(tmp_path, base: str, head: str, footprints: Footprints, outside: frozenset[str] | None):
    """What changing ``toy/layer.py`` from ``base`` to ``head`` selects, with these outside words."""
    roots = []
    for side, text in (("base", base), ("head", head)):
        root = tmp_path / side / "toy"
        root.mkdir(parents=True)
        (root / "__init__.py").write_text("")
        (root / "layer.py").write_text(text)
        roots.append(root)
    changes, unparsable, readers = compare_sources(package_files(roots[0]), package_files(roots[1]))
    return select(footprints, changes, readers, unparsable, outside)


def _selection(tmp_path, method: str, cls: str = "Layer", outside: frozenset[str] | None = frozenset()):
    header = next(line for line in BASE["layer.py"].splitlines() if line.startswith(f"class {cls}"))
    head = BASE["layer.py"].replace(f"{header}\n", f"{header}\n    def {method}(self):\n        return 0\n\n", 1)
    return layer_change(tmp_path, BASE["layer.py"], head, FOOTPRINTS, outside)


def test_a_method_no_code_names_selects_no_case(tmp_path):
    chosen = _selection(tmp_path, "unnamed_anywhere")
    assert chosen.cases == (), chosen.reasons
    assert "a name only the package spells: the 0 case(s)" in chosen.reasons[0]


def test_a_method_the_package_looks_up_by_string_selects_the_cases_that_ran_the_lookup(tmp_path):
    chosen = _selection(tmp_path, "looked_up")
    assert chosen.cases == ("m/b/x",), chosen.reasons


def test_a_method_that_overrides_an_ancestor_s_selects_the_cases_that_ran_the_ancestor_s(tmp_path):
    chosen = _selection(tmp_path, "fresh")
    assert chosen.cases == ("m/c/x",), chosen.reasons


def test_a_module_level_name_an_import_binds_is_no_lookup_on_an_instance(tmp_path):
    chosen = _selection(tmp_path, "imported_name")
    assert chosen.cases == (), chosen.reasons


def test_a_namesake_in_an_unrelated_class_is_no_override(tmp_path):
    chosen = _selection(tmp_path, "other_only")
    assert chosen.cases == (), chosen.reasons


@pytest.mark.parametrize(
    ("method", "outside", "why"),
    [
        ("extra_repr", frozenset({"extra_repr"}), "code outside the package spells `extra_repr`"),
        ("__len__", frozenset(), "Python looks it up by protocol"),
        ("unnamed_anywhere", None, "the code outside the package is unknown here"),
        ("listed", frozenset(), "a class or module body spells `listed`"),
    ],
)
def test_a_method_code_outside_or_a_protocol_or_a_body_can_reach_selects_every_case_of_its_class(
    tmp_path, method, outside, why
):
    chosen = _selection(tmp_path, method, outside=outside)
    assert chosen.cases == CASES, chosen.reasons
    assert why in chosen.reasons[0]


def test_only_the_cases_of_the_class_are_narrowed_from(tmp_path):
    chosen = _selection(tmp_path, "looked_up", cls="Listed")
    assert chosen.cases == (), chosen.reasons  # m/b/x looked the name up, but never held a Listed


def test_the_words_outside_are_the_lookups_of_every_library_but_the_package_and_of_the_suite(tmp_path):
    """Outside code reaches a name on an object after a dot or in a string: a library's own definitions, bare names
    and keyword arguments do not count, nor do the suite's comments, prose or tools."""
    site, suite = tmp_path / "site", tmp_path / "suite"
    for path, text in {
        site / "torchlike" / "nn.py": (
            "# self.extra_repr() in a library's comment counts\n"
            "def defined_there(own_keyword=1):\n    return bare_name, hasattr(self, 'by_string')\n"
        ),
        site / "toy" / "layer.py": "def only_in_the_package(): pass\n",
        site / "toy-1.0.dist-info" / "hook.py": "x.inside_the_packages_metadata = 1\n",
        suite / "conftest.py": "model.merge_adapter()  # x.only_in_a_comment\n",
        suite / "zoo" / "scenario.py": (
            "getattr(model, 'looked_up_by_string')\nNOTE = 'prose naming some_method in passing'\n"
            "def suite_definition(suite_keyword=1):\n    return suite_name\n"
        ),
        suite / "gate_tools" / "tool.py": "x.never_in_a_case = 1\n",
    }.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    words = spelled_outside("toy", ["torchlike"], sites=[site], suite=suite_files(suite))
    assert {"extra_repr", "by_string", "merge_adapter", "looked_up_by_string"} <= words
    assert not words & {"only_in_the_package", "inside_the_packages_metadata", "only_in_a_comment", "never_in_a_case"}
    definitions = {"defined_there", "own_keyword", "bare_name", "some_method", "suite_definition", "suite_keyword"}
    assert not words & (definitions | {"suite_name"}), words & (definitions | {"suite_name"})
    assert spelled_outside("toy", ["torchlike", "transformerslike"], sites=[site], suite=[]) is None
