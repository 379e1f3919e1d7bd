"""The tools' place in the one-way dependencies (docs/architecture.md): gate_tools imports compile_audit and nothing of
the zoo, the plugin or the tests; nothing of compile_audit, compile_gate or bench_models imports gate_tools."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]


def imported(package: str) -> dict[str, set[str]]:
    """Each module file of the package -> the top-level packages it imports (absolute imports)."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize("package", ["compile_audit", "compile_gate", "bench_models"])
def test_nothing_below_the_tools_imports_them(package):
    assert not {path: names for path, names in imported(package).items() if "gate_tools" in names}


def test_the_tools_import_compile_audit_and_nothing_of_the_zoo_the_plugin_or_the_tests():
    modules = imported("gate_tools")
    assert modules, "no gate_tools package"
    wrong = {path: names & {"bench_models", "compile_gate", "tests", "scripts"} for path, names in modules.items()}
    assert not {path: names for path, names in wrong.items() if names}


def test_what_pyproject_points_to_in_the_readme_is_there():
    """pyproject.toml's comments send a reader to the README by a quoted heading or phrase: it must be there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pointers = re.findall(r'README, "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pointers, "pyproject.toml names no README section (update this test if that is on purpose)"
    assert not [p for p in pointers if p not in readme], f"README.md lacks what pyproject.toml points to: {pointers}"


LAYERS = ("probe", "rules", "artifacts")  # compile_audit's layers, lowest first (docs/architecture.md)


def layers_imported(path: Path) -> set[str]:
    """The compile_audit layers a module imports (absolute imports)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        names |= {m.split(".")[1] for m in modules if m.startswith("compile_audit.") and m.split(".")[1] in LAYERS}
    return names


def upward_imports(root: Path) -> dict[str, set[str]]:
    """Modules of an engine tree that import a layer above their own (the top-level modules are below every layer)."""
    wrong = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        own = LAYERS.index(parts[0]) if len(parts) > 1 and parts[0] in LAYERS else -1
        above = {layer for layer in layers_imported(path) if LAYERS.index(layer) > own}
        if above:
            wrong[str(path.relative_to(root))] = above
    return wrong


def test_compile_audits_layers_import_only_downwards():
    assert {*LAYERS} <= {path.name for path in (ROOT / "compile_audit").iterdir() if path.is_dir()}
    assert not upward_imports(ROOT / "compile_audit")


def test_an_upward_import_is_named(tmp_path):
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "capture.py").write_text("from compile_audit.rules.verdict import judge\n")
    (tmp_path / "files.py").write_text("import compile_audit.probe.timing\n")
    assert upward_imports(tmp_path) == {"probe/capture.py": {"rules"}, "files.py": {"probe"}}
