"""The coverage check on toy data: each check (an unlisted forward, a stale gap run by a case, a stale gap that names no
forward, the GPU-only patterns, build-only runs, the version match, the gaps file's errors, which classes' forwards
count) shown to fail on a toy built to break it."""

from __future__ import annotations

import json
import textwrap

import pytest

from bench_models.layer_forwards import LayerBase, forwards_in
from compile_audit.selection import coverage
from compile_audit.selection.footprints_file import Footprints
from tests.tools.coverage import version_mismatch

pytestmark = pytest.mark.selftest

RAN = "toy/layer.py::Linear.forward"
NOT_RUN = "toy/layer.py::Conv2d.forward"
GPU = "toy/gptq.py::QuantLinear.forward"
BUILT = "toy/layer.py::Embedding.forward"
FORWARDS = (RAN, NOT_RUN, GPU, BUILT)
CASES = ("tiny/lora/train-eval-train", "tiny/lora/depth")


def toy_footprints(versions: dict[str, str] | None = None) -> Footprints:
    return Footprints(
        cases=CASES,
        runs={RAN: frozenset(CASES), BUILT: frozenset({CASES[0]})},
        versions=versions or {"peft": "0.0.1"},
        build_only={BUILT: frozenset({CASES[0]})},  # ran only while building its model: compiled by no case
    )


def toy_gaps(**reasons: str) -> coverage.Gaps:
    return coverage.Gaps(gpu_only={"toy/gptq.py::*": "GPU-only backend: toy"}, reasons=reasons)


def check(gaps: coverage.Gaps, forwards=FORWARDS) -> list[str]:
    return coverage.problems(coverage.rows(forwards, toy_footprints(), gaps), gaps)


COMPLETE = {NOT_RUN: "no case yet: no conv model", BUILT: "no case yet: built only"}


def test_every_forward_run_or_listed_passes():
    assert check(toy_gaps(**COMPLETE)) == []


def test_an_unlisted_forward_no_case_runs_fails_naming_it():
    found = check(toy_gaps(**{BUILT: "built only"}))
    assert len(found) == 1 and found[0].startswith(f"not covered: {NOT_RUN}: no case runs it")


def test_a_forward_run_only_while_building_is_not_covered():
    found = check(toy_gaps(**{NOT_RUN: "no conv model"}))
    assert [line.split(": ")[1] for line in found] == [BUILT]


def test_a_gap_a_case_now_runs_is_stale():
    found = check(toy_gaps(**COMPLETE, **{RAN: "no case yet"}))
    assert found == [f"stale gap: {RAN}: now run by 2 case(s), e.g. {sorted(CASES)[0]}: remove its entry"]


def test_a_gap_that_names_no_forward_is_stale():
    found = check(toy_gaps(**COMPLETE, **{"toy/layer.py::Gone.forward": "no case yet"}))
    assert found == [
        "stale gap: toy/layer.py::Gone.forward: no such layer forward in the installed package: remove its entry"
    ]


def test_a_gpu_only_forward_is_listed_with_its_reason_and_out_of_the_figure():
    rows = coverage.rows(FORWARDS, toy_footprints(), toy_gaps(**COMPLETE))
    (gpu,) = [row for row in rows if row.key == GPU]
    assert gpu.gpu_only and gpu.reason == "GPU-only backend: toy"
    assert (coverage.figure(rows).covered, coverage.figure(rows).runnable) == (1, 3)
    found = check(coverage.Gaps(gpu_only={}, reasons=COMPLETE))
    assert len(found) == 1 and found[0].startswith(f"not covered: {GPU}: ")


def test_the_tables_say_which_case_runs_each_forward_and_why_none_runs_the_others():
    table = coverage.markdown(coverage.rows(FORWARDS, toy_footprints(), toy_gaps(**COMPLETE)))
    assert f"| `{RAN}` | 2 | `{sorted(CASES)[0]}` |" in table
    assert f"| `{NOT_RUN}` | no case yet: no conv model |" in table
    assert f"| `{GPU}` | GPU-only backend: toy |" in table


def test_footprints_of_another_peft_version_are_named():
    import peft

    assert version_mismatch(toy_footprints({"peft": peft.__version__})) is None
    assert "recorded with peft 0.0.1" in version_mismatch(toy_footprints())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[gap]\n"a.py::f" = "x"\n', "unknown table(s) gap"),
        ('[gaps]\n"a.py" = "x"\n', "expected 'FILE::QUALNAME'"),
        ('[gaps]\n"a.py::f" = ""\n', "the reason must be a non-empty string"),
        ("[gaps\n", "unreadable gaps file"),
    ],
)
def test_a_malformed_gaps_file_is_named(tmp_path, text, expected):
    path = tmp_path / "gaps.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(coverage.GapsError, match=r"gaps\.toml") as raised:
        coverage.load_gaps(path)
    assert expected in str(raised.value)


