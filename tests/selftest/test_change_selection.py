"""Footprints and the selection by change: what a case ran is recorded; a change selects the cases that ran it."""

from __future__ import annotations

import gc
import json

import pytest
import torch

from compile_audit.probe.footprint import FootprintRecorder
from compile_audit.probe.recompiles import CountingBackend
from compile_audit.selection import change_selection, footprints_file
from compile_audit.selection.change_selection import select_between
from compile_audit.selection.footprints_file import Footprints

pytestmark = pytest.mark.selftest


def traced_helper(x):
    return x.sin() + 1


def compiled_entry(x):
    return traced_helper(x) * 2


def eager_only(x):
    return x + 1


def test_the_footprint_holds_traced_and_eager_functions_and_no_module_body():
    torch._dynamo.reset()
    with FootprintRecorder(["tests"]) as recorder:
        torch.compile(compiled_entry, backend=CountingBackend("eager"))(torch.randn(3))
        eager_only(torch.randn(3))
    names = recorder.footprint()["tests/selftest/test_change_selection.py"]
    # traced_helper is never run by the interpreter: only Dynamo's traced code can name it.
    assert {"traced_helper", "compiled_entry", "eager_only"} <= set(names)
    assert "<module>" not in names


def test_dynamo_s_own_tracing_is_not_profiled():
    torch._dynamo.reset()
    with FootprintRecorder(["torch"]) as recorder:
        torch.compile(compiled_entry, backend=CountingBackend("eager"))(torch.randn(3))
    assert not [path for path in recorder.footprint() if path.startswith("torch/_dynamo/symbolic_convert")]


def test_a_stopped_recorder_keeps_no_compiled_graph_alive():
    """Dynamo installs each compiled graph as a global of the traced module and removes it when its transformed code
    dies; a recorder kept for the session (pytest's item stash) must not keep that code, nor the graphs, alive."""
    torch._dynamo.reset()
    with FootprintRecorder(["tests"]) as recorder:
        torch.compile(compiled_entry, backend=CountingBackend("eager"))(torch.randn(3))
    torch._dynamo.reset()
    gc.collect()
    assert not [name for name in globals() if name.startswith("__compiled_fn")]
    assert "compiled_entry" in recorder.footprint()["tests/selftest/test_change_selection.py"]


BASE = {
    "__init__.py": "from .layer import Linear\nregister('linear')\n",
    "config.py": (
        "from dataclasses import dataclass, field\n\n\n"
        "@dataclass\nclass Config:\n"
        "    r: int = field(default=8, metadata={'help': 'the rank'})\n"
        "    alpha: int = 16\n\n"
        "    def __post_init__(self):\n        self.scale = self.alpha / self.r\n"
    ),
    "layer.py": (
        "RANKS = (1, 2)\n\n\n"
        "class Linear:\n"
        "    def forward(self, x: int) -> int:\n        'Doc.'\n        return x + 1  # add one\n\n"
        "    def merge(self):\n        return helper()\n\n\n"
        "def helper():\n    return RANKS\n\n\n"
        "def uses_alpha(config):\n    return config.alpha\n"
    ),
}
# Which case ran which function, as tests/footprints.json records them.
TOY_FOOTPRINTS = Footprints(
    ("m/a/train", "m/a/merge", "m/b/train", "m/c/train"),
    {
        "toy/layer.py::Linear.forward": frozenset({"m/a/train", "m/a/merge"}),
        "toy/layer.py::Linear.merge": frozenset({"m/a/merge"}),
        "toy/layer.py::helper": frozenset({"m/a/merge"}),
        "toy/layer.py::uses_alpha": frozenset({"m/b/train"}),
        "toy/config.py::Config.__post_init__": frozenset({"m/a/train", "m/a/merge", "m/b/train"}),
    },
)


def _toy(root, changes: dict[str, str] | None = None):
    package = root / "toy"
    for name, text in {**BASE, **(changes or {})}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def _select(tmp_path, changes):
    return select_between(TOY_FOOTPRINTS, _toy(tmp_path / "base"), _toy(tmp_path / "head", changes))


def test_a_changed_function_selects_exactly_the_cases_that_ran_it(tmp_path):
    chosen = _select(tmp_path, {"layer.py": BASE["layer.py"].replace("return helper()", "return helper() + 1")})
    assert not chosen.everything
    assert chosen.cases == ("m/a/merge",)
    assert chosen.reasons == (
        "toy/layer.py::Linear.merge: changed (base lines 10): 1 of the 1 case(s) that ran it ran that code",
    )


PROPERTY = (
    "\n\nclass Model:\n"
    "    @property\n    def config(self):\n        return self._config\n\n"
    "    @config.setter\n    def config(self, value):\n        self._config = value\n"
)


@pytest.mark.parametrize("changed", ["return self._config", "self._config = value"])
def test_a_propertys_getter_or_setter_changed_selects_the_cases_that_ran_the_property(tmp_path, changed):
    """Getter and setter share one code name (``Model.config``), so the footprints hold them as one function: a
    change to either is a change to it, whichever definition comes last in the class."""
    footprints = Footprints(
        TOY_FOOTPRINTS.cases, {**TOY_FOOTPRINTS.runs, "toy/layer.py::Model.config": frozenset({"m/c/train"})}
    )
    base = _toy(tmp_path / "base", {"layer.py": BASE["layer.py"] + PROPERTY})
    planted = PROPERTY.replace(changed, f"torch._dynamo.graph_break()\n        {changed}")
    head = _toy(tmp_path / "head", {"layer.py": BASE["layer.py"] + planted})
    chosen = select_between(footprints, base, head)
    assert chosen.cases == ("m/c/train",), chosen.reasons
    assert chosen.reasons[0].startswith("toy/layer.py::Model.config: changed")


