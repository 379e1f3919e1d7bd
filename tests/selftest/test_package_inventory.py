"""What the recorded package held: every function its files define, those its import runs, and a function the
footprints know no case and no import ran, which then selects only the cases whose ranks no footprint holds."""

from __future__ import annotations

import dataclasses

import pytest

from compile_audit.selection import footprints_file, package_inventory
from compile_audit.selection.change_selection import select_between
from compile_audit.selection.footprints_file import Footprints

pytestmark = pytest.mark.selftest

INIT = "from .reg import register\n\nregister('toy')\n"
REG = """def register(name):
    return _check(name)


def _check(name):
    def inner():
        return name
    return inner()


class Layer:
    def forward(self, x):
        return x

    def rarely(self, x):
        return -x
"""
OPS = """from .reg import Layer


def run(x, odd=False):
    return Layer().rarely(x) if odd else Layer().forward(x)
"""


def _package(root, files):
    (root / "toy").mkdir(parents=True)
    for name, text in files.items():
        (root / "toy" / name).write_text(text)
    return root / "toy"


def test_the_inventory_lists_every_function_defined_and_those_importing_runs(tmp_path):
    _package(tmp_path, {"__init__.py": INIT, "reg.py": REG, "ops.py": OPS})
    defined = package_inventory.defined(tmp_path, "toy")
    assert defined == {
        "toy/reg.py::register",
        "toy/reg.py::_check",
        "toy/reg.py::_check.<locals>.inner",
        "toy/reg.py::Layer.forward",
        "toy/reg.py::Layer.rarely",
        "toy/ops.py::run",
    }
    at_import, failed = package_inventory.run_at_import(tmp_path, "toy", defined)
    assert at_import == {"toy/reg.py::register", "toy/reg.py::_check", "toy/reg.py::_check.<locals>.inner"}
    assert failed == []


def _footprints(**package):
    return Footprints(
        ("m/a/x", "m/b/ddp"),
        {
            "toy/ops.py::run": frozenset({"m/a/x", "m/b/ddp"}),
            "toy/reg.py::Layer.forward": frozenset({"m/a/x", "m/b/ddp"}),
        },
        **package,
    )


def _changed(tmp_path, footprints, old, new):
    files = {"__init__.py": INIT, "reg.py": REG, "ops.py": OPS}
    base = _package(tmp_path / "base", files)
    head = _package(tmp_path / "head", {**files, "reg.py": REG.replace(old, new)})
    return select_between(footprints, base, head)


def test_a_method_the_footprints_know_no_case_ran_selects_only_the_cases_whose_ranks_they_miss(tmp_path):
    known = _footprints(
        defined=frozenset(
            {"toy/reg.py::register", "toy/reg.py::_check", "toy/reg.py::Layer.forward", "toy/reg.py::Layer.rarely"}
            | {"toy/ops.py::run", "toy/reg.py::_check.<locals>.inner"}
        ),
        at_import=frozenset({"toy/reg.py::register", "toy/reg.py::_check"}),
        elsewhere=frozenset({"m/b/ddp"}),
    )
    chosen = _changed(tmp_path / "known", known, "return -x", "return x * -1")
    assert chosen.cases == ("m/b/ddp",), chosen.reasons
    assert "run by no recorded case nor at import, though the footprints know it" in chosen.reasons[0]
    # Without the inventory, a function no case ran may be one the footprints never saw: its callers' cases count.
    unknown = _changed(tmp_path / "unknown", _footprints(), "return -x", "return x * -1")
    assert unknown.cases == ("m/a/x", "m/b/ddp"), unknown.reasons


def test_a_function_run_while_the_package_is_imported_selects_every_case(tmp_path):
    footprints = _footprints(
        defined=frozenset({"toy/reg.py::_check", "toy/reg.py::Layer.rarely"}),
        at_import=frozenset({"toy/reg.py::_check"}),
    )
    chosen = _changed(tmp_path, footprints, "return inner()", "return inner() or name")
    assert chosen.everything, chosen.reasons
    assert "runs while the package is imported: every case" in chosen.reasons[0]
    assert chosen.decisions[0].rule == "run-at-import"


def test_the_inventory_round_trips_through_the_footprints_file(tmp_path):
    footprints = _footprints(
        defined=frozenset({"toy/reg.py::_check", "toy/reg.py::Layer.rarely", "toy/ops.py::run"}),
        at_import=frozenset({"toy/reg.py::_check"}),
        elsewhere=frozenset({"m/b/ddp"}),
    )
    path = tmp_path / "footprints.json"
    path.write_text(footprints.to_json())
    loaded = footprints_file.load(path)
    assert (loaded.defined, loaded.at_import, loaded.elsewhere) == (
        footprints.defined,
        footprints.at_import,
        footprints.elsewhere,
    )
    assert loaded.run_by_none("toy/reg.py::Layer.rarely")
    assert not loaded.run_by_none("toy/reg.py::_check") and not loaded.run_by_none("toy/ops.py::run")
    assert not loaded.without({"toy/reg.py::Layer.rarely"}).run_by_none("toy/reg.py::Layer.rarely")
    # A file recorded before the inventory knows no function as run by none.
    path.write_text(dataclasses.replace(footprints, defined=None).to_json())
    assert footprints_file.load(path).defined is None and not footprints_file.load(path).run_by_none("toy/ops.py::x")


