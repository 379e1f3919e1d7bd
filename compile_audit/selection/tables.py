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


def _holds_constant(node: ast.AST) -> bool:
    """A literal string or number somewhere in ``node`` (``"0.19"``, ``Version("1.0")``, ``(0, 19)``)."""
    return any(
        isinstance(inner, ast.Constant)
        and isinstance(inner.value, (str, int, float))
        and not isinstance(inner.value, bool)
        for inner in ast.walk(node)
    )


def _spelled_in(node: ast.AST) -> set[str]:
    return {_spelled(inner) for inner in ast.walk(node)}


@functools.cache
def compared_names(function: ast.AST) -> frozenset[str]:
    """The names (``name`` or ``module.name``) a function compares, tests or parses as a version, where the result
    can differ between two versions of the package for the same input: compared with a constant (a threshold:
    ``__version__ >= "0.19"``, ``Version(__version__) < Version("1.0")``), tested on its own (``if __version__:``, a
    call in a test), or parsed as a version in a function that compares with a constant (whose parsed value may be
    compared later). A comparison with another run-time value (``f"- PEFT {__version__}" not in lines``: a model
    card the same side wrote) is not: each side saves and loads with its own version, so the two agree on each side.
    A string only stored or passed on (into a saved config) is not either."""
    found: set[str] = set()
    thresholds = False
    compares = [node for node in ast.walk(function) if isinstance(node, ast.Compare)]
    in_compares = {id(inner) for node in compares for inner in ast.walk(node)}
    for node in compares:
        operands = [node.left, *node.comparators]
        for index, operand in enumerate(operands):
            others = operands[:index] + operands[index + 1 :]
            if any(_holds_constant(other) for other in others):
                thresholds = True
                found.update(_spelled_in(operand))
    for node in ast.walk(function):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            found.update(_spelled(inner) for inner in ast.walk(node.test) if id(inner) not in in_compares)
    if thresholds:
        for node in ast.walk(function):
            if _is_version_call(node):
                for argument in [*node.args, *(k.value for k in node.keywords)]:
                    found.update(_spelled_in(argument))
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


def goes_over(node: ast.AST, names: frozenset[str]) -> bool:
    """Whether code (a statement) goes over one of these tables or hands it on: what a key added to it can reach. A
    lookup of one key (``T[key]``, ``T.get(key)``, ``key in T``) reads what it read before."""
    # Uncached: a compound statement's header is a fresh copy on every call.
    return bool(names & (iterated_names.__wrapped__(node) | used_beyond_lookups(node)))