def test_docstrings_comments_formatting_and_annotations_select_nothing(tmp_path):
    layer = (
        BASE["layer.py"]
        .replace("'Doc.'", "'Documented at length.'")
        .replace("# add one", "# add one, said again")
        .replace("def forward(self, x: int) -> int:", "def forward(self, x: float) -> float:")
        .replace("return x + 1", "return (x +\n                1)")
    )
    config = BASE["config.py"].replace("'the rank'", "'the rank of each adapter'")
    # A string documenting an attribute, in a module or a class body: evaluating it does nothing.
    layer = layer.replace("RANKS = (1, 2)\n", "RANKS = (1, 2)\n'The ranks tried.'\n")
    config = config.replace("    alpha: int = 16\n", "    alpha: int = 16\n    'The numerator of the scale.'\n")
    chosen = _select(tmp_path, {"layer.py": layer, "config.py": config})
    assert chosen.nothing_executes_differently and chosen.cases == () and chosen.reasons == ()


def test_a_changed_dataclass_field_selects_the_cases_that_ran_its_class(tmp_path):
    chosen = _select(tmp_path, {"config.py": BASE["config.py"].replace("alpha: int = 16", "alpha: int = 32")})
    assert not chosen.everything
    assert chosen.cases == ("m/a/merge", "m/a/train", "m/b/train")
    assert "Config or a subclass" in chosen.reasons[0]


def test_a_module_constant_selects_the_cases_that_ran_a_reader(tmp_path):
    chosen = _select(tmp_path, {"layer.py": BASE["layer.py"].replace("RANKS = (1, 2)", "RANKS = (1, 2, 4)")})
    assert chosen.cases == ("m/a/merge",)


def test_a_function_no_case_ran_selects_its_callers_cases(tmp_path):
    layer = (
        BASE["layer.py"].replace("return RANKS", "return RANKS if unrun() else ()") + "\n\ndef unrun():\n    return 1\n"
    )
    base = _toy(tmp_path / "base", {"layer.py": layer})
    head = _toy(tmp_path / "head", {"layer.py": layer.replace("return 1", "return 2")})
    chosen = select_between(TOY_FOOTPRINTS, base, head)
    assert chosen.cases == ("m/a/merge",)
    assert "run by no recorded case" in chosen.reasons[0]


def test_what_cannot_be_mapped_widens_to_every_case(tmp_path):
    unparsable = _select(tmp_path / "a", {"layer.py": BASE["layer.py"] + "\ndef broken(:\n"})
    assert unparsable.everything and "does not parse" in unparsable.reasons[0]
    at_import = _select(tmp_path / "b", {"__init__.py": BASE["__init__.py"] + "configure_everything()\n"})
    assert at_import.everything
    assert "runs at import and binds no name" in at_import.reasons[0]


def test_the_footprints_file_round_trips_and_names_a_bad_entry(tmp_path):
    path = tmp_path / "footprints.json"
    path.write_text(TOY_FOOTPRINTS.to_json())
    loaded = footprints_file.load(path)
    assert loaded.runs == TOY_FOOTPRINTS.runs and loaded.cases == TOY_FOOTPRINTS.cases
    data = json.loads(path.read_text())
    data["functions"]["toy/layer.py::helper"] = "1,7"
    path.write_text(json.dumps(data))
    with pytest.raises(footprints_file.FootprintsError, match=r"function 'toy/layer.py::helper': '7' is outside"):
        footprints_file.load(path)


def test_record_merges_reports_into_the_file_keeping_the_case_order(tmp_path):
    report = {
        "versions": {"peft": "0.21.2"},
        "cases": [
            {"id": "m/a/merge", "footprint": {"toy/a.py": ["f", "f.<locals>.<listcomp>"]}},
            {"id": "m/d/new", "footprint": {"toy/a.py": ["g"]}},
        ],
    }
    (tmp_path / "r.json").write_text(json.dumps(report))
    out = tmp_path / "footprints.json"
    out.write_text(TOY_FOOTPRINTS.to_json())
    assert change_selection.main(["record", str(tmp_path / "r.json"), "--output", str(out)]) == 0
    merged = footprints_file.load(out)
    assert merged.cases == (*TOY_FOOTPRINTS.cases, "m/d/new")
    assert merged.runs["toy/a.py::f"] == {"m/a/merge"}  # a comprehension is the function it is written in
    assert "toy/layer.py::helper" not in merged.runs  # m/a/merge was recorded again: what it no longer runs is gone
    assert merged.runs["toy/layer.py::uses_alpha"] == {"m/b/train"}
    assert merged.versions == {"peft": "0.21.2"}


BRANCHY = (
    "def run(x, kind):\n"
    "    y = x + 1\n"
    "    if kind == 'a':\n"
    "        y = y * 2\n"
    "    else:\n"
    "        y = y * 3\n"
    "    return y\n"
)


def _function(text: str, name: str = "run"):
    from compile_audit.selection.code_changes import parse_module

    return parse_module("toy/branchy.py", text).functions[name]


