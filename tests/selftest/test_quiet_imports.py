"""Importing the zoo (and so PEFT and its optional backends) prints nothing on a machine where those backends have
nothing to offer: a newcomer's first run shows the run, not five lines of harmless warnings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest
ROOT = Path(__file__).resolve().parents[2]
NOISE = ("Failed to load", "is an Enum subclass", "gemm_4bit_forward")


def test_importing_the_zoo_prints_no_backend_noise():
    done = subprocess.run(
        [sys.executable, "-c", "import bench_models"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert not [line for line in done.stderr.splitlines() if any(n in line for n in NOISE)], done.stderr


def test_a_warning_those_loggers_log_later_still_shows():
    code = "import bench_models, logging; logging.getLogger('torchao').warning('later')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "later" in done.stderr
