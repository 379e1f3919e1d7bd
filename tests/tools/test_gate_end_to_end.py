"""scripts/gate end to end: real virtualenvs, the installed PEFT release as base, one case per side.

    pytest -m gate_e2e

Head is either the same release (the verdict must be 0) or its sdist with a graph break planted at the start
of LoRA's ``Linear.forward`` (the verdict must be 1, naming ``peft/tuners/lora/layer.py``). It takes minutes
(four virtualenvs), so it runs only when ``-m`` selects ``gate_e2e`` explicitly; pyproject's addopts deselect
it. Set GATE_TORCH_INDEX_URL where a plain ``torch==<version>`` would not install the build of this Python.
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.e2e.markers import selects_explicitly
from tests.tools.source_edits import first_statement, insert_first

pytestmark = pytest.mark.gate_e2e

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gate"  # as CI runs it: from the checkout
CASE = "tests/test_train_eval_train.py::test_train_eval_train[llama-tiny/lora/train-eval-train]"
PLANTED = "torch._dynamo.graph_break()  # planted by tests/tools/test_gate_end_to_end.py"
GATE_TIMEOUT_S = 1800


@pytest.fixture(autouse=True)
def only_when_selected(request):
    expression = request.config.option.markexpr
    # Selected because of its marker, not by an expression that selects untagged tests too ("not gpu").
    if not selects_explicitly(expression, "gate_e2e"):
        pytest.skip("builds four virtualenvs: run it with pytest -m gate_e2e")


@pytest.fixture(scope="module")
def peft_version() -> str:
    return importlib.metadata.version("peft")


@pytest.fixture(scope="module")
def planted_peft(tmp_path_factory, peft_version) -> Path:
    """The installed PEFT release's source with a graph break at the start of LoRA's Linear.forward."""
    downloads = tmp_path_factory.mktemp("sdist")
    pip = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--dest", downloads]
    subprocess.run([*pip, f"peft=={peft_version}"], check=True, capture_output=True, timeout=600)
    (archive,) = downloads.glob("peft-*.tar.gz")
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12 / 3.11.4
    with tarfile.open(archive) as tar:
        tar.extractall(downloads, **safe)
    source = downloads / archive.name.removesuffix(".tar.gz")
    plant_graph_break(source / "src" / "peft" / "tuners" / "lora" / "layer.py")
    return source


def plant_graph_break(layer_py: Path) -> None:
    text = layer_py.read_text(encoding="utf-8")
    layer_py.write_text(insert_first(text, _lora_linear_forward(ast.parse(text)), PLANTED), encoding="utf-8")


def _lora_linear_forward(module: ast.Module) -> ast.FunctionDef:
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == "Linear":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return item
    raise AssertionError("no Linear.forward in peft/tuners/lora/layer.py: the plant needs updating")


def run_gate(base: str, head: str, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, SCRIPT, "--base", base, "--head", head, "--out", out, "--", CASE]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=GATE_TIMEOUT_S, check=False)
    print(done.stdout, done.stderr, sep="")  # shown with pytest -rP
    return done


def _shown(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-2000:]}"


def test_the_plant_lands_in_lora_linear_forward(planted_peft):
    text = (planted_peft / "src" / "peft" / "tuners" / "lora" / "layer.py").read_text(encoding="utf-8")
    assert text.count(PLANTED) == 1
    first = first_statement(_lora_linear_forward(ast.parse(text)))
    assert ast.unparse(first) == "torch._dynamo.graph_break()"


def test_a_planted_graph_break_in_head_exits_1_and_names_the_file(planted_peft, peft_version, tmp_path):
    done = run_gate(f"peft=={peft_version}", str(planted_peft), tmp_path / "out")
    assert done.returncode == 1, _shown(done)
    assert done.stderr == "", _shown(done)
    diff = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert "peft/tuners/lora/layer.py" in diff and "llama-tiny/lora/train-eval-train" in diff, diff
    assert "peft/tuners/lora/layer.py" in done.stdout, _shown(done)


def test_the_same_peft_on_both_sides_exits_0(peft_version, tmp_path):
    done = run_gate(f"peft=={peft_version}", f"peft=={peft_version}", tmp_path / "out")
    assert done.returncode == 0, _shown(done)
    assert done.stderr == "", _shown(done)
    assert "Nothing regressed" in (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert "no executed PEFT code differs" in done.stdout, _shown(done)  # decided before any virtualenv


# ----------------------------------------------------------------------------- a pull request that adds a method


@pytest.fixture(scope="module")
def new_method_peft(tmp_path_factory, peft_version) -> dict[bool, Path]:
    """The installed release's source with HRA copied as a new method, HRACOPY, without and with a break first in its
    layer's forward (tests/tools/new_method.py)."""
    from tests.tools.peft_plants import apply, download_source

    sources = {}
    for planted in (False, True):
        source = download_source(peft_version, tmp_path_factory.mktemp("new-method") / "peft")
        apply(source, "new-method-break" if planted else "new-method")
        sources[planted] = source
    return sources


def run_whole_gate(base: str, head: str, out: Path) -> subprocess.CompletedProcess:
    """The gate as CI runs it: the selection by change, no pytest arguments."""
    cmd = [sys.executable, SCRIPT, "--base", base, "--head", head, "--out", out]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=GATE_TIMEOUT_S, check=False)
    print(done.stdout, done.stderr, sep="")
    return done


def test_a_new_method_with_a_break_exits_1_naming_its_case_and_line(new_method_peft, peft_version, tmp_path):
    done = run_whole_gate(f"peft=={peft_version}", str(new_method_peft[True]), tmp_path / "out")
    assert done.returncode == 1, _shown(done)
    assert "new case(s), of a method base lacks" in done.stdout, _shown(done)
    diff = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert "llama-tiny/hracopy/train-eval-train" in diff, diff
    assert "peft/tuners/hracopy/layer.py" in diff, diff


def test_a_new_method_that_compiles_cleanly_exits_0_and_its_cases_are_new(new_method_peft, peft_version, tmp_path):
    done = run_whole_gate(f"peft=={peft_version}", str(new_method_peft[False]), tmp_path / "out")
    assert done.returncode == 0, _shown(done)
    assert "runs at import in a new subpackage" in done.stdout, _shown(done)
    assert "new case(s), of a method base lacks, judged on head alone: " in done.stdout, _shown(done)