def _recorded(path: str, text: str, lines: dict[str, list[int]]) -> Footprints:
    """Footprints as `record` makes them from reports: each case ran ``run`` in ``path`` and these of its lines."""
    reports = [
        {
            "versions": {},
            "cases": [
                {"id": case, "footprint": {path: ["run"]}, "footprint_lines": {path: ran}}
                for case, ran in lines.items()
            ],
        }
    ]
    return footprints_file.from_reports(reports, lambda name: text if name == path else None)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("y = y * 2", "y = y * 4"), [2]),  # a statement in one branch: that statement
        (("        y = y * 3\n", "        y = y * 3\n        y = -y\n"), [3]),  # inserted: the statement before it
        (("    return y\n", "    y = abs(y)\n    return y\n"), [1]),  # inserted after the if: the if statement
        (("    y = x + 1\n", "    y = x + 2\n"), [0]),
        (("def run(x, kind):", "def run(x, kind=None):"), None),  # the entry: every case that ran it
        (("    y = x + 1\n", "    print(x)\n    y = x + 1\n"), None),  # a new first statement: the entry too
    ],
)
def test_a_changed_function_names_the_statements_a_case_must_have_run(edit, expected):
    from compile_audit.selection.code_changes import changed_statements

    base = _function(BRANCHY)
    head = _function(BRANCHY.replace(*edit))
    assert changed_statements(base, head) == expected


def test_statements_narrow_a_changed_function_to_the_cases_that_ran_the_change(tmp_path):
    """Two cases ran `run`, only one took the `else` branch: a change there selects that one."""
    footprints = _recorded("toy/branchy.py", BRANCHY, {"m/a/x": [2, 3, 4, 7], "m/b/x": [2, 3, 6, 7]})
    path = tmp_path / "footprints.json"
    path.write_text(footprints.to_json())
    footprints = footprints_file.load(path)  # what the file holds is enough
    base, head = tmp_path / "base" / "toy", tmp_path / "head" / "toy"
    for root, text in ((base, BRANCHY), (head, BRANCHY.replace("y * 3", "y * 5"))):
        root.mkdir(parents=True)
        (root / "__init__.py").write_text("")
        (root / "branchy.py").write_text(text)
    chosen = select_between(footprints, base, head)
    assert chosen.cases == ("m/b/x",)
    assert chosen.reasons == (
        "toy/branchy.py::run: changed (base lines 6): 1 of the 2 case(s) that ran it ran that code",
    )
    # Another version of the function: a statement is known by its code under the same conditions...
    other = BRANCHY.replace("x + 1", "x + 10")
    (base / "branchy.py").write_text(other)
    (head / "branchy.py").write_text(other.replace("y * 3", "y * 5"))
    assert select_between(footprints, base, head).cases == ("m/b/x",)
    # ... and under other conditions it is unknown: every case that ran the function counts.
    other = BRANCHY.replace("kind == 'a'", "kind in ('a', 'A')")
    (base / "branchy.py").write_text(other)
    (head / "branchy.py").write_text(other.replace("y * 3", "y * 5"))
    assert select_between(footprints, base, head).cases == ("m/a/x", "m/b/x")


def test_a_change_inside_a_branch_taken_only_under_compile_counts_for_whoever_reached_the_branch():
    from compile_audit.selection.code_changes import changed_statements

    text = "def run(x):\n    y = x\n    if torch.compiler.is_compiling():\n        y = y + 1\n    return y\n"
    base, head = _function(text), _function(text.replace("y + 1", "y + 2"))
    assert changed_statements(base, head) == [1]  # the `if`, which eager runs, not its block, which it never does


def test_statements_are_named_alike_on_every_python():
    """tests/footprints.json is recorded on one Python and read on others: a statement's name comes from its source,
    not from ast.dump (whose format changes between Python versions). These names were computed on 3.11 and 3.13."""
    assert _function(BRANCHY).statement_ids() == [
        "83a5c8b6db.1",
        "651a6cec55.1",
        "61826302df.1",
        "ed87a66d15.1",
        "b241c9daa3.1",
    ]


def test_a_module_level_name_read_through_its_module_object_selects_that_reader(tmp_path):
    """``from . import variants`` then ``variants.SCALE``: a change to the constant selects who reads it so."""
    files = {
        "variants.py": "SCALE = 1\n",
        "user.py": "from . import variants\n\n\ndef build():\n    return variants.SCALE\n",
    }
    footprints = Footprints(("m/a/x", "m/b/x"), {"toy/user.py::build": frozenset({"m/a/x"})})
    roots = []
    for side, scale in (("base", "1"), ("head", "2")):
        root = tmp_path / side / "toy"
        root.mkdir(parents=True)
        (root / "__init__.py").write_text("")
        for name, text in files.items():
            (root / name).write_text(text.replace("SCALE = 1", f"SCALE = {scale}"))
        roots.append(root)
    chosen = select_between(footprints, *roots)
    assert chosen.cases == ("m/a/x",), chosen.reasons


