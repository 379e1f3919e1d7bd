"""The warm-start check on a toy: artifacts saved by one process start a fresh one warm, and a change to what is
compiled (here a constant the graph specializes on) shows as misses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compile_audit.probe.warm_start import WarmStartError, load_artifacts, warm_start_problems

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]

# A process of its own, as a user's would be: cold compiles and saves, warm loads first, then compiles.
TOY = """
import json, os, sys
from pathlib import Path
import torch
from compile_audit.probe.compile_cache import CacheWatch
from compile_audit.probe.warm_start import load_artifacts, save_artifacts

scale = float(os.environ["TOY_SCALE"])  # a Python float: the graph specializes on it

def toy(x):
    return (x.sin() * scale).sum()

mode, path = sys.argv[1], Path(sys.argv[2])
if mode == "warm":
    load_artifacts(path)
with CacheWatch() as watch:
    torch.compile(toy, backend="inductor")(torch.randn(8))
if mode == "cold":
    save_artifacts(path)
print(json.dumps(watch.counts))
"""


def _toy(mode: str, artifacts: Path, cache_dir: Path, scale: str) -> dict[str, int]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TOY_SCALE": scale, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", TOY, mode, str(artifacts)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("warm-start")
    artifacts = root / "artifacts.bin"
    cold = _toy("cold", artifacts, root / "cold-cache", "2.0")
    assert cold["fx_graph_misses"] > 0 and artifacts.stat().st_size > 0
    return artifacts


def test_a_fresh_process_that_loads_the_artifacts_starts_warm(saved, tmp_path):
    counts = _toy("warm", saved, tmp_path / "empty-cache", "2.0")
    assert warm_start_problems(counts) == [], counts


def test_a_change_to_what_compiles_misses_and_fails_the_check(saved, tmp_path):
    counts = _toy("warm", saved, tmp_path / "empty-cache", "3.0")
    problems = warm_start_problems(counts)
    assert problems and "cache miss(es) after loading the saved artifacts" in problems[0], counts


def test_aot_misses_of_attempts_dynamo_restarted_are_not_compiles_from_scratch():
    counts = {"fx_graph_hits": 3, "fx_graph_misses": 0, "aot_autograd_hits": 2, "aot_autograd_misses": 1}
    assert warm_start_problems(counts, restarts=1) == []
    [problem] = warm_start_problems(counts, restarts=0)
    assert problem.startswith("0 inductor FX-graph and 1 AOTAutograd cache miss(es) after loading")
    [problem] = warm_start_problems({**counts, "aot_autograd_misses": 2}, restarts=1)
    assert "1 AOTAutograd cache miss(es) (1 more: attempts Dynamo restarted)" in problem


def test_nothing_served_is_no_warm_start():
    assert warm_start_problems({"fx_graph_hits": 0, "fx_graph_misses": 0}) == [
        "no cache hit after loading the saved artifacts: nothing started warm"
    ]


def test_a_missing_artifacts_file_is_named(tmp_path):
    with pytest.raises(WarmStartError, match="cannot read the saved compile artifacts"):
        load_artifacts(tmp_path / "missing.bin")
