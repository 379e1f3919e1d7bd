"""The selection replayed over a package's git history: each commit's cases and cost, and the distribution."""

from __future__ import annotations

import json
import subprocess

import pytest

from compile_audit.selection import history_replay
from compile_audit.selection.footprints_file import Footprints

pytestmark = pytest.mark.selftest

LAYER = "def forward(x):\n    return x + 1\n\n\ndef merge(x):\n    return x * 2\n"


def _commit(repo, message: str, text: str) -> None:
    (repo / "src" / "toy" / "layer.py").write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], check=True
    )


def _history(tmp_path, build_only: dict[str, frozenset[str]] | None = None) -> list[str]:
    """A toy repository with three commits after the first, its footprints, durations and build costs: the
    replay's arguments."""
    repo = tmp_path / "repo"
    (repo / "src" / "toy").mkdir(parents=True)
    (repo / "src" / "toy" / "__init__.py").write_text("")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _commit(repo, "first", LAYER)
    _commit(repo, "DOC say more", LAYER.replace("def merge(x):\n", "def merge(x):\n    'Merged.'\n"))
    _commit(
        repo,
        "FIX merge",
        LAYER.replace("'Merged.'\n", "")
        .replace("x * 2", "x * 3")
        .replace("def merge(x):\n", "def merge(x):\n    'Merged.'\n"),
    )
    _commit(repo, "FIX forward", LAYER.replace("x + 1", "x + 2"))
    footprints = tmp_path / "footprints.json"
    footprints.write_text(
        Footprints(
            ("m/a/x", "m/b/x", "m/c/x"),
            {"toy/layer.py::forward": frozenset({"m/a/x", "m/b/x"}), "toy/layer.py::merge": frozenset({"m/b/x"})},
            build_only=build_only or {},
        ).to_json()
    )
    durations = tmp_path / "durations.json"
    durations.write_text(
        json.dumps(
            {
                f"tests/test_x.py::test_x[{case}]": seconds
                for case, seconds in (("m/a/x", 10.0), ("m/b/x", 20.0), ("m/c/x", 40.0))
            }
        )
    )
    costs = tmp_path / "build_costs.json"
    costs.write_text(json.dumps({"overhead_seconds": 3.0, "per_case_seconds": 0.5}))
    args = ["--repo", str(repo), "--last", "3", "--json", str(tmp_path / "replay.json"), "--build-costs", str(costs)]
    return [*args, "--footprints", str(footprints), "--durations", str(durations)]


def test_replay_prices_each_commit_by_the_cases_it_selects(tmp_path, capsys):
    assert history_replay.main(_history(tmp_path)) == 0
    out = tmp_path / "replay.json"
    commits = {c["subject"]: c for c in json.loads(out.read_text())["commits"]}
    assert set(commits) == {"DOC say more", "FIX merge", "FIX forward"}  # the last three, newest first
    assert (commits["DOC say more"]["cases"], commits["DOC say more"]["executes_differently"]) == (0, False)
    assert (commits["FIX merge"]["cases"], commits["FIX merge"]["cpu_seconds"]) == (1, 20.0)
    assert (commits["FIX forward"]["cases"], commits["FIX forward"]["cpu_seconds"]) == (2, 30.0)
    printed = capsys.readouterr().out
    assert "3 commits; CPU-seconds per side: median 20, p90 30, mean 17 (the full matrix: 70)" in printed
    assert "full matrix: 0 of 3 commits (0%)" in printed
    assert "no case at all: 1 commits; of them, 1 change no executed code (0 of those select a case)" in printed


def test_cases_reached_only_while_building_cost_their_fingerprints_and_run_unless_known_to_build_the_same(
    tmp_path, capsys
):
    args = _history(tmp_path, build_only={"toy/layer.py::forward": frozenset({"m/a/x"})})
    assert history_replay.main(args) == 0
    commits = {c["subject"]: c for c in json.loads((tmp_path / "replay.json").read_text())["commits"]}
    # m/a/x ran forward only while building: it still runs (nothing told its builds apart), after its fingerprints.
    forward = commits["FIX forward"]
    assert (forward["cases"], forward["cpu_seconds"], forward["build_only"]) == (2, 30.0 + 3.0 + 0.5, 1)
    assert "reached only while building: 1 commits, 1 cases" in capsys.readouterr().out
    compared = tmp_path / "compared.json"
    compared.write_text(json.dumps({forward["commit"]: {"same": ["m/a/x"]}}))
    assert history_replay.main([*args, "--builds-compared", str(compared)]) == 0
    forward = {c["subject"]: c for c in json.loads((tmp_path / "replay.json").read_text())["commits"]}["FIX forward"]
    assert (forward["cases"], forward["cpu_seconds"], forward["builds_same"]) == (1, 20.0 + 3.0 + 0.5, 1)
    # Kept gzipped (the docs' copy): read the same.
    history_replay.write_compared(tmp_path / "compared.json.gz", history_replay.read_compared(compared))
    assert (tmp_path / "compared.json.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert history_replay.builds_compared(tmp_path / "compared.json.gz") == {forward["commit"]: frozenset({"m/a/x"})}


def test_a_new_method_is_priced_as_the_same_cases_of_the_matrix_s_methods_on_average(tmp_path):
    footprints = Footprints(
        ("m/a/x", "m/a/y", "n/a/x", "m/b/x", "m/b/y"),
        {"toy/layer.py::forward": frozenset({"m/a/x"})},
    )
    durations = {"m/a/x": 10.0, "m/a/y": 100.0, "n/a/x": 1000.0, "m/b/x": 30.0, "m/b/y": 300.0}
    # Method a has both cases of the shape, b one (as a method whose layers cannot run a scenario).
    assert history_replay.method_costs(footprints, durations, ["m/{method}/x", "n/{method}/x"]) == (1.5, 520.0)
    assert history_replay.method_costs(footprints, durations) == (2.5, 720.0)  # every case of each method
    path = tmp_path / "new.json"
    path.write_text(json.dumps({"cases": ["m/a/x"]}))
    with pytest.raises(history_replay.FootprintsError, match=r"new\.json: .*\{method\}"):
        history_replay.new_method_cases(path)


def test_a_case_of_code_neither_side_has_costs_nothing(tmp_path):
    """Today's footprints hold the cases of a method that came after an old commit: they ran a folder neither side
    of that commit has, cannot run there, and cost nothing; a case of a folder one side has still counts."""
    args = _history(tmp_path)
    footprints = Footprints(
        ("m/a/x", "m/b/x", "later/a/x"),
        {
            "toy/layer.py::forward": frozenset({"m/a/x", "m/b/x", "later/a/x"}),
            "toy/layer.py::merge": frozenset({"m/b/x"}),
            "toy/later/model.py::forward": frozenset({"later/a/x"}),
        },
    )
    (tmp_path / "footprints.json").write_text(footprints.to_json())
    durations = json.loads((tmp_path / "durations.json").read_text())
    durations["tests/test_x.py::test_x[later/a/x]"] = 50.0
    (tmp_path / "durations.json").write_text(json.dumps(durations))
    assert history_replay.main(args) == 0
    forward = {c["subject"]: c for c in json.loads((tmp_path / "replay.json").read_text())["commits"]}["FIX forward"]
    assert (forward["cases"], forward["cpu_seconds"], forward["absent"]) == (2, 30.0, 1)
    assert history_replay.absent_cases(footprints, {"toy/later/model.py", "toy/layer.py"}) == frozenset()
