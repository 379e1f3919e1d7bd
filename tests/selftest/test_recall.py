"""The recall harness (gate_tools.recall): it finds a site of every shape in a toy package, each plant compiles and
lands where it says, the sample holds what the selection left out, and a verdict that changed outside the selection
is a miss that fails the run."""

from __future__ import annotations

import dataclasses
import json
import random
import textwrap
from pathlib import Path

import pytest

from compile_audit.case_ids import CaseId
from compile_audit.selection.footprints_file import Footprints
from gate_tools.recall import harness
from gate_tools.recall.harness import Outcome, probe_misses, summary
from gate_tools.recall.sampling import sample_cases, stratified
from gate_tools.recall.sites import BREAK, MARK, SHAPES, Plant, Sites, by_shape
from tests.selftest import fake_reports

pytestmark = pytest.mark.selftest

LAYER = textwrap.dedent(
    """
    import dataclasses
    from functools import partial
    from math import floor

    EPS = 3
    TABLE = {"a": 1, "b": 2}


    def helper(x, scale=2):
        y = x * scale
        return floor(y)


    def pre_hook(module, args):
        return args


    @dataclasses.dataclass
    class Config:
        rank: int = 8

        def __post_init__(self):
            self.rank = self.rank + EPS


    class Layer:
        kind = "dense"

        def __init__(self):
            self.handle = register_forward_pre_hook(partial(pre_hook))

        @property
        def size(self):
            return 4

        def forward(self, x):
            def inner(v):
                return v + 1

            if x:
                x = inner(x)
            return helper(x)


    def register_forward_pre_hook(hook):
        return hook


    def unused():
        return 1


    def registered():
        return 2


    def build_step(model):
        model.scale = 0.5
        return model
    """
)
FUNCTIONS = (
    "helper",
    "pre_hook",
    "Config.__post_init__",
    "Layer.__init__",
    "Layer.size",
    "Layer.forward",
    "Layer.forward.<locals>.inner",
    "register_forward_pre_hook",
)
CASES = ("tiny-a/m1/s1", "tiny-a/m2/s1", "tiny-b/m1/s2", "tiny-b/m2/s2", "tiny-a/m3/s3", "tiny-b/m3/s3")


def toy_package(tmp_path: Path) -> Path:
    package = tmp_path / "site" / "toy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(INIT, encoding="utf-8")
    (package / "layer.py").write_text(LAYER, encoding="utf-8")
    return package


INIT = '__version__ = "1.0"\n'


def toy_footprints(**runs: frozenset[str]) -> Footprints:
    """Every function of FUNCTIONS run by every case; ``registered`` by importing the package; ``build_step`` only
    while building; ``unused`` by nothing."""
    every = frozenset(CASES)
    ran = {f"toy/layer.py::{name}": runs.get(name, every) for name in FUNCTIONS}
    return Footprints(
        CASES,
        {**ran, "toy/layer.py::build_step": every},
        build_only={"toy/layer.py::build_step": every},
        at_import=frozenset({"toy/layer.py::registered"}),
    )


def test_every_shape_has_a_site_and_each_plant_compiles_where_it_says(tmp_path):
    package = toy_package(tmp_path)
    found = by_shape(Sites(package, toy_footprints()))
    assert [shape for shape in SHAPES if not found[shape]] == []
    for plants in found.values():
        for plant in plants:
            text = INIT if plant.path.endswith("__init__.py") else LAYER
            edited = plant.apply(text)
            assert edited is not None, plant
            planted = edited.splitlines()[plant.line - 1]
            if plant.span is None:
                assert MARK in planted, (plant, planted)
            else:
                assert planted != text.splitlines()[plant.line - 1], plant


def test_a_function_no_case_ran_is_no_site(tmp_path):
    package = toy_package(tmp_path)
    found = by_shape(Sites(package, toy_footprints(**{"Layer.forward": frozenset()})))
    assert not [plant for plant in found["method"] if plant.where == "Layer.forward"]
    assert [plant for plant in found["nested"] if plant.where == "Layer.forward.<locals>.inner"]


def test_a_plant_that_does_not_compile_is_refused():
    plant = Plant("method", "toy/layer.py", 2, "x", f"{BREAK}  {MARK}", True, indented=False)
    assert plant.apply("def f():\n    return 1\n") is None


def test_stratified_spreads_over_methods_scenarios_and_models():
    drawn = stratified(CASES, 3, random.Random(0))
    assert len({CaseId.parse(case).method for case in drawn}) == 3