PROBED = """def _probe():
    return True


def handler(x):
    return x


FLAG = _probe()
HANDLERS = {"x": handler}


def uses():
    return FLAG
"""


def _probed(tmp_path, old, new, **package):
    base = _package(tmp_path / "base", {"__init__.py": "", "probed.py": PROBED})
    head = _package(tmp_path / "head", {"__init__.py": "", "probed.py": PROBED.replace(old, new)})
    footprints = Footprints(
        ("m/a/x", "m/b/x"), {"toy/probed.py::uses": frozenset({"m/a/x"}), "toy/ops.py::run": frozenset({"m/b/x"})}
    )
    return select_between(dataclasses.replace(footprints, **package), base, head)


def test_a_function_a_module_body_calls_at_import_acts_through_what_that_statement_binds(tmp_path):
    package = {"defined": frozenset({"toy/probed.py::_probe", "toy/probed.py::handler", "toy/probed.py::uses"})}
    chosen = _probed(tmp_path, "return True", "return 1", at_import=frozenset({"toy/probed.py::_probe"}), **package)
    assert chosen.cases == ("m/a/x",), chosen.reasons
    assert "runs while the package is imported, called by 1 module-level statement(s)" in chosen.reasons[0]


def test_a_function_a_module_body_only_names_runs_where_the_footprints_say(tmp_path):
    """``HANDLERS = {"x": handler}`` names ``handler`` at import without calling it: where the footprints list
    what ran at import, a change to it selects what they say (none here); without that list, every case."""
    package = {"defined": frozenset({"toy/probed.py::_probe", "toy/probed.py::handler", "toy/probed.py::uses"})}
    known = _probed(
        tmp_path / "known", "return x", "return -x", at_import=frozenset({"toy/probed.py::_probe"}), **package
    )
    assert known.cases == () and not known.everything, known.reasons
    unknown = _probed(tmp_path / "unknown", "return x", "return -x")
    assert unknown.everything, unknown.reasons


def test_a_cached_function_run_at_import_reaches_the_cases_of_its_later_callers(tmp_path):
    """Importing computed and cached its value: a case that calls it later gets that value, changed or not."""
    cached = "import functools\n\n\n@functools.cache\ndef _probe():\n    return True\n\n\n"
    cached += "def later():\n    return _probe()\n"
    text = cached + PROBED.split("\n\n\n", 1)[1]
    base = _package(tmp_path / "base", {"__init__.py": "", "probed.py": text})
    head = _package(tmp_path / "head", {"__init__.py": "", "probed.py": text.replace("return True", "return 1")})
    footprints = Footprints(
        ("m/a/x", "m/b/x", "m/c/x"),
        {"toy/probed.py::uses": frozenset({"m/a/x"}), "toy/probed.py::later": frozenset({"m/b/x"})},
        defined=frozenset({"toy/probed.py::_probe", "toy/probed.py::later", "toy/probed.py::uses"}),
        at_import=frozenset({"toy/probed.py::_probe"}),
    )
    chosen = select_between(footprints, base, head)
    assert chosen.cases == ("m/a/x", "m/b/x"), chosen.reasons


COMPILED = """import torch


class Layer:
    def forward(self, x):
        if torch.compiler.is_compiling():
            return self.fast(x)
        return x

    def fast(self, x):
        return deeper(x)


def deeper(x):
    return x
"""


@pytest.mark.parametrize(
    "old, new",
    [("return deeper(x)", "return -deeper(x)"), ("def deeper(x):\n    return x", "def deeper(x):\n    return -x")],
)
def test_a_function_only_a_compiled_block_reaches_is_never_known_unrun(tmp_path, old, new):
    """The footprints are recorded eagerly: what a block taken only under torch.compile calls, and what that calls,
    never runs there, so the inventory cannot tell it from code no case reaches: whoever reached the block counts."""
    base = _package(tmp_path / "base", {"__init__.py": "", "layer.py": COMPILED})
    head = _package(tmp_path / "head", {"__init__.py": "", "layer.py": COMPILED.replace(old, new)})
    footprints = Footprints(
        ("m/a/x", "m/b/x"),
        {"toy/layer.py::Layer.forward": frozenset({"m/a/x"}), "toy/ops.py::run": frozenset({"m/b/x"})},
        defined=frozenset({"toy/layer.py::Layer.forward", "toy/layer.py::Layer.fast", "toy/layer.py::deeper"}),
    )
    chosen = select_between(footprints, base, head)
    assert chosen.cases == ("m/a/x",), chosen.reasons
