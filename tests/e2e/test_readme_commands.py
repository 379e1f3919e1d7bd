"""The README's commands, each run as a user would on a small selection, and shards of a selection.

    pytest -m readme

Each command is a fresh pytest or python process (tens of seconds each on 2 cores), so it runs only when ``-m``
selects ``readme`` explicitly; pyproject's addopts deselect it and ``.ci/run`` runs it. What the default run
already is (``pytest``), and ``-m gate_e2e`` / ``scripts/gate`` (their own test), are not repeated here; of the
tools, their ``--help`` from the checkout and as installed entry points.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compile_audit.rules.budgets import BudgetFile
from tests.e2e.markers import selects_explicitly

pytestmark = pytest.mark.readme

ROOT = Path(__file__).resolve().parents[2]
BUDGETS = ROOT / "tests" / "compile_budgets.toml"
ONE_CASE = "llama-tiny/lora/train-eval-train"
FEW_CASES = (
    "llama-tiny and not bnb4 and not int8 and (/lora/ or /ia3/ or /prompt-tuning/ or /vera/) and train-eval-train"
)
TIMEOUT_S = 900
SCENARIO_FILES = {str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob("test_*.py")} - {
    "tests/test_budgets_file.py",
    "tests/test_check_floor.py",
    "tests/test_registry.py",
}
# The tools: from the checkout (nothing installed), and the entry points of pyproject's [project.scripts].
TOOL_SCRIPTS = {"scripts/gate": "usage: scripts/gate --base SPEC", "scripts/bisect": "usage: scripts/bisect"}
ENTRY_POINTS = {"peft-compile-gate": "usage: peft-compile-gate --base SPEC", "peft-compile-bisect": "usage: peft-"}


@pytest.fixture(autouse=True)
def only_when_selected(request):
    expression = request.config.option.markexpr
    if not selects_explicitly(expression, "readme"):
        pytest.skip("runs the README's commands in fresh processes: run it with pytest -m readme")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, **(env or {})},
    )


def pytest_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run("-m", "pytest", "-p", "no:cacheprovider", *args, env=env)


def explain(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"


def cases_of(report: Path) -> dict[str, dict]:
    return {case["id"]: case for case in json.loads(report.read_text())["cases"]}


def test_two_workers(tmp_path):
    result = pytest_run("-n", "2", "-k", FEW_CASES, f"--compile-report={tmp_path / 'r.json'}")
    assert result.returncode == 0, explain(result)
    assert {c["status"] for c in cases_of(tmp_path / "r.json").values()} == {"passed"}


def test_full_matrix_selects_cases_the_default_run_does_not(tmp_path):
    selection = "opt-tiny and loha/ and train-eval-train"
    default = pytest_run("--collect-only", "-q", "-k", selection)
    assert "no tests collected" in default.stdout or "deselected" in default.stdout, explain(default)
    result = pytest_run("--full-matrix", "-k", selection, f"--compile-report={tmp_path / 'r.json'}")
    assert result.returncode == 0, explain(result)
    assert "opt-tiny/loha/train-eval-train" in cases_of(tmp_path / "r.json")


def test_cpu_backend_aot_eager(tmp_path):
    result = pytest_run("--cpu-backend", "aot_eager", "-k", FEW_CASES, f"--compile-report={tmp_path / 'r.json'}")
    assert result.returncode == 0, explain(result)
    cases = cases_of(tmp_path / "r.json")
    assert "llama-tiny/lora/train-eval-train@cpu-aot_eager" in cases
    assert {c["backend"] for c in cases.values()} == {"aot_eager"}


AOT_EAGER_SLICE = ROOT / ".ci" / "aot-eager-slice.txt"


def test_aot_eager_slice_fails_on_a_planted_break():
    """.ci/run's aot_eager step, with a graph break planted in LoRA's forward: the slice's DoRA case, whose entry
    holds a recompile-limit known failure of this tier, fails on the new root (a known failure holds nothing else)."""
    one = "lora-dora/train-eval-train"
    args = ("-p", "tests.plant_regression", "--cpu-backend", "aot_eager", f"--cases={AOT_EAGER_SLICE}", "-k", one)
    result = pytest_run(*args, env={"PLANT": "graph-break"})
    assert result.returncode == 1, explain(result)
    assert f"llama-tiny/{one}@cpu-aot_eager: graph breaks (roots)" in result.stdout, explain(result)
    assert "tests/plant_regression.py:" in result.stdout, explain(result)


def test_compile_report_and_update_budgets_on_a_copy(tmp_path):
    copy = tmp_path / "budgets.toml"
    shutil.copy(BUDGETS, copy)
    report = tmp_path / "r.json"
    result = pytest_run("-k", ONE_CASE, f"--budgets={copy}", "--update-budgets", f"--compile-report={report}")
    assert result.returncode == 0, explain(result)
    assert "budgets updated:" in result.stdout, explain(result)
    case_id = "llama-tiny/lora/train-eval-train"
    rewritten, recorded = (_entry(path, case_id) for path in (copy, BUDGETS))
    assert rewritten == recorded, "the budget recorded from this run differs from the file's"
    assert cases_of(report)["llama-tiny/lora/train-eval-train"]["audited"] is True


def _entry(path: Path, case_id: str) -> dict:
    entry = BudgetFile.load(path).budget_for(case_id).to_dict()  # the default where the case has no entry
    entry.pop("line", None)
    return entry


def test_build_fingerprints_of_one_case_twice_are_equal(tmp_path):
    """What the gate runs on each side for the cases a change reaches only while building: the same build, the same
    fingerprint, from two processes."""
    cases = tmp_path / "cases.txt"
    cases.write_text(f"{ONE_CASE}\n")
    digests = []
    for run_number in (1, 2):
        out = tmp_path / f"builds-{run_number}.json"
        result = pytest_run(f"--build-fingerprints={out}", f"--cases={cases}")
        assert result.returncode == 0, explain(result)
        found = json.loads(out.read_text())["cases"][ONE_CASE]
        assert "digest" in found, found
        digests.append(found["digest"])
    assert digests[0] == digests[1]


def test_selftest_marker_selects_only_selftests():
    collected = pytest_run("-m", "selftest", "--collect-only", "-q")
    items = [line for line in collected.stdout.splitlines() if "::" in line]
    assert items, explain(collected)
    cases = [item for item in items if item.split("::")[0] in SCENARIO_FILES]
    assert not cases, f"-m selftest selected cases of the zoo: {cases[:5]}"
    result = pytest_run("-m", "selftest", "-k", "merge or budgets")
    assert result.returncode == 0, explain(result)


def test_gpu_tier_on_four_workers():
    """On a machine without CUDA every GPU case skips with the reason and the run exits 0."""
    result = pytest_run("-m", "gpu", "-n", "4", "-k", ONE_CASE, "-rs")
    assert result.returncode == 0, explain(result)
    if not _cuda():
        assert "CUDA is not available" in result.stdout, explain(result)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_planted_graph_break_fails_lora():
    """Also the README's failure example: each of its lines (``...`` stands for text left out) matches a line the
    run printed, in order, on the versions the budgets file records (elsewhere counts and guards may differ)."""
    result = pytest_run("-p", "tests.plant_regression", "-k", ONE_CASE, env={"PLANT": "graph-break"})
    assert result.returncode == 1, explain(result)
    assert "tests/plant_regression.py:" in result.stdout, explain(result)
    if not BudgetFile.load(BUDGETS).versions_match("cpu", _installed_versions()):
        pytest.skip("the README's failure example was printed on the budgets file's versions, not these")
    unmatched = _unmatched_lines(_readme_block("text"), result.stdout.splitlines())
    assert not unmatched, f"README.md's failure example has lines the gate no longer prints: {unmatched}"


def _installed_versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in ("torch", "transformers", "peft")}


def _readme_block(language: str) -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split(f"```{language}\n", 1)[1].split("```", 1)[0].splitlines()


def _unmatched_lines(example: list[str], printed: list[str]) -> list[str]:
    """The example's lines that match no printed line after the previous match (``...`` matches any text)."""
    position, unmatched = 0, []
    for line in example:
        if line.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in line.rstrip().split("...")))
        found = next((i for i in range(position, len(printed)) if pattern.fullmatch(printed[i].rstrip())), None)
        if found is None:
            unmatched.append(line)
        else:
            position = found + 1
    return unmatched