def test_the_sample_holds_cases_the_selection_left_out_first_those_that_ran_the_plant():
    selected = frozenset({"tiny-a/m1/s1", "tiny-b/m1/s2"})
    ran = frozenset({"tiny-a/m3/s3"})
    drawn = sample_cases(CASES, selected, ran, 4, random.Random(0))
    assert len(drawn) == 4
    assert len(set(drawn) & selected) == 2
    assert "tiny-a/m3/s3" in drawn


def test_a_changed_verdict_outside_the_selection_is_a_miss():
    plant = Plant("method", "toy/layer.py", 20, "Layer.forward", BREAK, True)
    outcome = Outcome(plant, 1, False, ["tiny-a/m1/s1", "tiny-b/m2/s2"], in_selection={"tiny-a/m1/s1"})
    outcome.base = {"tiny-a/m1/s1": "passed", "tiny-b/m2/s2": "passed"}
    outcome.head = {"tiny-a/m1/s1": "failed", "tiny-b/m2/s2": "failed"}
    assert outcome.changed == ["tiny-a/m1/s1", "tiny-b/m2/s2"]
    assert outcome.misses == ["tiny-b/m2/s2"]
    text = summary([outcome], {"base": 1.0, "head": 2.0})
    assert "selection missed: tiny-b/m2/s2 (passed -> failed; not selected)" in text
    assert "| all | 1 | 2 | 2 | 1 | 1 | 0 | 50% | 100% |" in text


def test_a_case_the_build_comparison_left_out_whose_verdict_changed_is_a_miss(monkeypatch, tmp_path):
    """The whole decision: a case the selection reached only while building, whose builds compare equal, leaves the
    selection as the gate leaves it; if its verdict changed, the build comparison missed it."""
    plant = Plant("build-constant", "toy/layer.py", 20, "build_step", "0.25", False, span=(0, 3))
    outcome = Outcome(plant, 2, False, ["tiny-a/m1/s1", "tiny-b/m2/s2"], in_selection={"tiny-a/m1/s1", "tiny-b/m2/s2"})
    outcome.build_only = ["tiny-a/m1/s1", "tiny-b/m2/s2"]
    same = {"digest": "1", "modules": [], "package_values": {}, "state": {}}
    differs = {**same, "digest": "2", "state": {"check parity #0": "x"}}
    prints = {
        None: {"tiny-a/m1/s1": same, "tiny-b/m2/s2": same},
        "src": {"tiny-a/m1/s1": differs, "tiny-b/m2/s2": same},
    }
    runner = harness.Harness.__new__(harness.Harness)
    runner.out, runner.extra = tmp_path, ()
    monkeypatch.setattr(runner, "_fingerprints", lambda cases, folder, path: prints[path.name if path else None])
    runner.compare_builds([outcome])
    assert outcome.built_same == {"tiny-b/m2/s2"} and outcome.in_selection == {"tiny-a/m1/s1"}
    outcome.base = {"tiny-a/m1/s1": "passed", "tiny-b/m2/s2": "passed"}
    outcome.head = {"tiny-a/m1/s1": "failed", "tiny-b/m2/s2": "failed"}
    assert outcome.misses == ["tiny-b/m2/s2"]
    assert "tiny-b/m2/s2 (passed -> failed; built the same, so left out)" in summary([outcome], {"base": 1, "head": 1})


def _fake_runs(monkeypatch, head_status: dict[str, str], mention: str = "") -> None:
    """Base passes every case; head gives each case its status, and its record names ``mention``."""

    def run_cases(cases, folder, python_path, extra):
        folder.mkdir(parents=True, exist_ok=True)
        records = []
        for case in cases:
            status = "passed" if python_path is None else head_status.get(case, "passed")
            record = fake_reports.case(case, status)
            if python_path is not None and mention:
                record["message"] = mention
            records.append(record)
        report = fake_reports.write(folder / "report.json", fake_reports.report(records))
        return report, ""

    monkeypatch.setattr(harness, "_run_cases", run_cases)


def _main(tmp_path: Path, monkeypatch, *args: str) -> tuple[int, str]:
    package = toy_package(tmp_path)
    footprints = tmp_path / "footprints.json"
    footprints.write_text(
        json.dumps(
            {
                "format": 2,
                "versions": {},
                "cases": list(CASES),
                "functions": {f"toy/layer.py::{name}": f"0-{len(CASES) - 1}" for name in FUNCTIONS},
            }
        ),
        encoding="utf-8",
    )
    monkeypatch.setattr(harness, "_installed_package", lambda name: package)
    out = tmp_path / "out"
    status = harness.main(["--out", str(out), "--footprints", str(footprints), "--seed", "0", *args])
    return status, (out / "summary.md").read_text(encoding="utf-8") if (out / "summary.md").exists() else ""