def test_a_method_added_to_a_class_selects_its_subclasses_not_namesakes_in_other_modules(tmp_path):
    """Two tuners each define ``Layer`` and ``Linear(Layer)``: a method added to one tuner's ``Layer`` reaches its own
    ``Linear`` and a class deriving from it through its module (``a.Linear``), not the other tuner's classes."""
    files = {
        "a.py": "class Layer:\n    def run(self):\n        return 1\n\n\nclass Linear(Layer):\n    def forward(self):\n"
        "        return 1\n",
        "b.py": "class Layer:\n    def run(self):\n        return 2\n\n\nclass Linear(Layer):\n    def forward(self):\n"
        "        return 2\n\n\nclass Quant(Linear):\n    def forward(self):\n        return 3\n",
        "c.py": "from . import a\n\n\nclass Wrapped(a.Linear):\n    def forward(self):\n        return 4\n",
    }
    ran = {"a.py::Linear.forward": "m/a/x", "b.py::Linear.forward": "m/b/y", "b.py::Quant.forward": "m/b/x"}
    footprints = Footprints(
        ("m/a/x", "m/b/x", "m/b/y", "m/c/x"),
        {**{f"toy/{key}": frozenset({case}) for key, case in ran.items()}, "toy/c.py::Wrapped.forward": {"m/c/x"}},
    )
    roots = []
    for side, extra in (("base", ""), ("head", "    def extra(self):\n        return 0\n\n")):
        root = tmp_path / side / "toy"
        root.mkdir(parents=True)
        (root / "__init__.py").write_text("")
        for name, text in files.items():
            (root / name).write_text(
                text.replace("\n\nclass Linear", f"\n{extra}\nclass Linear", 1) if name == "a.py" else text
            )
        roots.append(root)
    chosen = select_between(footprints, *roots)
    assert chosen.cases == ("m/a/x", "m/c/x"), chosen.reasons


def _packages(tmp_path, base: dict[str, str], head: dict[str, str]):
    roots = []
    for side, files in (("base", base), ("head", head)):
        root = tmp_path / side / "toy"
        root.mkdir(parents=True)
        (root / "__init__.py").write_text("")
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        roots.append(root)
    return roots


def test_a_method_added_to_a_class_does_not_reach_a_namesake_through_another_module(tmp_path):
    """``b.Linear`` in a module that imports ``b`` is b's ``Linear``, not a's: a method added to a's ``Linear`` leaves
    the classes deriving from b's alone (as ``nn.Linear`` is not any tuner's ``Linear``)."""
    a = "class Linear:\n    def forward(self):\n        return 1\n"
    files = {
        "a.py": a,
        "b.py": "class Linear:\n    def forward(self):\n        return 2\n",
        "c.py": "from . import b\n\n\nclass Wrapped(b.Linear):\n    def forward(self):\n        return 3\n",
    }
    footprints = Footprints(
        ("m/a/x", "m/c/x"),
        {"toy/a.py::Linear.forward": frozenset({"m/a/x"}), "toy/c.py::Wrapped.forward": frozenset({"m/c/x"})},
    )
    head = {**files, "a.py": a + "\n    def extra(self):\n        return 0\n"}
    chosen = select_between(footprints, *_packages(tmp_path, files, head))
    assert chosen.cases == ("m/a/x",), chosen.reasons


def test_a_function_added_for_a_new_statement_selects_the_cases_that_ran_the_change_not_its_whole_caller(tmp_path):
    """A new helper called from a new statement in one branch: the cases that reach that branch, not every case that
    ran the caller (the caller's other version never names the helper)."""
    footprints = _recorded("toy/branchy.py", BRANCHY, {"m/a/x": [2, 3, 4, 7], "m/b/x": [2, 3, 6, 7]})
    head = BRANCHY.replace("        y = y * 3\n", "        y = y * 3\n        y = extra(y)\n") + (
        "\n\ndef extra(y):\n    return -y\n"
    )
    chosen = select_between(footprints, *_packages(tmp_path, {"branchy.py": BRANCHY}, {"branchy.py": head}))
    assert chosen.cases == ("m/b/x",), chosen.reasons
    assert any("extra: added: the 0 case(s)" in reason for reason in chosen.reasons), chosen.reasons


def test_a_string_naming_a_module_level_name_counts_only_where_that_module_can_be_reached(tmp_path):
    """``type(x).__name__ == "Buffer"`` in a module that never imports ``layer`` cannot read layer's ``Buffer``: a
    change to what ``layer`` binds to that name leaves it alone; ``getattr(layer, "Buffer")`` does not."""
    files = {
        "layer.py": "from .store import Buffer\n\n\ndef build():\n    return Buffer()\n",
        "store.py": "class Buffer:\n    pass\n\n\nclass Other:\n    pass\n",
        "status.py": "def describe(x):\n    return type(x).__name__ == 'Buffer'\n",
        "lookup.py": "from . import layer\n\n\ndef find():\n    return getattr(layer, 'Buffer')\n",
    }
    footprints = Footprints(
        ("m/a/x", "m/b/x", "m/c/x"),
        {
            "toy/layer.py::build": frozenset({"m/a/x"}),
            "toy/status.py::describe": frozenset({"m/b/x"}),
            "toy/lookup.py::find": frozenset({"m/c/x"}),
        },
    )
    head = {**files, "layer.py": files["layer.py"].replace("import Buffer", "import Other as Buffer")}
    chosen = select_between(footprints, *_packages(tmp_path, files, head))
    assert chosen.cases == ("m/a/x", "m/c/x"), chosen.reasons


NESTED = (
    "def run(x, kind):\n    y = x + 1\n    if kind == 'a':\n        if x > 0:\n            y = y + 3\n    return y\n"
)


