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


def test_a_pytest_session_starts_without_backend_noise():
    """What a newcomer runs first: a pytest session loads the plugin and the conftest (the zoo, PEFT, its backends).
    With -s: pytest's capture swallows what the conftest prints while it is imported, so only -s shows the noise."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-s", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "tests/test_budgets_file.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not [line for line in output.splitlines() if any(n in line for n in NOISE)], output