def test_the_run_fails_on_a_verdict_the_selection_missed(tmp_path, monkeypatch):
    # The plant in helper selects every case that ran it (all), so fail a case no footprint holds: a miss.
    _fake_runs(monkeypatch, {case: "failed" for case in CASES})
    monkeypatch.setattr(harness.Harness, "select", lambda *a: _selection(frozenset({"tiny-a/m1/s1"})))
    status, text = _main(tmp_path, monkeypatch, "--plants", "1", "--sample", "4", "--shapes", "module-helper")
    assert status == 1
    assert "selection missed" in text


def test_the_run_passes_when_every_changed_verdict_was_selected(tmp_path, monkeypatch):
    _fake_runs(monkeypatch, {"tiny-a/m1/s1": "failed"})
    monkeypatch.setattr(harness.Harness, "select", lambda *a: _selection(frozenset({"tiny-a/m1/s1"})))
    status, text = _main(tmp_path, monkeypatch, "--plants", "1", "--sample", "4", "--shapes", "module-helper")
    assert status == 0, text
    assert "| all | 1 |" in text


def test_a_passing_case_whose_report_names_the_plant_is_a_probe_miss(tmp_path, monkeypatch):
    plants = by_shape(Sites(toy_package(tmp_path / "probe"), toy_footprints()))["module-helper"]
    first = next(p for p in plants if p.where == "helper")
    _fake_runs(monkeypatch, {}, mention=f"{first.path}:{first.line}")
    monkeypatch.setattr(harness.Harness, "select", lambda *a: _selection(frozenset(CASES)))
    monkeypatch.setattr(harness, "draw_plants", lambda by_shape, count, rng: [first])
    status, text = _main(tmp_path, monkeypatch, "--plants", "1", "--sample", "2")
    assert status == 1
    assert "probe missed" in text


def test_an_unknown_shape_is_a_clear_error(tmp_path, monkeypatch, capsys):
    status, _ = _main(tmp_path, monkeypatch, "--shapes", "methd")
    assert status == 2
    assert "no such shape ['methd']" in capsys.readouterr().err


def _selection(cases: frozenset[str]):
    from compile_audit.selection.change_selection import Selection

    return Selection(False, tuple(sorted(cases)), ("toy",), ("toy/layer.py",))


def test_a_probe_miss_is_a_passed_case_whose_record_names_the_planted_line_itself():
    plant = Plant("import-rebound", "peft/tuners/shira/layer.py", 25, "resolve", BREAK, True)
    records = {
        "m/shira/a": '{"location": "peft/tuners/shira/layer.py:25"}',
        "m/shira/b": '{"location": "peft/tuners/shira/layer.py:259"}',  # another line, not the plant's
        "m/shira/c": '{"location": "peft/tuners/shira/layer.py:25"}',
    }
    verdicts = {"m/shira/a": "passed", "m/shira/b": "passed", "m/shira/c": "failed"}
    assert probe_misses(plant, verdicts, records) == ["m/shira/a"]
    assert probe_misses(dataclasses.replace(plant, breaks=False), verdicts, records) == []


def test_a_plant_whose_package_does_not_import_is_caught_by_the_gate_s_import_check(tmp_path):
    """A renamed function another module imports by name: PEFT no longer imports, which the gate fails before any
    selection; the harness counts the verdicts it changes as caught, and says why."""
    plant = Plant("renamed", "toy/layer.py", 3, "helper", "helper_planted", False, span=(4, 10))
    outcome = Outcome(plant, 0, False, ["tiny-a/m1/s1"], in_selection=set())
    outcome.base, outcome.head = {"tiny-a/m1/s1": "passed"}, {"tiny-a/m1/s1": "error"}
    assert outcome.misses == ["tiny-a/m1/s1"]
    src = tmp_path / "src" / "toy"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("from .layer import helper\n")
    (src / "layer.py").write_text("def helper_planted():\n    return 1\n")
    outcome.import_error = harness._import_error("toy", tmp_path / "src")
    assert "ImportError" in outcome.import_error and outcome.misses == []
    assert "does not import" in summary([outcome], {"base": 1, "head": 1})
    (src / "__init__.py").write_text("from .layer import helper_planted\n")
    assert harness._import_error("toy", tmp_path / "src") == ""
