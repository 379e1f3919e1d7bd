"""Where a change can be planted in a package's source, by the shape of code it changes, found from the source and
the footprints file (only code some recorded case ran is a site).

A graph break goes before a statement of a function the footprints list: a method, a property, a nested function
or closure, a module-level helper, a hook registered by reference, an ``__init__``, a ``__post_init__``, or a class
body. The other shapes change what code reads rather than adding a statement to it: a decorator added
(``torch.compiler.disable``), a module constant or class attribute changed, a mapping entry added, a default
changed, an imported callable rebound to a wrapper. Each plant is one edit of one file; the edited file compiles.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from compile_audit.selection.footprints_file import Footprints

MARK = "# PLANTED recall"
BREAK = '__import__("torch")._dynamo.graph_break()'
BREAK_SHAPES = (
    "method",
    "property",
    "nested",
    "module-helper",
    "hook",
    "init",
    "post-init",
    "class-body",
)
OTHER_SHAPES = (
    "decorator",
    "module-constant",
    "class-attribute",
    "mapping-entry",
    "default",
    "import-rebound",
    "added-method",
    "added-function",
    "added-class",
    "renamed",
    "unrun",
    "at-import",
    "module-getattr",
    "version-bump",
    "import-effect",
)
# Changes before a case's first compile (functions the footprints list as run only while building): one that builds
# the same (a statement that does nothing) and one that builds something else (a constant of the build changed).
# The harness compares their builds as the gate does.
BUILD_SHAPES = ("build-same", "build-constant")
SHAPES = BREAK_SHAPES + OTHER_SHAPES + BUILD_SHAPES
# The selection rules (change_selection.RULES) each shape's plants are decided by; a rule no shape exercises fails
# tests/selftest/test_selection_rules.py. The multi-file shapes (a method added or removed as a subpackage) are the
# gate's own plants (tests/tools/peft_plants.py: new-method, new-method-break), run end to end by tests/tools.
_FUNCTION_RULES = ("changed-statements", "ran-function", "cached-function")
SHAPE_RULES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(BREAK_SHAPES, _FUNCTION_RULES),
    "class-body": ("class-body", "class-attribute", "class-statement"),
    "decorator": _FUNCTION_RULES,
    "default": _FUNCTION_RULES,
    "module-constant": ("module-name-readers",),
    "class-attribute": ("class-attribute", "class-body"),
    "mapping-entry": ("table-key-set", "table-gains-entries"),
    "import-rebound": ("module-name-readers",),
    "added-method": ("added-method",),
    "added-function": ("added-function",),
    "added-class": ("class-statement",),
    "renamed": ("ran-function", "added-function", "added-method"),
    "unrun": ("unrun-function", "read-at-import"),
    "at-import": ("run-at-import",),
    "module-getattr": ("added-module-hook",),
    "version-bump": ("version-string",),
    "import-effect": ("import-time-effect",),
    "build-same": _FUNCTION_RULES,
    "build-constant": _FUNCTION_RULES,
    # A plant that does not parse is refused by the harness (Plant.apply), so the rule is the gate's own self-test's.
    "unparsable (tests/selftest/test_selection_rules.py)": ("unparsable-file",),
    "new-method, gate end to end (tests/tools/peft_plants.py)": (
        "new-method-registration",
        "new-method-table-entry",
        "removed-subpackage",
    ),
    "new-variant, gate end to end (tests/tools/peft_plants.py)": ("variant-switch-added", "variant-entry-added"),
}
_HOOK_REGISTRATION = re.compile(r"register\w*hook")


@dataclasses.dataclass(frozen=True)
class Plant:
    """One edit of one file: ``new`` inserted before line ``line`` (indented like it), or, with ``span``, the text
    of that line between the two columns replaced by ``new``."""

    shape: str
    path: str  # package-relative: peft/tuners/lora/layer.py
    line: int  # the planted line in the edited file
    where: str  # the function or name it changes
    new: str
    breaks: bool  # whether Dynamo breaks where compiled code reaches it (a break, a disabled or rebound callable)
    span: tuple[int, int] | None = None
    indented: bool = True

    @property
    def name(self) -> str:
        return f"{self.shape}:{self.path}:{self.line}"

    def apply(self, text: str) -> str | None:
        """The edited file, or None where the edit does not compile."""
        lines = text.splitlines(keepends=True)
        row = lines[self.line - 1]
        if self.span is not None:
            start, end = self.span
            lines[self.line - 1] = f"{row[:start]}{self.new}{row[end:]}"
        else:
            indent = row[: len(row) - len(row.lstrip())] if self.indented else ""
            lines[self.line - 1 : self.line - 1] = [f"{indent}{part}\n" for part in self.new.split("\n")]
        edited = "".join(lines)
        try:
            compile(edited, self.path, "exec")
        except (SyntaxError, ValueError):
            return None
        return edited


@dataclasses.dataclass(frozen=True)
class _Function:
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    in_class: bool


def _functions(tree: ast.Module) -> Iterator[_Function]:
    """Every function with its ``__qualname__`` (nested ones under ``<locals>``)."""

    def walk(body: list[ast.stmt], prefix: str, in_class: bool) -> Iterator[_Function]:
        for node in body:
            if isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.", True)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = f"{prefix}{node.name}"
                yield _Function(qualname, node, in_class)
                yield from walk(node.body, f"{qualname}.<locals>.", False)
            else:
                for block in _blocks(node):
                    yield from walk(block, prefix, in_class)

    yield from walk(tree.body, "", False)


def _blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    blocks = [getattr(node, field, None) for field in ("body", "orelse", "finalbody")]
    blocks += [handler.body for handler in getattr(node, "handlers", [])]
    blocks += [case.body for case in getattr(node, "cases", [])]
    return [block for block in blocks if isinstance(block, list) and block and isinstance(block[0], ast.stmt)]


def _hooks(tree: ast.Module) -> set[str]:
    """Names passed by reference to a ``register_*hook`` call (directly or through ``functools.partial``)."""
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if not _HOOK_REGISTRATION.search(called):
            continue
        for argument in node.args:
            if isinstance(argument, ast.Call) and argument.args:  # partial(hook, ...)
                argument = argument.args[0]
            if isinstance(argument, ast.Name):
                names.add(argument.id)
            elif isinstance(argument, ast.Attribute):
                names.add(argument.attr)
    return names


def _shape(function: _Function, hooks: set[str]) -> str:
    name = function.node.name
    decorators = {ast.unparse(d).split("(")[0] for d in function.node.decorator_list}
    if name in hooks:
        return "hook"
    if name == "__init__":
        return "init"
    if name == "__post_init__":
        return "post-init"
    if "property" in decorators or any(d.endswith((".setter", ".getter")) for d in decorators):
        return "property"
    if "<locals>" in function.qualname:
        return "nested"
    return "method" if function.in_class else "module-helper"


def _body_statements(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.stmt]:
    """Statements a line can go before: not the docstring, not a definition (its decorators sit above it), not one
    on the header's line."""
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    found = []

    def walk(statements: list[ast.stmt]) -> None:
        for statement in statements:
            if statement.lineno == node.lineno or isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(statement, ast.ClassDef):
                continue
            found.append(statement)
            if not isinstance(node, ast.ClassDef):
                for block in _blocks(statement):
                    walk(block)

    walk(body)
    return found