def _node_ids(*args: str) -> list[str]:
    result = pytest_run("--collect-only", "-q", *args)
    assert result.returncode == 0, explain(result)
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_shards_of_a_selection_are_disjoint_and_complete():
    selection = "llama-tiny and train-eval-train"
    whole = _node_ids("-k", selection)
    shards = [_node_ids("-k", selection, "--splits=3", f"--group={group}") for group in (1, 2, 3)]
    assert all(shards), [len(shard) for shard in shards]
    union = [node for shard in shards for node in shard]
    assert len(union) == len(set(union)), "a test is in two shards"
    assert sorted(union) == sorted(whole)


def test_merged_shards_equal_one_run_and_feed_the_diff_and_the_matrix(tmp_path):
    one = tmp_path / "one.json"
    result = pytest_run("-k", FEW_CASES, f"--compile-report={one}")
    assert result.returncode == 0, explain(result)
    shards = [tmp_path / f"shard-{group}.json" for group in (1, 2)]
    for group, report in enumerate(shards, start=1):
        result = pytest_run("-k", FEW_CASES, "--splits=2", f"--group={group}", f"--compile-report={report}")
        assert result.returncode == 0, explain(result)
    merged = tmp_path / "merged.json"
    result = run("-m", "compile_audit.artifacts.merge", *map(str, shards), "--output", str(merged))
    assert result.returncode == 0, explain(result)
    result = run("-m", "compile_audit.artifacts.diff", str(one), str(merged))
    assert result.returncode == 0, explain(result)
    assert "no changes" in result.stdout, explain(result)
    result = run("-m", "compile_audit.artifacts.matrix", str(merged), "--output", str(tmp_path / "matrix.md"))
    assert result.returncode == 0, explain(result)
    assert "| lora |" in (tmp_path / "matrix.md").read_text()


