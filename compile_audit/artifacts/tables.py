"""Tables (module-level dicts, enums) in source: which ones a function writes by key, and which ones it iterates.

A registration call adds a key to a table (``PEFT_TYPE_TO_CONFIG_MAPPING[peft_type] = config``). Code that looks up
another key reads what it read before; only code that goes over the whole table (a loop, ``.items()``, ``list(...)``,
``len(...)``), or hands it on to code that may, can see the new key. So the selection follows a new key to those
readers only, not to lookups of one key or member.
"""

from __future__ import annotations

import ast
import functools

# Calls that go over their argument's keys or members.
_ITERATING_CALLS = frozenset(
    {"list", "tuple", "set", "frozenset", "dict", "sorted", "len", "enumerate", "zip", "any", "all", "sum", "max",
     "min", "reversed", "iter", "map", "filter"}
)  # fmt: skip
_ITERATING_METHODS = frozenset({"items", "keys", "values", "copy", "__iter__"})
_WRITING_METHODS = frozenset({"update", "setdefault", "__setitem__"})


def _name(node: ast.AST | None) -> str:
    """A bare name, or an attribute's own name (``constants.MAPPING``: ``MAPPING``)."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def written_tables(function: ast.AST) -> set[str]:
    """The bare names a function adds keys to: ``NAME[key] = ...``, ``NAME.update(...)``, ``NAME.setdefault(...)``."""
    found = set()
    for node in ast.walk(function):
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets = [node.target] if isinstance(node, ast.AugAssign) else targets
        found.update(_name(t.value) for t in targets if isinstance(t, ast.Subscript))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _WRITING_METHODS:
            found.add(_name(node.func.value))
    return found - {""}


def _iterated(node: ast.AST) -> str:
    """The bare name an iterable expression goes over: ``NAME``, ``NAME.items()``, ``NAME.values()``..."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ITERATING_METHODS:
        return _name(node.func.value)
    return _name(node)


def _membership_tested(function: ast.AST) -> list[ast.expr]:
    """The right sides of ``key in X`` / ``key not in X``: what a key is looked up in."""
    return [
        comparator
        for node in ast.walk(function)
        if isinstance(node, ast.Compare) and all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
        for comparator in node.comparators
    ]


@functools.cache  # a replay meets each parsed function in hundreds of commits
def iterated_names(function: ast.AST) -> frozenset[str]:
    """The bare names a function iterates: in a loop or comprehension, unpacked (``*NAME``), or passed to a call that
    goes over it (``list(NAME)``, ``sorted(NAME.keys())``, ``len(NAME)``), but where that call is only the right side of
    ``in``."""
    found = set()
    # ``key in list(NAME)`` looks a key up: an added key changes its answer only for that key, which only new code
    # asks for.
    membership = {id(comparator) for comparator in _membership_tested(function)}
    for node in ast.walk(function):
        if id(node) in membership:
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            found.add(_iterated(node.iter))
        elif isinstance(node, ast.Starred):
            found.add(_iterated(node.value))
        elif isinstance(node, ast.Call):
            if _name(node.func) in _ITERATING_CALLS:
                found.update(_iterated(arg) for arg in node.args)
            elif isinstance(node.func, ast.Attribute) and node.func.attr in _ITERATING_METHODS:
                found.add(_name(node.func.value))
    return frozenset(found - {""})


def _is_version_call(node: ast.AST) -> bool:
    """``version.parse(...)``, ``Version(...)``, ``parse_version(...)``: a call that makes a version comparable."""
    if not isinstance(node, ast.Call):
        return False
    name = _name(node.func).lower()
    return "version" in name or name == "parse"


@functools.cache
def compared_names(function: ast.AST) -> frozenset[str]:
    """The names (``name`` or ``module.name``) a function compares, tests or parses as a version: inside a comparison,
    as the test of an ``if``, ``while``, conditional expression or ``assert``, or as an argument of a version-parsing
    call (whose result may be compared later). A string only stored or passed on (into a saved config) is not."""
    found: set[str] = set()
    for node in ast.walk(function):
        scopes: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            scopes.append(node)
        elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            scopes.append(node.test)
        elif _is_version_call(node):
            scopes.extend([*node.args, *(k.value for k in node.keywords)])
        for scope in scopes:
            found.update(_spelled(inner) for inner in ast.walk(scope))
    return frozenset(found - {""})


def _spelled(node: ast.AST) -> str:
    """A bare name as itself, an attribute of a bare name as ``obj.attr`` (``transformers.__version__`` is not the
    package's own ``__version__``)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


@functools.cache
def used_beyond_lookups(function: ast.AST) -> frozenset[str]:
    """The bare names (and attributes' own names) a function uses other than to look one key or member up
    (``NAME[key]``, ``NAME.get(key)``, ``NAME.MEMBER``, ``key in NAME``): iterated, returned, passed on, stored. An
    added key can reach such a use (a table passed on may be iterated elsewhere)."""
    looked_up: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            looked_up.add(id(node.value))
        elif isinstance(node, ast.Attribute) and node.attr not in _ITERATING_METHODS:
            looked_up.add(id(node.value))  # NAME.get(key), an enum's NAME.MEMBER
    for comparator in _membership_tested(function):
        looked_up.add(id(comparator))
        if isinstance(comparator, ast.Call) and _name(comparator.func) in _ITERATING_CALLS:
            looked_up.update(id(arg) for arg in comparator.args)  # key in list(NAME)
        elif isinstance(comparator, ast.Call) and isinstance(comparator.func, ast.Attribute):
            looked_up.add(id(comparator.func.value))  # key in NAME.keys()
    found = set()
    for node in ast.walk(function):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) and id(node) not in looked_up:
            found.add(_name(node))
    return frozenset(found - {""})