class Sites:
    """The plants one package's source allows, by shape."""

    def __init__(self, root: Path, footprints: Footprints) -> None:
        self.root = root  # the package directory (…/peft)
        self.footprints = footprints
        self._ran = {key for key, cases in footprints.runs.items() if cases}

    def files(self) -> list[str]:
        """The files of functions some case ran, and the package's ``__init__.py`` (its version)."""
        return sorted({key.split("::", 1)[0] for key in self._ran} | {f"{self.root.name}/__init__.py"})

    def read(self, path: str) -> str:
        return (self.root.parent / path).read_text(encoding="utf-8")

    def of_file(self, path: str) -> Iterator[Plant]:
        try:
            tree = ast.parse(self.read(path), filename=path)
        except (OSError, SyntaxError):
            return
        hooks = _hooks(tree)
        yield from self._added(path, tree)
        for function in _functions(tree):
            key = f"{path}::{function.qualname}"
            if key not in self._ran:
                yield from self._not_run(path, function, key)
                continue
            yield from self._renamed(path, function)
            if self.footprints.ran_only_building(key) and self.footprints.ran_only_building(key) == self.footprints.ran(
                key
            ):
                yield from self._at_build(path, function)
            shape = _shape(function, hooks)
            yield from self._breaks(path, function, shape)
            if shape in ("method", "module-helper") and not function.node.decorator_list:
                decorator = f'@__import__("torch").compiler.disable  {MARK}'
                yield Plant("decorator", path, function.node.lineno, function.qualname, decorator, True)
            yield from self._defaults(path, function)
        yield from self._class_bodies(path, tree)
        yield from self._module_names(path, tree)

    def _added(self, path: str, tree: ast.Module) -> Iterator[Plant]:
        """A method added to each class that ran, and a function, a class, a module ``__getattr__`` and a statement
        run at import added to the module, each before its first definition; ``__version__`` bumped."""
        definitions = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)]
        if definitions:
            first = definitions[0]
            line = first.decorator_list[0].lineno if first.decorator_list else first.lineno
            added = {
                "added-function": f"def _planted_recall():  {MARK}\n    return None\n\n",
                "added-class": f"class _PlantedRecall:  {MARK}\n    pass\n\n",
                "module-getattr": f"def __getattr__(name):  {MARK}\n    raise AttributeError(name)\n\n",
                "import-effect": f'__import__("os").environ.get("PLANTED_RECALL")  {MARK}\n',
            }
            for shape, new in added.items():
                yield Plant(shape, path, line, "<module>", new, False, indented=False)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = [n for n in node.body if isinstance(n, ast.FunctionDef)]
            if methods and self._class_ran(path, node.name):
                line = methods[0].decorator_list[0].lineno if methods[0].decorator_list else methods[0].lineno
                new = f"def _planted_recall(self):  {MARK}\n    return None\n"
                yield Plant("added-method", path, line, node.name, new, False)
        if path.endswith("/__init__.py"):
            for statement in tree.body:
                if _assigns_one_name(statement) and statement.targets[0].id == "__version__":
                    value = statement.value
                    if (
                        isinstance(value, ast.Constant)
                        and isinstance(value.value, str)
                        and value.lineno == value.end_lineno
                    ):
                        bumped = repr(f"{value.value}.post1")
                        span = (value.col_offset, value.end_col_offset or 0)
                        yield Plant("version-bump", path, value.lineno, "__version__", bumped, False, span=span)

    def _not_run(self, path: str, function: _Function, key: str) -> Iterator[Plant]:
        """A break in a function no case ran: one importing the package runs, or one nothing runs."""
        statements = _body_statements(function.node)
        if statements:
            shape = "at-import" if key in self.footprints.at_import else "unrun"
            yield Plant(shape, path, statements[0].lineno, function.qualname, f"{BREAK}  {MARK}", True)

    def _renamed(self, path: str, function: _Function) -> Iterator[Plant]:
        """The function renamed: removed under its name (its callers fail), added under another."""
        node = function.node
        header = self.read(path).splitlines()[node.lineno - 1]
        start = header.find(f"def {node.name}(")
        if start >= 0 and not node.name.startswith("__"):
            span = (start + 4, start + 4 + len(node.name))
            yield Plant("renamed", path, node.lineno, function.qualname, f"{node.name}_planted", False, span=span)

    def _at_build(self, path: str, function: _Function) -> Iterator[Plant]:
        """A function every case that ran it ran only while building its model: a statement that does nothing, and a
        constant of its body changed."""
        statements = _body_statements(function.node)
        if statements:
            yield Plant("build-same", path, statements[0].lineno, function.qualname, f"pass  {MARK}", False)
        for node in ast.walk(function.node):
            numeric = isinstance(node, ast.Constant) and not isinstance(node.value, str)
            if numeric and _changed_constant(node) is not None and node.lineno > function.node.lineno:
                yield from _constant_changed("build-constant", path, node, function.qualname)
                break

    def _breaks(self, path: str, function: _Function, shape: str) -> Iterator[Plant]:
        statements = _body_statements(function.node)
        # Before the first statement, and, where the footprints narrow the function to statements, before each one
        # (what such a plant tests is that narrowing).
        if not self.footprints.statements.get(f"{path}::{function.qualname}"):
            statements = statements[:1]
        for statement in statements:
            yield Plant(shape, path, statement.lineno, function.qualname, f"{BREAK}  {MARK}", True)

    def _defaults(self, path: str, function: _Function) -> Iterator[Plant]:
        arguments = function.node.args
        for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
            yield from _constant_changed("default", path, default, function.qualname)

    def _class_bodies(self, path: str, tree: ast.Module) -> Iterator[Plant]:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef) or not self._class_ran(path, node.name):
                continue
            statements = _body_statements(node)
            if statements:
                yield Plant("class-body", path, statements[0].lineno, node.name, f"{BREAK}  {MARK}", True)
            for statement in statements:
                if _assigns_one_name(statement):
                    where = f"{node.name}.{statement.targets[0].id}"
                    yield from _constant_changed("class-attribute", path, statement.value, where)

    def _class_ran(self, path: str, name: str) -> bool:
        prefix = f"{path}::{name}."
        return any(key.startswith(prefix) for key in self._ran)

    def _module_names(self, path: str, tree: ast.Module) -> Iterator[Plant]:
        for statement in tree.body:
            if _assigns_one_name(statement):
                name, value = statement.targets[0].id, statement.value
                yield from _constant_changed("module-constant", path, value, name)
                if isinstance(value, ast.Dict) and value.keys and all(isinstance(k, ast.Constant) for k in value.keys):
                    entry = f'{name}["planted_recall"] = {name}[{ast.unparse(value.keys[0])}]  {MARK}'
                    line = (statement.end_lineno or statement.lineno) + 1
                    yield Plant("mapping-entry", path, line, name, entry, False, indented=False)
            if isinstance(statement, ast.ImportFrom) and statement.col_offset == 0:
                for alias in statement.names:
                    local = alias.asname or alias.name
                    if _called_only(tree, local):
                        wrapper = (
                            f"def _planted_{local}(*args, _planted_original={local}, **kwargs):  {MARK}\n"
                            f"    {BREAK}\n"
                            f"    return _planted_original(*args, **kwargs)\n"
                            f"{local} = _planted_{local}"
                        )
                        line = (statement.end_lineno or statement.lineno) + 1
                        yield Plant("import-rebound", path, line, local, wrapper, True, indented=False)


