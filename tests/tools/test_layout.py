"""The layout docs/architecture.md states, enforced: the one-way dependencies (gate_tools imports compile_audit and
nothing of the zoo, the plugin or the tests; nothing of compile_audit, compile_gate or bench_models imports gate_tools;
compile_audit's layers import only downwards), no import cycle, and every module and data file named there."""

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


def test_bench_models_and_compile_audit_never_import_each_other():
    """docs/architecture.md: the zoo's models and the engine are independent; only tests and the plugin join them."""
    assert not {path: names for path, names in imported("bench_models").items() if "compile_audit" in names}
    assert not {path: names for path, names in imported("compile_audit").items() if "bench_models" in names}


@pytest.mark.parametrize("package", ["compile_audit/artifacts", "compile_audit/selection"])
def test_artifacts_and_the_selection_import_no_torch(package):
    """docs/architecture.md: the files runs leave are read without torch (the workflows merge reports bare), and the
    selection decides without it (the gate selects before either side's venv exists)."""
    libraries = {"torch", "transformers", "peft"}
    heavy = {path: names & libraries for path, names in imported(package).items()}
    assert not {path: names for path, names in heavy.items() if names}


def test_the_selection_and_the_report_s_records_never_import_each_other_nor_the_engine_s_layers():
    """docs/architecture.md: the selection is a package of its own, apart from the report's records."""
    selection = {path: layers_imported(ROOT / path) for path in imported("compile_audit/selection")}
    assert not {path: layers for path, layers in selection.items() if layers}
    artifacts = {
        path: {n for n in names if n.startswith("compile_audit.selection")}
        for path, names in module_imports("compile_audit").items()
        if path.startswith("compile_audit.artifacts")
    }
    assert not {path: names for path, names in artifacts.items() if names}


def module_imports(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of the package (dotted) -> the modules of the project it imports, absolute or relative, at any
    depth of its code."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        dotted = ".".join(parts).removesuffix(".__init__")
        home = list(parts[:-1])  # the package a relative import starts from
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(home[: len(home) - node.level + 1] if node.level else [])
                module = ".".join(filter(None, [base, node.module or ""]))
                # ``from . import x`` imports the submodule x; its package's __init__ runs for any import of it
                names |= {module} if node.module else set()
                names |= {f"{module}.{alias.name}" for alias in node.names}
        found[dotted] = {name for name in names if name.split(".")[0] == package.split("/")[0]}
    return {module: {name for name in names if name in found and name != module} for module, names in found.items()}


def test_a_relative_import_is_an_import(tmp_path):
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "__init__.py").write_text("")
    (tmp_path / "zoo" / "methods.py").write_text("from .derived import make\n")
    (tmp_path / "zoo" / "derived.py").write_text("def make():\n    from . import methods\n")
    graph = module_imports("zoo", tmp_path)
    assert graph["zoo.methods"] == {"zoo.derived"} and graph["zoo.derived"] == {"zoo.methods"}
    assert cycles(graph) == [["zoo.derived", "zoo.methods", "zoo.derived"]]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle once, as the modules around it (lazy imports inside functions included)."""
    found, state = [], {}

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        for name in sorted(graph.get(module, ())):
            if state.get(name) == "open":
                found.append([*stack[stack.index(name) :], name])
            elif name not in state:
                visit(name, [*stack, name])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


@pytest.mark.parametrize("package", ["compile_audit", "compile_gate", "bench_models", "gate_tools"])
def test_no_module_imports_one_that_imports_it(package):
    assert not cycles(module_imports(package))


def test_an_import_cycle_is_named():
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": set()}
    assert cycles(graph) == [["a.x", "a.y", "a.z", "a.x"]]


DOCUMENTED = ("compile_audit", "compile_gate", "bench_models", "gate_tools", "scripts", "tests/plugins", "tests/tools")


def undocumented(root: Path, text: str) -> list[str]:
    """Modules of the documented packages, and data files of tests/, that docs/architecture.md never names."""
    files = [path for folder in DOCUMENTED for path in (root / folder).rglob("*.py") if not path.name.startswith("_")]
    files += [*(root / "tests").glob("*.json"), *(root / "tests").glob("*.toml")]
    test_modules = ("test_",)  # a folder's tests are described with their folder
    return sorted(
        str(path.relative_to(root))
        for path in files
        if not path.name.startswith(test_modules) and path.name not in text and path.stem not in text
    )


def test_architecture_names_every_module_and_data_file():
    assert not undocumented(ROOT, (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))


def test_a_module_the_architecture_does_not_name_is_listed(tmp_path):
    (tmp_path / "gate_tools").mkdir()
    (tmp_path / "gate_tools" / "named.py").write_text("")
    (tmp_path / "gate_tools" / "forgotten.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "weights.json").write_text("{}")
    assert undocumented(tmp_path, "named.py: one job") == ["gate_tools/forgotten.py", "tests/weights.json"]