def test_a_statement_the_file_never_saw_counts_as_the_nearest_listed_statement_around_it(tmp_path):
    """Another version of ``run`` wraps the changed statement in a new ``if``: the file never saw it, but it runs only
    where ``if x > 0`` ran (listed: case a alone), not wherever ``run`` ran."""
    footprints = _recorded("toy/nested.py", NESTED, {"m/a/x": [2, 3, 4, 5, 6], "m/b/x": [2, 3, 6]})
    other = NESTED.replace("            y = y + 3\n", "            if x > 5:\n                y = y + 3\n")
    base, head = _packages(tmp_path, {"nested.py": other}, {"nested.py": other.replace("y + 3", "y + 4")})
    chosen = select_between(footprints, base, head)
    assert chosen.cases == ("m/a/x",), chosen.reasons


def test_a_constant_a_class_body_copies_selects_who_reads_that_class_attribute_on_that_class(tmp_path):
    """``mapping = MAPPING`` in ``Model``'s body, read as ``self.mapping`` by a base class in another module: a change
    to the constant selects the cases that ran that read on a ``Model``, not those that ran it on another class."""
    files = {
        "constants.py": "MAPPING = {'llama': ['q']}\n",
        "base.py": "class Base:\n    def prepare(self):\n        return self.mapping\n",
        "model.py": (
            "from .base import Base\nfrom .constants import MAPPING\n\n\n"
            "class Model(Base):\n    mapping = MAPPING\n\n    def forward(self):\n        return 1\n"
        ),
        "other.py": "from .base import Base\n\n\nclass Other(Base):\n    mapping = {}\n\n    def forward(self):\n"
        "        return 2\n",
    }
    footprints = Footprints(
        ("m/a/x", "m/b/x"),
        {
            "toy/base.py::Base.prepare": frozenset({"m/a/x", "m/b/x"}),
            "toy/model.py::Model.forward": frozenset({"m/a/x"}),
            "toy/other.py::Other.forward": frozenset({"m/b/x"}),
        },
    )
    head = {**files, "constants.py": "MAPPING = {'llama': ['q'], 'qwen3': ['q']}\n"}
    chosen = select_between(footprints, *_packages(tmp_path, files, head))
    assert chosen.cases == ("m/a/x",), chosen.reasons


def test_a_module_level_getattr_added_selects_every_case(tmp_path):
    """Python calls a module's ``__getattr__`` for any attribute it lacks: what used to raise (``hasattr``) answers."""
    files = {"layer.py": "def build():\n    return 1\n"}
    footprints = Footprints(("m/a/x",), {"toy/layer.py::build": frozenset({"m/a/x"})})
    head = {"layer.py": files["layer.py"] + "\n\ndef __getattr__(name):\n    return name\n"}
    chosen = select_between(footprints, *_packages(tmp_path, files, head))
    assert chosen.everything and "missing attribute" in chosen.reasons[0], chosen.reasons


def test_a_module_level_getattr_in_a_new_module_selects_what_reaches_that_module():
    """A new module's ``__getattr__`` answers only code that names the new module, which is new itself."""
    from compile_audit.selection.change_selection import Source, compare_sources, select

    footprints = Footprints(("m/a/x",), {"toy/layer.py::build": frozenset({"m/a/x"})})
    layer = Source("1", lambda: "def build():\n    return 1\n")
    lazy = Source("2", lambda: "def __getattr__(name):\n    return name\n")
    changes, unparsable, readers = compare_sources(
        {"toy/layer.py": layer}, {"toy/layer.py": layer, "toy/lazy.py": lazy}
    )
    chosen = select(footprints, changes, readers, unparsable)
    assert not chosen.everything and chosen.cases == (), chosen.reasons


def test_a_changed_function_is_judged_by_the_side_whose_statements_the_file_lists(tmp_path):
    """The footprints were recorded on head's version: base's edited statement is unknown to them, head's is listed
    (case b alone ran it), so head's side decides."""
    footprints = _recorded("toy/branchy.py", BRANCHY, {"m/a/x": [2, 3, 4, 7], "m/b/x": [2, 3, 6, 7]})
    base = BRANCHY.replace("y * 3", "y * 7")
    chosen = select_between(footprints, *_packages(tmp_path, {"branchy.py": base}, {"branchy.py": BRANCHY}))
    assert chosen.cases == ("m/b/x",), chosen.reasons
    assert "head lines 6" in chosen.reasons[0], chosen.reasons


REGISTRY = """TABLE = {}


def register(name, cls):
    TABLE[name] = cls


def lookup(name):
    return TABLE[name]


def names():
    return sorted(TABLE)
"""
METHOD_MODEL = "class Model:\n    def forward(self):\n        return 1\n"


def _tree(tmp_path, side: str, files: dict[str, str]):
    root = tmp_path / side / "toy"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _method_package(name: str) -> dict[str, str]:
    return {
        f"{name}/__init__.py": (
            f"from ..registry import register\nfrom .model import Model\n\nregister({name!r}, Model)\n"
        ),
        f"{name}/model.py": METHOD_MODEL,
    }


def test_an_added_method_selects_its_new_cases_and_the_code_iterating_its_tables_not_the_others(tmp_path):
    """A new subpackage's registration adds a key to the registry's table: the method's own cases are new (the zoo
    names them), code that iterates the table sees the key, and code that looks up another method's key does not."""
    files = {"registry.py": REGISTRY, **_method_package("lora")}
    footprints = Footprints(
        ("m/lora/x", "m/list/x"),
        {
            "toy/registry.py::lookup": frozenset({"m/lora/x"}),
            "toy/lora/model.py::Model.forward": frozenset({"m/lora/x"}),
            "toy/registry.py::names": frozenset({"m/list/x"}),
        },
    )
    base, head = _tree(tmp_path, "base", files), _tree(tmp_path, "head", {**files, **_method_package("newm")})
    chosen = select_between(footprints, base, head)
    assert not chosen.everything and chosen.cases == ("m/list/x",), chosen.reasons
    assert chosen.new_cases and chosen.new_methods == 1
    assert any("new subpackage and adds keys to TABLE" in reason for reason in chosen.reasons), chosen.reasons
    assert "new-method-registration" in {d.rule for d in chosen.decisions}


