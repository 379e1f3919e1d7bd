"""PEFT's compile-related fixes, each undone in the installed release's sdist: the scenario that stands for it fails,
naming it (docs/scenarios.md, "PEFT's compile-related fixes, as scenarios").

    pytest -m peft_fixes

Each fix is undone by ``tests.tools.peft_plants`` in a copy of the sdist, and its case runs with that copy first on
``PYTHONPATH``: it must fail with the text that names what the fix restored. The same cases on the unchanged sdist
must pass, so the failure is the undo's. It downloads the sdist and runs a few short cases (minutes), so it runs only
when ``-m`` selects ``peft_fixes`` by name; pyproject's addopts deselect it.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.markers import selects_explicitly
from tests.tools.peft_plants import apply, download_source

pytestmark = pytest.mark.peft_fixes

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 900

# fix -> (the case that stands for it, what its failure must say)
FIXES = {
    "undo-2611": ("llama-tiny/lora/hotswap", "instead of copying into it (peft#2611)"),
    "undo-3241": ("llama-tiny/lora/hotswap", "changed requires_grad of 2 adapter weight(s) (peft#3241)"),
    "undo-2962": ("llama-tiny/lora/inject-compiled", "raised (peft#2962)"),
    "undo-2416": ("llama-tiny/lora/hotswap", "peft/tuners/lora/layer.py:1101 in forward"),
    "undo-2177-scalings": (
        "llama-tiny/lora/hotswap",
        "self_attn.q_proj.scaling['default'] == 3.0 (guard from peft/tuners/lora/layer.py:1102)",
    ),
}


@pytest.fixture(autouse=True)
def only_when_selected(request):
    if not selects_explicitly(request.config.option.markexpr, "peft_fixes"):
        pytest.skip("downloads PEFT's sdist and runs its cases: run it with pytest -m peft_fixes")


@pytest.fixture(scope="module")
def release_source(tmp_path_factory) -> Path:
    return download_source(importlib.metadata.version("peft"), tmp_path_factory.mktemp("release") / "peft")


def run_cases(cases: list[str], source: Path, folder: Path) -> subprocess.CompletedProcess:
    """These cases (``--cases``, exact ids) with ``source``'s PEFT first on the path."""
    listing = folder / "cases.txt"
    listing.write_text("".join(f"{case}\n" for case in cases), encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(source / "src"), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--cases={listing}"]
    command += [f"--compile-report={folder / 'report.json'}"]
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=RUN_TIMEOUT_S)
    print(done.stdout[-6000:], done.stderr[-2000:], sep="")  # shown with pytest -rP
    return done


def _shown(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-1500:]}"


def test_the_cases_pass_on_the_release_itself(release_source, tmp_path):
    cases = sorted({case for case, _ in FIXES.values()})
    done = run_cases(cases, release_source, tmp_path)
    assert done.returncode == 0, _shown(done)
    assert f"{len(cases)} passed" in done.stdout, _shown(done)


@pytest.mark.parametrize("fix", sorted(FIXES))
def test_the_fix_undone_fails_its_case_naming_it(fix, release_source, tmp_path):
    case, named = FIXES[fix]
    source = tmp_path / "peft"
    shutil.copytree(release_source, source)
    apply(source, fix)
    done = run_cases([case], source, tmp_path)
    assert done.returncode == 1, _shown(done)
    assert "FAILED tests/" in done.stdout and case in done.stdout, _shown(done)
    assert named in done.stdout, _shown(done)
