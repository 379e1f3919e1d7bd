"""What changed in the code a package executes, between two versions of its source, at the grain of functions.

Both versions are parsed and normalised before they are compared, so that only what executes counts:

- docstrings, comments and formatting are gone (they are not in the syntax tree, or are dropped from it);
- annotations of a function's parameters, its return and its local variables are dropped: Python never evaluates
  them at run time. Annotations in a class or module body are kept: they execute (a dataclass field is one);
- an ``if TYPE_CHECKING:`` block at module level is dropped: it never runs.

A function is named as its code object names it (``co_qualname``: ``LoraLayer.update_layer``,
``get_peft_model.<locals>.helper``), so that a change meets the footprints recorded for it
(:mod:`compile_audit.probe.footprint`). Everything else in a module or class body is a *statement*, named by the names
it binds; a statement that binds none (a call run at import) is reported as such, for the selection to widen on.

Each function also gets the identifiers it reads (names, attributes, keyword arguments and identifier-like
strings), so that a change to a constant, a class attribute or a dataclass field can be followed to the functions
that read it. No torch here: the gate calls this before it installs anything heavy.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from compile_audit.selection import tables

# A branch on these runs only under torch.compile: footprints recorded eagerly never see its block run, so a change
# inside it counts for every case that reached the branch.
COMPILE_ONLY_TESTS = frozenset({"is_compiling", "is_dynamo_compiling", "is_exporting"})
# Decorators whose function body runs once per process (the first caller's case records it in its footprint).
PROCESS_CACHES = frozenset({"cache", "lru_cache"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (*_FUNCTIONS, ast.ClassDef)
# Bases that turn a class body into data (members, fields), by their last name
BODY_READING_BASES = frozenset(
    {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "NamedTuple", "TypedDict", "BaseModel", "Structure", "Protocol"}
)
_COMPOUND = (ast.If, ast.Try, ast.With, ast.For, ast.While, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


def _joined(first: ast.FunctionDef | ast.AsyncFunctionDef, second: ast.FunctionDef | ast.AsyncFunctionDef):
    """Two definitions of one name as one function: its body runs either's statements, in the file's order."""
    joined = copy.copy(first)
    joined.body = [*first.body, *second.body]
    joined.decorator_list = [*first.decorator_list, *second.decorator_list]
    return joined


class UnparsableSource(ValueError):
    """A file that does not parse: nothing in it can be mapped."""


@dataclasses.dataclass(frozen=True)
class FunctionDef:
    qualname: str
    dump: str  # the normalised syntax tree: equal dumps, equal behaviour
    cached: bool  # decorated with a process-wide cache
    lineno: int
    node: ast.FunctionDef | ast.AsyncFunctionDef = dataclasses.field(compare=False, repr=False)

    def statement_lines(self) -> list[tuple[int, int]]:
        """Each statement of the body, in pre-order (a nested definition is one statement), as (first, last) line."""
        return [(s.lineno, s.end_lineno or s.lineno) for s in _preorder(self.node.body)]

    def statement_ids(self) -> list[str]:
        """Each statement of the body, in pre-order, named by what it is and where: its own code (a compound
        statement's header) under the headers of the statements enclosing it, numbered among equals. The same
        statement in another version of the function, under the same conditions, has the same name."""
        return [name for name, _ in self._named_statements()]

    def enclosing(self) -> dict[str, tuple[str, ...]]:
        """Each statement's name -> the names of the compound statements whose blocks hold it, nearest first: a
        statement runs only where each of them ran."""
        return dict(self._named_statements())

    def _named_statements(self) -> list[tuple[str, tuple[str, ...]]]:
        named: list[tuple[str, tuple[str, ...]]] = []
        seen: Counter[str] = Counter()

        def walk(body: list[ast.stmt], chain: str, outer: tuple[str, ...]) -> None:
            for statement in body:
                # Source, not ast.dump: the footprints file must name a statement alike on every Python.
                own = ast.unparse(_without_blocks(statement) if _blocks_of(statement) else statement)
                digest = hashlib.sha1(f"{chain}|{own}".encode()).hexdigest()[:10]
                seen[digest] += 1
                name = f"{digest}.{seen[digest]}"
                named.append((name, outer))
                for number, block in enumerate(_blocks_of(statement)):
                    walk(block, hashlib.sha1(f"{chain}|{own}|{number}".encode()).hexdigest(), (name, *outer))

        walk(self.node.body, "", ())
        return named

    def read_under_compile(self) -> frozenset[str]:
        """Every name, attribute and identifier string read in a block taken only under torch.compile (each block
        of a statement testing ``is_compiling()``): eager footprints never see what runs there."""
        found: set[str] = set()

        def walk(body: list[ast.stmt]) -> None:
            for statement in body:
                if _reads_any(getattr(statement, "test", None), COMPILE_ONLY_TESTS):
                    for block in _blocks_of(statement):
                        for inner in block:
                            found.update(*_identifiers(inner))
                else:
                    for block in _blocks_of(statement):
                        walk(block)

        walk(self.node.body)
        return frozenset(found)

    def statements_reading(self, names: frozenset[str] | set[str], going_over: bool = False) -> list[str]:
        """The statements (by name) whose own code reads any of ``names`` (a compound statement: its header); with
        ``going_over``, only those that go over one as a table or hand it on (``tables.goes_over``), not those that
        look one key up. One in a block taken only under torch.compile stands as the branch that holds it: eager
        footprints never run it."""
        wanted = frozenset(names)
        reads = tables.goes_over if going_over else _reads_any
        ids = iter(self.statement_ids())
        found: list[str] = []

        def walk(body: list[ast.stmt], compile_only: str | None) -> None:
            for statement in body:
                name = next(ids)
                blocks = _blocks_of(statement)
                own = _without_blocks(statement) if blocks else statement
                if reads(own, wanted):
                    found.append(compile_only or name)
                inner = compile_only
                if inner is None and _reads_any(getattr(statement, "test", None), COMPILE_ONLY_TESTS):
                    inner = name
                for block in blocks:
                    walk(block, inner)

        walk(self.node.body, None)
        return found


@dataclasses.dataclass(frozen=True)
class Statement:
    scope: str  # "" for the module body, else the class's qualname
    dump: str
    binds: frozenset[str]  # the names it binds; empty for a call run at import
    kind: str  # "import", "class" (a class's header: bases, decorators) or "other"
    text: str  # its first source line, for the summary
    reads: frozenset[str]  # the bare names it reads, at import time
    # The tables it adds keys to (``MAPPING["vit"] = ...``, ``MAPPING.update(...)``: compile_audit.selection.tables)
    writes: frozenset[str] = frozenset()
    version: bool = False  # it binds a version name to a version string (``__version__ = "0.18.0"``)
    # A dataclass field a variant of its method is switched on by, declared off by default:
    # ``use_x: bool = field(default=False, metadata={"is_lora_variant": True})``
    variant_switch: bool = False
    # ``NAME = {key: value, ...}``: the statement with an empty literal, and each entry (key and value dumped)
    table: tuple[str, frozenset[tuple[str, str]]] | None = None


@dataclasses.dataclass(frozen=True)
class Module:
    """One parsed file: its functions, the other statements of its module and class bodies, what each reads."""

    path: str  # package-relative: peft/tuners/lora/layer.py
    functions: Mapping[str, FunctionDef]
    statements: tuple[Statement, ...]
    classes: Mapping[str, tuple[str, ...]]  # class qualname -> its bases, bare or dotted as written
    attributes_read: Mapping[str, frozenset[str]]  # function qualname -> attributes and keyword arguments it reads
    names_read: Mapping[str, frozenset[str]]  # function qualname -> the bare names it reads
    strings_read: Mapping[str, frozenset[str]]  # function qualname -> identifier-like strings (getattr(x, "name"))
    # local name -> (resolved source module, original name); for ``import a.b as c``: c -> ("a.b", "")
    imports: Mapping[str, tuple[str, str]]
    # Classes whose body is more than attributes and methods: decorated (a dataclass), with a metaclass or another
    # keyword, or deriving from a base that reads the body (an enum, a NamedTuple, a TypedDict) or no plain name
    special_classes: frozenset[str] = frozenset()

    def imported_modules(self) -> set[str]:
        """What may be module objects here: each import's module, and each from-import's ``source.name``."""
        return {f"{source}.{name}" if name else source for source, name in self.imports.values()}

    @property
    def dotted(self) -> str:
        return dotted_module(self.path)


_VERSION = re.compile(r"\d+(\.\d+)*([.-]?(a|b|rc)\d+)?([.-]?post\d+)?([.-]?dev\d*)?")


def _binds_a_version(node: ast.stmt) -> bool:
    """``__version__ = "0.18.0.dev0"``: names that say version bound to a version string, and nothing else."""
    if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant):
        return False
    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
    value = node.value.value
    return (
        len(names) == len(node.targets)
        and all("version" in name.lower() for name in names)
        and isinstance(value, str)
        and _VERSION.fullmatch(value) is not None
    )


VARIANT_METADATA = "is_lora_variant"  # how PEFT's configs declare a field that switches a variant on


def _declares_a_variant_switched_off(node: ast.stmt) -> bool:
    """``name: T = field(default=None|False, metadata={..., "is_lora_variant": True})``."""
    value = node.value if isinstance(node, ast.AnnAssign) else None
    if not isinstance(value, ast.Call) or getattr(value.func, "id", getattr(value.func, "attr", "")) != "field":
        return False
    keywords = {keyword.arg: keyword.value for keyword in value.keywords}
    default, metadata = keywords.get("default"), keywords.get("metadata")
    off = isinstance(default, ast.Constant) and default.value in (None, False)
    declared = isinstance(metadata, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == VARIANT_METADATA and isinstance(v, ast.Constant) and v.value is True
        for k, v in zip(metadata.keys, metadata.values, strict=True)
    )
    return off and declared


def variant_entries_added(base: FunctionDef, head: FunctionDef, switches: frozenset[str]) -> tuple[str, ...]:
    """The keys of the entries ``head`` adds to dict literals of ``base`` when that is all that differs, each key a
    sorted tuple of strings naming at least one of ``switches`` and each value a plain reference
    (``("use_x",): variants.XVariant``, as a layer's ``lora_variants`` maps them); else ()."""
    if head.dump != _dump(head.node) or base.dump != _dump(base.node):  # a property with a setter: both at once
        return ()
    stripped = copy.deepcopy(head.node)
    added: list[str] = []
    for node in ast.walk(stripped):
        if not isinstance(node, ast.Dict):
            continue
        kept = []
        for key, value in zip(node.keys, node.values, strict=True):
            names = _string_tuple(key)
            plain = _plain_reference(value)  # evaluated on every call, by every case: it must do nothing else
            if plain and names is not None and names == tuple(sorted(names)) and set(names) & switches:
                added.append(ast.unparse(key))
            else:
                kept.append((key, value))
        node.keys, node.values = [k for k, _ in kept], [v for _, v in kept]
    return tuple(added) if added and _dump(stripped) == base.dump else ()


def _plain_reference(node: ast.expr) -> bool:
    """A constant, a name or a dotted name (``variants.KasaLinearVariant``): evaluating it calls nothing."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name | ast.Constant)


def _string_tuple(node: ast.expr | None) -> tuple[str, ...] | None:
    if not isinstance(node, ast.Tuple) or not node.elts:
        return None
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return None
    return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]


def dotted_module(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parse_module(path: str, source: str) -> Module:
    """``path`` is package-relative (``peft/utils/other.py``); raises :class:`UnparsableSource`."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as error:
        raise UnparsableSource(f"{path}: does not parse: {error}") from None
    tree = _Normaliser().visit(tree)
    builder = _ModuleBuilder(path, source)
    builder.scope(tree.body, prefix="", scope="")
    return Module(
        path=path,
        functions=builder.functions,
        statements=tuple(builder.statements),
        classes=dict(builder.classes),
        attributes_read={name: frozenset(ids[0]) for name, ids in builder.identifiers.items()},
        names_read={name: frozenset(ids[1]) for name, ids in builder.identifiers.items()},
        strings_read={name: frozenset(ids[2]) for name, ids in builder.identifiers.items()},
        imports=_from_imports(tree, path),
        special_classes=frozenset(builder.special_classes),
    )


# ----------------------------------------------------------------------------- normalisation


def _no_constants(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module or class body without its constant expression statements: docstrings, the string after an attribute
    that documents it, ``...``; evaluating a constant does nothing."""
    return [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body


class _Normaliser(ast.NodeTransformer):
    """Drops what never executes: docstrings (and any constant expression statement of a module or class body),
    annotations inside functions, ``if TYPE_CHECKING:`` at module level."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        node.body = [s for s in _no_constants(node.body) if not _is_type_checking_only(s)]
        for statement in node.body:
            if isinstance(statement, ast.If) and _is_type_checking(statement.test):
                statement.body = [ast.Pass()]
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.body = _no_constants(node.body) or [_pass(node)]
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign | ast.Assign) and isinstance(statement.value, ast.Call):
                _drop_help_text(statement.value)
        self.generic_visit(node)
        return node

    def _function(self, node):
        node.body = _strip_docstring(node.body)
        node.returns = None
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg):
            if arg is not None:
                arg.annotation = None
                arg.type_comment = None
        node.type_comment = None
        node.body = [s for s in (_local_annotation(s) for s in node.body) if s is not None] or [_pass(node)]
        _LocalAnnotations().visit_body(node.body)
        self.generic_visit(node)
        return node

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function


def _drop_help_text(call: ast.Call) -> None:
    """A dataclass field's ``metadata={"help": "..."}`` is its documentation (argument parsers print it)."""
    for keyword in call.keywords:
        if keyword.arg == "metadata" and isinstance(keyword.value, ast.Dict):
            for index, key in enumerate(keyword.value.keys):
                if isinstance(key, ast.Constant) and key.value == "help":
                    keyword.value.values[index] = ast.Constant("")


def _local_annotation(statement: ast.stmt) -> ast.stmt | None:
    """A function's ``x: T = v`` is ``x = v``; a bare ``x: T`` does nothing."""
    if not isinstance(statement, ast.AnnAssign):
        return statement
    if statement.value is None:
        return None
    return ast.copy_location(ast.Assign(targets=[statement.target], value=statement.value), statement)


def _pass(at: ast.AST) -> ast.Pass:
    """A body left empty by the normalisation holds ``pass``, where the statements it replaces were."""
    return ast.copy_location(ast.Pass(), at)


class _LocalAnnotations(ast.NodeTransformer):
    """Annotated assignments nested in a function's compound statements (not in nested functions or classes)."""

    def visit_body(self, body: list[ast.stmt]) -> None:
        for statement in body:
            if not isinstance(statement, _DEFINITIONS):
                self.visit(statement)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                kept = [s for s in (_local_annotation(s) for s in block) if s is not None] or [_pass(block[0])]
                setattr(node, field, kept)
                self.visit_body(kept)
        for handler in getattr(node, "handlers", []):
            self.generic_visit(handler)
        for case in getattr(node, "cases", []):
            self.generic_visit(case)
        return node


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_type_checking_only(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.If) and _is_type_checking(statement.test) and not statement.orelse


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


# ----------------------------------------------------------------------------- functions, statements, reads


class _ModuleBuilder:
    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.lines = source.splitlines()
        self.functions: dict[str, FunctionDef] = {}
        self.statements: list[Statement] = []
        self.classes: dict[str, tuple[str, ...]] = {}
        self.special_classes: set[str] = set()
        self.identifiers: dict[str, tuple[set[str], set[str], set[str]]] = {}

    def scope(self, body: list[ast.stmt], prefix: str, scope: str) -> None:
        """A module or class body: its definitions, and every other statement with the names it binds."""
        for statement in body:
            if isinstance(statement, _FUNCTIONS):
                self.function(statement, f"{prefix}{statement.name}")
            elif isinstance(statement, ast.ClassDef):
                self.cls(statement, f"{prefix}{statement.name}", scope)
            elif isinstance(statement, ast.Import | ast.ImportFrom) and len(statement.names) > 1:
                # One name at a time: adding a name to an import changes that name only.
                for alias in statement.names:
                    single = copy.copy(statement)
                    single.names = [alias]
                    self.statement(single, scope)
            elif isinstance(statement, _COMPOUND) and _holds_definitions(statement):
                # ``try: from x import f`` / ``except ImportError: def f(...)``: the definitions are the scope's own.
                self.scope(list(_definitions_in(statement)), prefix, scope)
                self.statement(_without_definitions(statement), scope, extra_binds=_defined_names(statement))
            else:
                self.statement(statement, scope)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> None:
        earlier = self.functions.get(qualname)
        if earlier is None:
            self.functions[qualname] = FunctionDef(qualname, _dump(node), _is_cached(node), node.lineno, node)
        else:
            # A second definition under the same name (a property's setter or deleter, a redefinition): its code has
            # the same co_qualname, so the footprints hold both as one function, and so does the comparison.
            joined = _joined(earlier.node, node)
            dump = f"{earlier.dump}\n{_dump(node)}"
            self.functions[qualname] = FunctionDef(qualname, dump, _is_cached(joined), earlier.lineno, joined)
        self.identifiers[qualname] = _identifiers(self.functions[qualname].node)
        for child in _nested_definitions(node):
            if isinstance(child, _FUNCTIONS):
                self.function(child, f"{qualname}.<locals>.{child.name}")
            else:
                self.class_in_function(child, f"{qualname}.<locals>.{child.name}")

    def class_in_function(self, node: ast.ClassDef, qualname: str) -> None:
        self.classes[qualname] = _base_names(node)
        for item in node.body:
            if isinstance(item, _FUNCTIONS):
                self.function(item, f"{qualname}.{item.name}")

    def cls(self, node: ast.ClassDef, qualname: str, scope: str) -> None:
        self.classes[qualname] = _base_names(node)
        written = [b for b in node.bases if not (isinstance(b, ast.Name | ast.Attribute) and _is_dotted(b))]
        reading = any(name.rpartition(".")[2] in BODY_READING_BASES for name in self.classes[qualname])
        if node.decorator_list or node.keywords or written or reading:
            self.special_classes.add(qualname)
        header = copy.copy(node)
        header.body = []
        self.statement(header, scope, text_node=node)
        self.scope(node.body, prefix=f"{qualname}.", scope=qualname)

    def statement(
        self, node: ast.stmt, scope: str, extra_binds: Iterable[str] = (), text_node: ast.stmt | None = None
    ) -> None:
        if isinstance(node, ast.Pass):
            return
        _, names, _ = _identifiers(node)
        line = (text_node or node).lineno
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else type(node).__name__
        self.statements.append(
            Statement(
                scope=scope,
                dump=_dump(node),
                binds=frozenset(_bound_names(node)) | frozenset(extra_binds),
                kind="import" if isinstance(node, ast.Import | ast.ImportFrom) else "class" if text_node else "other",
                text=text,
                reads=frozenset(names),
                writes=frozenset(tables.written_tables(node)),
                version=_binds_a_version(node),
                variant_switch=_declares_a_variant_switched_off(node),
                table=_table_literal(node),
            )
        )


def _table_literal(node: ast.stmt) -> tuple[str, frozenset[tuple[str, str]]] | None:
    """A name bound to a dict literal (no ``**``): the statement with the literal emptied, and its entries."""
    if not isinstance(node, ast.Assign | ast.AnnAssign) or not isinstance(node.value, ast.Dict):
        return None
    if any(key is None for key in node.value.keys):
        return None
    entries = frozenset((_dump(k), _dump(v)) for k, v in zip(node.value.keys, node.value.values, strict=True))
    emptied = copy.copy(node)
    emptied.value = ast.Dict(keys=[], values=[])
    return _dump(emptied), entries


def _is_cached(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in PROCESS_CACHES:
            return True
    return False


def _holds_definitions(node: ast.stmt) -> bool:
    return any(True for _ in _definitions_in(node))


def _blocks(node: ast.stmt) -> Iterator[list[ast.stmt]]:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list):
            yield block
    for handler in getattr(node, "handlers", []):
        yield handler.body


def _definitions_in(node: ast.stmt) -> Iterator[ast.stmt]:
    for block in _blocks(node):
        for statement in block:
            if isinstance(statement, _DEFINITIONS):
                yield statement
            elif isinstance(statement, _COMPOUND):
                yield from _definitions_in(statement)


def _defined_names(node: ast.stmt) -> set[str]:
    return {definition.name for definition in _definitions_in(node)}  # type: ignore[attr-defined]


def _without_definitions(node: ast.stmt) -> ast.stmt:
    """The compound statement with each definition in it replaced by a marker of its name."""
    node = copy.deepcopy(node)
    stack = [node]
    while stack:
        current = stack.pop()
        for block in _blocks(current):
            for index, statement in enumerate(block):
                if isinstance(statement, _DEFINITIONS):
                    block[index] = ast.Expr(ast.Constant(f"def {statement.name}"))
                elif isinstance(statement, _COMPOUND):
                    stack.append(statement)
    return node


def _nested_definitions(node: ast.AST) -> Iterator[ast.stmt]:
    """The functions and classes defined directly inside a function (not inside those)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, _DEFINITIONS):
            yield child
        else:
            stack.extend(ast.iter_child_nodes(child))


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, _DEFINITIONS):
        return {node.name}
    names = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store | ast.Del):
            names.add(child.id)
        elif isinstance(child, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in child.names}
        elif isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Store | ast.Del):
            names.add(child.attr)  # a module-level ``obj.attr = v`` sets attr for whoever reads it
    return names


def _base_names(node: ast.ClassDef) -> tuple[str, ...]:
    """A class's bases as written: a bare name (``LoraLayer``) or a dotted one (``lora.Linear``, ``nn.Module``)."""
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name | ast.Attribute) and _is_dotted(base):
            names.append(ast.unparse(base))
    return tuple(names)


