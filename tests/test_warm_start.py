"""A warm start: a compiled PEFT case saves its compile artifacts, and a fresh process that loads them compiles
nothing anew (tests/warm_start_worker.py; compile_audit.probe.warm_start). What a user deploying a compiled PEFT
model gets; a change that makes the artifacts unusable (other graphs, other cache keys) fails here with its misses.

Inductor on CPU, each process with an inductor cache directory of its own; runs only with ``-m warm_start``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compile_audit.probe.warm_start import warm_start_problems

pytestmark = pytest.mark.warm_start

ROOT = Path(__file__).resolve().parents[1]
CASES = ("llama-tiny/lora",)  # model/method: the GPU tier's first case


def _worker(mode: str, case: str, artifacts: Path, cache_dir: Path) -> dict[str, int]:
    model, method = case.split("/")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.warm_start_worker", mode, model, method, str(artifacts)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, f"{case}: the {mode} process failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model_method", CASES)
def test_a_fresh_process_starts_warm_from_the_saved_artifacts(model_method, tmp_path):
    case = model_method
    artifacts = tmp_path / "artifacts.bin"
    cold = _worker("cold", case, artifacts, tmp_path / "cold-cache")
    assert cold["saved_bytes"] > 0 and cold["fx_graph_misses"] > 0, f"{case}: the cold process compiled nothing: {cold}"
    warm = _worker("warm", case, artifacts, tmp_path / "warm-cache")
    problems = warm_start_problems(warm, restarts=warm["restarts"])
    assert not problems, f"{case}/warm-start: " + "; ".join(problems) + f" (cold: {cold}; warm: {warm})"
    assert warm["frames"] == cold["frames"], (
        f"{case}: the warm process compiled {warm['frames']} frame(s), cold {cold['frames']}"
    )