PREFIXES = """

def prefixes(kind):
    if kind in TABLE:
        return {TABLE[kind]}
    return set(TABLE.values())
"""


@pytest.mark.parametrize("ran_the_iteration", [False, True])
def test_an_added_method_selects_a_case_only_where_it_ran_the_statement_going_over_the_table(
    tmp_path, ran_the_iteration
):
    """A function that looks its own key up and goes over the table only for a key it lacks (PEFT's
    build_peft_weight_mapping): a case that ran only the lookup reads what it read before."""
    from compile_audit.selection.code_changes import parse_module

    files = {"registry.py": REGISTRY + PREFIXES, **_method_package("lora")}
    function = parse_module("toy/registry.py", files["registry.py"]).functions["prefixes"]
    *_, going_over = function.statement_ids()
    footprints = Footprints(
        ("m/lora/x", "m/lora/y"),
        {"toy/registry.py::prefixes": frozenset({"m/lora/x", "m/lora/y"})},
        statements={"toy/registry.py::prefixes": {going_over: frozenset({"m/lora/y"} if ran_the_iteration else ())}},
    )
    base, head = _tree(tmp_path, "base", files), _tree(tmp_path, "head", {**files, **_method_package("newm")})
    chosen = select_between(footprints, base, head)
    assert chosen.cases == (("m/lora/y",) if ran_the_iteration else ()), chosen.reasons
    assert chosen.new_cases


def test_an_added_mapping_entry_selects_the_code_iterating_that_mapping(tmp_path):
    constants = "MAPPING = {'llama': ['q']}\n"
    readers = (
        "from .constants import MAPPING\n\n\ndef targets(model_type):\n    return MAPPING.get(model_type)\n\n\n"
        "def known():\n    return [k for k in MAPPING]\n"
    )
    files = {"constants.py": constants, "readers.py": readers}
    footprints = Footprints(
        ("m/a/x", "m/b/x"),
        {"toy/readers.py::targets": frozenset({"m/a/x"}), "toy/readers.py::known": frozenset({"m/b/x"})},
    )
    added = {**files, "constants.py": constants + "MAPPING['vit'] = ['query']\n"}
    chosen = select_between(footprints, _tree(tmp_path, "base", files), _tree(tmp_path, "head", added))
    assert chosen.cases == ("m/b/x",), chosen.reasons
    # Edited, the key's lookups may read another value: every reader.
    edited = {**files, "constants.py": constants + "MAPPING['llama'] = ['k']\n"}
    base_edited = {**files, "constants.py": constants + "MAPPING['llama'] = ['v']\n"}
    chosen = select_between(footprints, _tree(tmp_path, "b2", base_edited), _tree(tmp_path, "h2", edited))
    assert chosen.cases == ("m/a/x", "m/b/x"), chosen.reasons


def test_a_version_string_selects_only_the_code_that_compares_it(tmp_path):
    version = '__version__ = "0.18.0"\n'
    readers = (
        "from packaging import version\n\nfrom . import __version__\n\n\ndef record(config):\n"
        "    config['peft_version'] = __version__\n\n\ndef legacy():\n"
        "    return version.parse(__version__) < version.parse('0.10')\n"
    )
    footprints = Footprints(
        ("m/a/x", "m/b/x"),
        {"toy/readers.py::record": frozenset({"m/a/x"}), "toy/readers.py::legacy": frozenset({"m/b/x"})},
    )
    files = {"__init__.py": version, "readers.py": readers}
    bumped = {**files, "__init__.py": '__version__ = "0.18.1"\n'}
    chosen = select_between(footprints, _tree(tmp_path, "base", files), _tree(tmp_path, "head", bumped))
    assert chosen.cases == ("m/b/x",), chosen.reasons
    # peft#3484: compared only with what the same side wrote (the model card it saves), the version reads the same on
    # each side; the threshold is what selects.
    card = (
        "\n\ndef card(lines):\n    if f'- PEFT {__version__}' not in lines:\n"
        "        lines.append(f'- PEFT {__version__}')\n    return lines\n"
    )
    footprints = Footprints(
        ("m/a/x", "m/b/x", "m/c/x"),
        {
            "toy/readers.py::record": frozenset({"m/a/x"}),
            "toy/readers.py::legacy": frozenset({"m/b/x"}),
            "toy/readers.py::card": frozenset({"m/c/x"}),
        },
    )
    with_card = {**files, "readers.py": readers + card}
    bumped = {**with_card, "__init__.py": '__version__ = "0.18.1.dev0"\n'}
    chosen = select_between(footprints, _tree(tmp_path, "b1", with_card), _tree(tmp_path, "h1", bumped))
    assert chosen.cases == ("m/b/x",), chosen.reasons
    no_threshold = {**with_card, "readers.py": readers.replace(" < version.parse('0.10')", "") + card}
    chosen = select_between(
        footprints,
        _tree(tmp_path, "b3", no_threshold),
        _tree(tmp_path, "h3", {**no_threshold, "__init__.py": '__version__ = "0.18.1.dev0"\n'}),
    )
    assert chosen.cases == (), chosen.reasons
    # Not a version: a string any reader may use as data (a prefix of parameter names) selects every reader.
    files = {"__init__.py": 'prefix = "lora_"\n', "readers.py": readers.replace("__version__", "prefix")}
    renamed = {**files, "__init__.py": 'prefix = "lora2_"\n'}
    chosen = select_between(footprints, _tree(tmp_path, "b2", files), _tree(tmp_path, "h2", renamed))
    assert chosen.cases == ("m/a/x", "m/b/x"), chosen.reasons


