"""Footprints and the selection by change: what a case ran is recorded; a change selects the cases that ran it."""

from __future__ import annotations

import gc
import json

import pytest
import torch

from compile_audit import change_selection
from compile_audit.change_selection import Footprints, changed_files, select
from compile_audit.footprint import FootprintRecorder
from compile_audit.recompiles import CountingBackend

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


FOOTPRINTS = Footprints(
    {
        "m/ia3/merge": frozenset({"peft/tuners/ia3/layer.py", "peft/peft_model.py"}),
        "m/ia3/train": frozenset({"peft/tuners/ia3/layer.py", "peft/peft_model.py"}),
        "m/lora/train": frozenset({"peft/tuners/lora/layer.py", "peft/peft_model.py"}),
        "m/lora/merge": frozenset({"peft/tuners/lora/layer.py", "peft/peft_model.py"}),
        "m/lora/save": frozenset({"peft/tuners/lora/layer.py", "peft/peft_model.py", "peft/utils/save.py"}),
    }
)


def test_a_change_maps_to_the_cases_that_ran_it():
    chosen = select(FOOTPRINTS, ["peft/tuners/ia3/layer.py"])
    assert not chosen.everything
    assert chosen.cases == ("m/ia3/merge", "m/ia3/train")
    assert chosen.reasons == ("peft/tuners/ia3/layer.py: run by 2 case(s)",)


def test_an_unknown_file_selects_everything():
    chosen = select(FOOTPRINTS, ["peft/tuners/lora/layer.py", "peft/tuners/new/layer.py"])
    assert chosen.everything and chosen.cases == ()
    assert "peft/tuners/new/layer.py: in no case's footprint" in chosen.reasons[1]


def test_a_file_most_cases_run_selects_everything():
    chosen = select(FOOTPRINTS, ["peft/peft_model.py"])
    assert chosen.everything
    assert "run by 5 of 5 cases" in chosen.reasons[0]


def _package(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_changed_files_compares_two_installed_copies(tmp_path):
    base = _package(tmp_path / "a" / "peft", {"__init__.py": "", "x.py": "1", "gone.py": "", "same.py": "s"})
    head = _package(tmp_path / "b" / "peft", {"__init__.py": "", "x.py": "2", "new.py": "", "same.py": "s"})
    assert changed_files(base, head) == ["peft/gone.py", "peft/new.py", "peft/x.py"]


def test_the_footprints_file_round_trips_and_names_a_bad_entry(tmp_path):
    path = tmp_path / "footprints.json"
    path.write_text(FOOTPRINTS.to_json())
    assert change_selection.load(path).cases == FOOTPRINTS.cases
    data = json.loads(path.read_text())
    data["cases"]["m/ia3/merge"] = [99]
    path.write_text(json.dumps(data))
    with pytest.raises(change_selection.FootprintsError, match=r"case 'm/ia3/merge': expected indexes"):
        change_selection.load(path)


def test_record_merges_reports_into_the_file(tmp_path):
    report = {"versions": {"peft": "0.21.2"}, "cases": [{"id": "m/ia3/merge", "footprint": {"peft/a.py": ["f"]}}]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    out = tmp_path / "footprints.json"
    out.write_text(FOOTPRINTS.to_json())
    assert change_selection.main(["record", str(tmp_path / "r.json"), "--output", str(out)]) == 0
    merged = change_selection.load(out)
    assert (
        merged.cases["m/ia3/merge"] == {"peft/a.py"}
        and merged.cases["m/lora/train"] == FOOTPRINTS.cases["m/lora/train"]
    )
    assert merged.versions == {"peft": "0.21.2"}