TOY_LAYERS = """
class Base:
    def forward(self, x): ...

class Interface:
    @staticmethod
    def forward(module, x): ...

class Linear(Base):
    def forward(self, x): ...
    def _mixed_batch_forward(self, x): ...

class Inherits(Linear):
    pass

class Variant(Interface):
    @staticmethod
    def forward(module, x): ...

class Helper:
    def forward(self, x): ...
"""


def test_the_forwards_a_layer_class_defines_itself_count_and_no_others(tmp_path, monkeypatch):
    (tmp_path / "coverage_toy_layers.py").write_text(textwrap.dedent(TOY_LAYERS), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import coverage_toy_layers

    bases = (
        LayerBase("coverage_toy_layers.Base", "layers"),
        LayerBase("coverage_toy_layers.Interface", "variants", counts_itself=False),
        LayerBase("coverage_toy_layers.Missing", "a base this version lacks"),
    )
    assert forwards_in([coverage_toy_layers], bases, tmp_path) == tuple(
        f"coverage_toy_layers.py::{name}"
        for name in ("Base.forward", "Linear._mixed_batch_forward", "Linear.forward", "Variant.forward")
    )


def test_the_replayed_commits_that_change_a_forward_no_case_compiles_are_named(tmp_path):
    import dataclasses
    import json

    from tests.tools.coverage import commits_changing_uncompiled_forwards, every_forward

    peft_forwards = {key.replace("toy/", "peft/tuners/toy/") for key in FORWARDS}
    footprints = dataclasses.replace(
        toy_footprints(),
        runs={k.replace("toy/", "peft/tuners/toy/"): v for k, v in toy_footprints().runs.items()},
        build_only={k.replace("toy/", "peft/tuners/toy/"): v for k, v in toy_footprints().build_only.items()},
        defined=frozenset(peft_forwards),
    )
    gaps = coverage.Gaps(gpu_only={"peft/tuners/toy/gptq.py::*": "GPU-only backend: toy"}, reasons={})
    replay = tmp_path / "replay.json"
    reasons = {
        "a1": ["peft/tuners/toy/layer.py::Linear.forward: changed: run by 2 case(s)"],
        "b2": ["peft/tuners/toy/layer.py::Conv2d.forward: changed: run by 0 case(s)"],
        "c3": ["peft/tuners/toy/gptq.py::QuantLinear.forward: changed: run by 0 case(s)"],
        "d4": ["peft/tuners/toy/layer.py::Embedding.forward: changed at its entry: run by 1 case(s)"],
    }
    commits = [{"commit": sha, "subject": f"commit {sha}", "reasons": why} for sha, why in reasons.items()]
    replay.write_text(json.dumps({"commits": commits}))
    found = commits_changing_uncompiled_forwards(replay, footprints, gaps)
    # Linear runs after a compile; the GPU-only forward is out; Conv2d runs in no case, Embedding only while building.
    assert [(commit, keys) for commit, _, keys in found] == [
        ("b2", ["peft/tuners/toy/layer.py::Conv2d.forward"]),
        ("d4", ["peft/tuners/toy/layer.py::Embedding.forward"]),
    ]
    assert every_forward(footprints, gaps) == (1, 3)


STUBS_SOURCE = textwrap.dedent(
    '''
    class Variant:
        def forward(module, x):
            """The variant's forward."""
            raise NotImplementedError

        def merge(module):
            raise NotImplementedError("subclasses merge")

        def unmerge(module):
            ...

        def helper(module):
            """A docstring, then real work."""
            return module.weight

    class Path:
        def forward(self):
            if self.training:
                raise NotImplementedError
    '''
)


def test_only_bodies_that_do_nothing_but_raise_not_implemented_are_stubs():
    names = ("Variant.forward", "Variant.merge", "Variant.unmerge", "Variant.helper", "Path.forward", "missing")
    assert coverage.stubs(STUBS_SOURCE, names) == {"Variant.forward", "Variant.merge", "Variant.unmerge"}


def test_a_commit_changing_only_a_stub_forward_is_not_counted(tmp_path):
    from tests.tools.coverage import commits_changing_uncompiled_forwards

    stub, real = "peft/tuners/lora/layer.py::LoraVariant.forward", "peft/tuners/oft/layer.py::Dropout.forward"
    replay = tmp_path / "replay.json"
    reasons = [f"{stub}: changed: run by 0 case(s)", f"{real}: changed: run by 0 case(s)"]
    commits = [{"commit": "a" * 40, "subject": "one", "reasons": reasons}]
    commits.append({"commit": "b" * 40, "subject": "two", "reasons": reasons[:1]})
    replay.write_text(json.dumps({"commits": commits}))
    footprints = Footprints(cases=CASES, runs={}, versions={"peft": "0.0.1"}, defined=frozenset({stub, real}))
    gaps = coverage.Gaps({}, {})
    found = commits_changing_uncompiled_forwards(replay, footprints, gaps, {stub})
    assert found == [("a" * 9, "one", [real])]