def test_a_key_looked_up_with_in_is_no_iteration_of_the_table(tmp_path):
    """``name in list(TABLE)`` answers differently only for the added key, which only new code asks for."""
    constants = "MAPPING = {'llama': ['q']}\n"
    readers = (
        "from .constants import MAPPING\n\n\ndef known(name):\n    return name in list(MAPPING)\n\n\n"
        "def every():\n    return list(MAPPING)\n"
    )
    files = {"constants.py": constants, "readers.py": readers}
    footprints = Footprints(
        ("m/a/x", "m/b/x"),
        {"toy/readers.py::known": frozenset({"m/a/x"}), "toy/readers.py::every": frozenset({"m/b/x"})},
    )
    added = {**files, "constants.py": constants + "MAPPING['vit'] = ['query']\n"}
    chosen = select_between(footprints, _tree(tmp_path, "base", files), _tree(tmp_path, "head", added))
    assert chosen.cases == ("m/b/x",), chosen.reasons


def test_a_new_subpackage_s_recorded_cases_are_its_new_cases_not_a_selection(tmp_path):
    """A footprints file recorded after a method came (the replay of history) holds the method's cases: a change
    that adds the method runs them as new cases, and selects only the others."""
    files = {"registry.py": REGISTRY, **_method_package("lora")}
    footprints = Footprints(
        ("m/lora/x", "m/list/x", "m/newm/x"),
        {
            "toy/lora/model.py::Model.forward": frozenset({"m/lora/x"}),
            "toy/registry.py::names": frozenset({"m/list/x", "m/newm/x"}),
            "toy/newm/model.py::Model.forward": frozenset({"m/newm/x"}),
        },
    )
    base, head = _tree(tmp_path, "base", files), _tree(tmp_path, "head", {**files, **_method_package("newm")})
    chosen = select_between(footprints, base, head)
    assert chosen.cases == ("m/list/x",), chosen.reasons
    assert chosen.new_methods == 1
    assert any("ran toy/newm/, which base lacks" in reason for reason in chosen.reasons), chosen.reasons


def test_a_removed_method_selects_its_cases_and_the_code_iterating_its_tables_not_the_others(tmp_path):
    files = {"registry.py": REGISTRY, **_method_package("lora"), **_method_package("oldm")}
    footprints = Footprints(
        ("m/lora/x", "m/list/x", "m/oldm/x"),
        {
            "toy/registry.py::lookup": frozenset({"m/lora/x"}),
            "toy/lora/model.py::Model.forward": frozenset({"m/lora/x"}),
            "toy/oldm/model.py::Model.forward": frozenset({"m/oldm/x"}),
            "toy/registry.py::names": frozenset({"m/list/x"}),
        },
    )
    head = {name: text for name, text in files.items() if not name.startswith("oldm/")}
    chosen = select_between(footprints, _tree(tmp_path, "base", files), _tree(tmp_path, "head", head))
    assert not chosen.everything and chosen.cases == ("m/list/x", "m/oldm/x"), chosen.reasons
    assert "removed-subpackage" in {d.rule for d in chosen.decisions}


TABLE_READERS = (
    "from .constants import MAPPING\n\n\ndef targets(model_type):\n    return MAPPING.get(model_type)\n\n\n"
    "def known():\n    return [k for k in MAPPING]\n\n\ndef handed_on():\n    return MAPPING\n"
)
TABLE_FOOTPRINTS = Footprints(
    ("m/a/x", "m/b/x", "m/c/x"),
    {
        "toy/readers.py::targets": frozenset({"m/a/x"}),
        "toy/readers.py::known": frozenset({"m/b/x"}),
        "toy/readers.py::handed_on": frozenset({"m/c/x"}),
    },
)


def test_a_table_literal_gaining_an_entry_selects_the_code_going_over_it_or_handing_it_on(tmp_path):
    """``MAPPING = {...}`` rewritten with one entry more and none changed: a lookup of another key reads what it
    read; code iterating the table, or returning it (to be iterated elsewhere), may see the entry."""
    files = {"constants.py": "MAPPING = {'llama': ['q']}\n", "readers.py": TABLE_READERS}
    grown = {**files, "constants.py": "MAPPING = {'llama': ['q'], 'vit': ['query']}\n"}
    chosen = select_between(TABLE_FOOTPRINTS, _tree(tmp_path, "base", files), _tree(tmp_path, "head", grown))
    assert chosen.cases == ("m/b/x", "m/c/x"), chosen.reasons
    assert "gains 1 entry, none changed" in chosen.reasons[0]
    # An entry changed as well: every reader.
    changed = {**files, "constants.py": "MAPPING = {'llama': ['k'], 'vit': ['query']}\n"}
    chosen = select_between(TABLE_FOOTPRINTS, _tree(tmp_path, "b2", files), _tree(tmp_path, "h2", changed))
    assert chosen.cases == ("m/a/x", "m/b/x", "m/c/x"), chosen.reasons