def _is_dotted(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _identifiers(node: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """What a node reads: attributes and keyword arguments, bare names, and identifier-like strings (``getattr(x,
    "name")``)."""
    attributes, names, strings = set(), set(), set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
            names.add(child.id)
        elif isinstance(child, ast.Attribute):
            attributes.add(child.attr)
        elif isinstance(child, ast.keyword) and child.arg:
            attributes.add(child.arg)
        elif isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value.isidentifier():
            strings.add(child.value)
    return attributes, names, strings


def _from_imports(tree: ast.Module, path: str) -> dict[str, tuple[str, str]]:
    package = dotted_module(path) if path.endswith("__init__.py") else dotted_module(path).rpartition(".")[0]
    imports = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                imports[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:  # ``import a.b as c``: c is the module a.b; ``import a.b``: a is a
                module = alias.name if alias.asname else alias.name.split(".")[0]
                imports[alias.asname or module] = (module, "")
    return imports


# ----------------------------------------------------------------------------- comparing two versions


@dataclasses.dataclass(frozen=True)
class FunctionChange:
    path: str
    qualname: str
    kind: str  # "changed", "added" or "removed"
    cached: bool  # process-wide cache on either side
    base: FunctionDef | None = dataclasses.field(default=None, compare=False, repr=False)
    head: FunctionDef | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class StatementChange:
    path: str
    statement: Statement
    kind: str  # "added" or "removed" (an edited statement is one of each)


@dataclasses.dataclass(frozen=True)
class ModuleChanges:
    path: str
    functions: tuple[FunctionChange, ...]
    statements: tuple[StatementChange, ...]

    @property
    def executes_differently(self) -> bool:
        return bool(self.functions or self.statements)


def compare(base: Module | None, head: Module | None) -> ModuleChanges:
    """What differs in executed code between two versions of one file (None: the file is absent on that side)."""
    path = (head or base).path  # type: ignore[union-attr]
    base_functions = base.functions if base else {}
    head_functions = head.functions if head else {}
    functions = []
    for name in sorted(base_functions.keys() | head_functions.keys()):
        old, new = base_functions.get(name), head_functions.get(name)
        if old is not None and new is not None and old.dump == new.dump:
            continue
        kind = "added" if old is None else "removed" if new is None else "changed"
        cached = bool((old and old.cached) or (new and new.cached))
        functions.append(FunctionChange(path, name, kind, cached, old, new))
    old_statements = Counter(s.dump for s in (base.statements if base else ()))
    new_statements = Counter(s.dump for s in (head.statements if head else ()))
    by_dump = {s.dump: s for s in (*(base.statements if base else ()), *(head.statements if head else ()))}
    statements = [
        StatementChange(path, by_dump[dump], "removed") for dump in sorted((old_statements - new_statements).elements())
    ] + [StatementChange(path, by_dump[dump], "added") for dump in sorted((new_statements - old_statements).elements())]
    # The body of a class that only one side has is that class's header change: its header stands for it.
    both = (base.classes.keys() if base else set()) & (head.classes.keys() if head else set())
    statements = [c for c in statements if not c.statement.scope or c.statement.scope in both]
    return ModuleChanges(path, tuple(functions), tuple(statements))


# ----------------------------------------------------------------------------- inside a changed function


def _blocks_of(node: ast.stmt) -> list[list[ast.stmt]]:
    """A compound statement's blocks, in order (not those of a nested definition)."""
    if isinstance(node, _DEFINITIONS):
        return []
    blocks = [getattr(node, field) for field in ("body", "orelse") if isinstance(getattr(node, field, None), list)]
    blocks += [handler.body for handler in getattr(node, "handlers", [])]
    blocks += [case.body for case in getattr(node, "cases", [])]
    if isinstance(getattr(node, "finalbody", None), list):
        blocks.append(node.finalbody)
    return blocks


def _preorder(body: list[ast.stmt]) -> list[ast.stmt]:
    found = []
    for statement in body:
        found.append(statement)
        for block in _blocks_of(statement):
            found.extend(_preorder(block))
    return found


def _header(node: ast.stmt) -> str:
    """A compound statement without its blocks: equal headers, the same test, target or handlers."""
    return _dump(_without_blocks(node))


def _without_blocks(node: ast.stmt) -> ast.stmt:
    bare = copy.copy(node)
    for field in ("body", "orelse", "finalbody"):
        if isinstance(getattr(bare, field, None), list):
            setattr(bare, field, [])
    if hasattr(bare, "handlers"):
        bare.handlers = [ast.ExceptHandler(h.type, h.name, []) for h in node.handlers]  # type: ignore[attr-defined]
    if hasattr(bare, "cases"):
        bare.cases = [ast.match_case(c.pattern, c.guard, []) for c in node.cases]  # type: ignore[attr-defined]
    return bare


def changed_statements(base: FunctionDef, head: FunctionDef) -> list[int] | None:
    """The pre-order indexes of ``base``'s statements that a case must have run to run what changed in ``head``:
    each statement edited or removed, and, for one inserted, the statement before it (or the compound statement
    whose block it opens). None when the change is at the function's entry (its signature, decorators, or the
    first statement of its body): every case that ran the function ran it."""
    old, new = base.node, head.node
    if _signature(old) != _signature(new):
        return None
    index = {id(statement): number for number, statement in enumerate(_preorder(old.body))}
    found = _diff_block(old.body, new.body, None, index)
    return None if found is None else sorted(found)


def _reads_any(node: ast.AST | None, names: frozenset[str]) -> bool:
    if node is None:
        return False
    attributes, bare, strings = _identifiers(node)
    return bool((attributes | bare | strings) & names)


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return _dump(ast.FunctionDef(name=node.name, args=node.args, body=[], decorator_list=node.decorator_list))


def _diff_block(
    old: list[ast.stmt], new: list[ast.stmt], parent: ast.stmt | None, index: dict[int, int]
) -> set[int] | None:
    matcher = difflib.SequenceMatcher(None, [_dump(s) for s in old], [_dump(s) for s in new], autojunk=False)
    found: set[int] = set()
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = list(zip(old[i1:i2], new[j1:j2], strict=False))
        for before, after in pairs:
            inner = _diff_compound(before, after, index)
            if inner is None:
                found.add(index[id(before)])
            else:
                found |= inner
        found |= {index[id(s)] for s in old[i1 + len(pairs) : i2]}  # removed
        if j2 - j1 > i2 - i1:  # inserted: whoever ran the statement before it, or opened its block
            anchor = old[i1 + len(pairs) - 1] if i1 + len(pairs) > 0 else parent
            if anchor is None:
                return None
            found.add(index[id(anchor)])
    return found


def _diff_compound(old: ast.stmt, new: ast.stmt, index: dict[int, int]) -> set[int] | None:
    """What changed inside two versions of one compound statement with the same header; None: not such a pair."""
    if type(old) is not type(new) or not _blocks_of(old) or _header(old) != _header(new):
        return None
    if _reads_any(getattr(old, "test", None), COMPILE_ONLY_TESTS):
        return None
    old_blocks, new_blocks = _blocks_of(old), _blocks_of(new)
    if len(old_blocks) != len(new_blocks):
        return None
    found: set[int] = set()
    for before, after in zip(old_blocks, new_blocks, strict=True):
        inner = _diff_block(before, after, old, index)
        if inner is None:
            return None
        found |= inner
    return found