def _assigns_one_name(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)
    )


def _constant_changed(shape: str, path: str, node: ast.expr, where: str) -> Iterator[Plant]:
    changed = _changed_constant(node)
    if changed is not None and node.lineno == node.end_lineno:
        yield Plant(shape, path, node.lineno, where, changed, False, span=(node.col_offset, node.end_col_offset or 0))


def _called_only(tree: ast.Module, name: str) -> bool:
    """Whether the module uses ``name`` only by calling it (a class would stop being one)."""
    called = used = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
            called += 1
        if isinstance(node, ast.Name) and node.id == name:
            used += 1
    return called > 0 and called == used and not name[:1].isupper()


def _changed_constant(node: ast.expr) -> str | None:
    """Source for a different value of the same type, or None where the node is no plain constant."""
    if not isinstance(node, ast.Constant):
        return None
    value = node.value
    if isinstance(value, bool):
        return repr(not value)
    if isinstance(value, int):
        return repr(value + 1)
    if isinstance(value, float):
        return repr(value * 2 if value else 1.0)
    if isinstance(value, str) and value.isidentifier():
        return repr(f"{value}_planted")
    return None


def by_shape(sites: Sites) -> Mapping[str, list[Plant]]:
    """Every plant of the package, by shape, in file order."""
    found: dict[str, list[Plant]] = {shape: [] for shape in SHAPES}
    for path in sites.files():
        for plant in sites.of_file(path):
            found[plant.shape].append(plant)
    return found