def test_a_name_added_for_a_table_s_new_entry_is_followed_by_the_table_s_own_change(tmp_path):
    """A method's class imported and put in the table: the import is followed only to unchanged code that computes
    from it; the table's rewrite, which now reads it, is judged as itself (an entry gained)."""
    files = {
        "models.py": "class Old:\n    pass\n\n\nclass New:\n    pass\n",
        "constants.py": "from .models import Old\n\nMAPPING = {'old': Old}\n",
        "readers.py": TABLE_READERS,
    }
    head = {
        **files,
        "constants.py": "from .models import New, Old\n\nMAPPING = {'old': Old, 'new': New}\n",
    }
    chosen = select_between(TABLE_FOOTPRINTS, _tree(tmp_path, "base", files), _tree(tmp_path, "head", head))
    assert chosen.cases == ("m/b/x", "m/c/x"), chosen.reasons


def test_a_method_put_in_a_table_literal_is_a_new_method(tmp_path):
    """Before a registration function, a method was a subpackage and an entry in each table literal: its cases are
    new, once, and the tables' lookups of other keys select nothing."""
    files = {
        "lora/__init__.py": "",
        "lora/model.py": METHOD_MODEL.replace("class Model", "class LoraModel"),
        "constants.py": "from .lora.model import LoraModel\n\nMAPPING = {'lora': LoraModel}\nNAMES = {'lora': 'l'}\n",
        "readers.py": TABLE_READERS,
    }
    head = {
        **files,
        "newm/__init__.py": "",
        "newm/model.py": METHOD_MODEL.replace("class Model", "class NewModel"),
        "constants.py": (
            "from .lora.model import LoraModel\nfrom .newm.model import NewModel\n\n"
            "MAPPING = {'lora': LoraModel, 'newm': NewModel}\nNAMES = {'lora': 'l', 'newm': 'n'}\n"
        ),
    }
    chosen = select_between(TABLE_FOOTPRINTS, _tree(tmp_path, "base", files), _tree(tmp_path, "head", head))
    assert (chosen.cases, chosen.new_methods, chosen.new_cases) == (("m/b/x", "m/c/x"), 1, True), chosen.reasons
    assert {"new-method-table-entry", "table-gains-entries"} <= {d.rule for d in chosen.decisions}


def test_a_function_the_change_adds_was_run_by_no_case_even_where_a_later_footprints_file_lists_it(tmp_path):
    """A footprints file recorded after a change (the replay of history) lists the functions the change adds; on base
    they did not exist, so no case ran them: what reads them (here the new import) selects nothing through them."""
    base = {"ops.py": "def run(x):\n    return x\n"}
    helper = "\n\n\ndef helper(x):\n    return math.fabs(x)\n"
    head = {"ops.py": "import math\n\n\ndef run(x):\n    return helper(x)\n" + helper}
    footprints = Footprints(
        ("m/a/x", "m/b/x"),
        {"toy/ops.py::run": frozenset({"m/a/x"}), "toy/ops.py::helper": frozenset({"m/a/x", "m/b/x"})},
    )
    chosen = select_between(footprints, *_packages(tmp_path, base, head))
    assert chosen.cases == ("m/a/x",), chosen.reasons
    assert any("`import math`: the 0 case(s)" in reason for reason in chosen.reasons), chosen.reasons


@pytest.mark.parametrize(
    "init, selected", [("from .constants import SHORT\n", ()), ("from .conv import *\n", ("m/a/x",))]
)
def test_a_name_a_module_imports_reaches_readers_through_a_package_above_only_if_the_package_reexports_it(
    tmp_path, init, selected
):
    """``from toy.utils import SHORT`` reads what ``toy/utils/__init__.py`` binds: a module of that package that now
    imports ``SHORT`` too changes it only where the package takes its names from that module (or all of them)."""
    files = {
        "utils/__init__.py": init,
        "utils/constants.py": "SHORT = 'all'\n",
        "utils/conv.py": "def convert(x):\n    return x\n",
        "tuners.py": "from toy.utils import SHORT\n\n\ndef pick():\n    return SHORT\n",
    }
    head = {**files, "utils/conv.py": "from toy.utils.constants import SHORT\n\n\ndef convert(x):\n    return x\n"}
    footprints = Footprints(("m/a/x",), {"toy/tuners.py::pick": frozenset({"m/a/x"})})
    chosen = select_between(footprints, *_packages(tmp_path, files, head))
    assert chosen.cases == selected, chosen.reasons


def test_changed_code_no_case_runs_is_named_as_not_judged(tmp_path):
    layer = BASE["layer.py"] + "\n\nclass Conv:\n    def forward(self, x):\n        return x\n"
    base = _toy(tmp_path / "base", {"layer.py": layer})
    head = _toy(tmp_path / "head", {"layer.py": layer.replace("return x\n", "return x * 2\n")})
    chosen = select_between(TOY_FOOTPRINTS, base, head)
    assert chosen.cases == ()
    assert [reason.split(": ")[0] for reason in chosen.unjudged] == ["toy/layer.py::Conv.forward"], chosen.reasons
    judged = _select(tmp_path / "judged", {"layer.py": BASE["layer.py"].replace("return helper()", "return 1")})
    assert judged.cases and judged.unjudged == ()