def test_compare_compile_cpu_form(tmp_path):
    table = tmp_path / "table.md"
    result = run(
        "scripts/compare_compile.py",
        *("--model", "llama-tiny", "--method", "lora", "--steps", "4", "--batch-size", "2", "--seq-len", "32"),
        *("--eval-every", "2", "--device", "cpu", "--backend", "aot_eager", "--output", str(table)),
    )
    assert result.returncode == 0, explain(result)
    assert "compile" in table.read_text()


@pytest.mark.parametrize("script", sorted(TOOL_SCRIPTS))
def test_the_tools_run_from_the_checkout(script):
    result = run(script, "--help")
    assert result.returncode == 0 and result.stdout.startswith(TOOL_SCRIPTS[script]), explain(result)


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_the_tools_run_installed(name):
    try:
        scripts = {e.name for e in importlib.metadata.distribution("peft-compile-gate").entry_points}
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("peft-compile-gate is not installed (pip install -e .): only scripts/ runs the tools")
    assert name in scripts, f"the installed peft-compile-gate has no entry point {name} (pip install -e . again)"
    executable = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert executable, f"{name} is installed but not on PATH"
    result = subprocess.run([executable, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.startswith(ENTRY_POINTS[name]), explain(result)


def test_the_readme_budgets_example_is_an_entry_of_the_file():
    """The README quotes a real entry: it fails once that entry changes, so the example cannot rot."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [block.split("```", 1)[0] for block in readme.split("```toml\n")[1:]]
    assert blocks, "README.md has no ```toml example"
    budgets = BUDGETS.read_text(encoding="utf-8")
    stale = [block.splitlines()[0] for block in blocks if block.strip() not in budgets]
    assert not stale, f"README.md quotes budget entries the file no longer holds as written: {stale}"
