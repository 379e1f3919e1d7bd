"""Who reads what, over both versions of a package: the functions that read a name (bare, as an attribute, as a
string), iterate a table or compare a version, the module-level statements that read a name at import, the classes
and their subclasses. What a change selects (:mod:`compile_audit.selection.change_selection`) is read from here."""

from __future__ import annotations

import re
from collections.abc import Iterable

from compile_audit.selection import code_changes, tables
from compile_audit.selection.code_changes import Module

QUOTED_NAME = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)'")  # a name or string in an ``ast.dump``


class Readers:
    """Who reads what, over both versions of the package (a reader on either side counts)."""

    def __init__(
        self,
        modules: Iterable[Module],
        added: Iterable[str] = (),
        base_folders: Iterable[str] | None = None,
        head_folders: Iterable[str] | None = None,
    ) -> None:
        self.added = frozenset(added)  # files only head has
        # Folders base has files in (None: unknown, every folder counts as old).
        self.base_folders = None if base_folders is None else frozenset(base_folders)
        self.head_folders = None if head_folders is None else frozenset(head_folders)
        self.by_iteration: dict[str, set[str]] = {}  # name -> the functions that iterate it (artifacts.tables)
        self.by_comparison: dict[str, set[str]] = {}  # name -> the functions that compare it (artifacts.tables)
        # name -> the functions that use it other than to look one key up (artifacts.tables)
        self.beyond_lookups: dict[str, set[str]] = {}
        self.module_functions: dict[str, list[code_changes.FunctionDef]] = {}  # module-level functions by name
        self.modules: dict[str, Module] = {}
        self.versions: dict[str, list[Module]] = {}  # each parsed version of a file: base's, then head's
        self.by_attribute: dict[str, set[str]] = {}
        self.by_string: dict[str, set[str]] = {}
        self.by_name: dict[str, set[tuple[str, str]]] = {}  # name -> (function key, its module's path)
        self.at_import: dict[str, list[tuple[str, code_changes.Statement]]] = {}
        # base's own name -> (path, class qualname, the base as written there: ``Layer`` or ``lora.Layer``)
        self.subclasses: dict[str, set[tuple[str, str, str]]] = {}
        self._body_words: set[str] | None = None
        self._classes: dict[str, set[tuple[str, str]]] | None = None  # leaf name -> (path, qualname)
        self._under_compile: set[str] | None = None
        for module in modules:
            self.modules.setdefault(module.path, module)
            self.versions.setdefault(module.path, []).append(module)
            for qualname, function in module.functions.items():
                key = f"{module.path}::{qualname}"
                for name in tables.iterated_names(function.node):
                    self.by_iteration.setdefault(name, set()).add(key)
                for name in tables.used_beyond_lookups(function.node):
                    self.beyond_lookups.setdefault(name, set()).add(key)
                for name in tables.compared_names(function.node):
                    self.by_comparison.setdefault(name, set()).add(key)
                if "." not in qualname:
                    self.module_functions.setdefault(qualname, []).append(function)
                for name in module.attributes_read.get(qualname, ()):
                    self.by_attribute.setdefault(name, set()).add(key)
                for name in module.strings_read.get(qualname, ()):
                    self.by_string.setdefault(name, set()).add(key)
                for name in module.names_read.get(qualname, ()):
                    self.by_name.setdefault(name, set()).add((key, module.path))
            for statement in module.statements:
                for name in statement.reads:
                    self.at_import.setdefault(name, []).append((module.path, statement))
            for qualname, bases in module.classes.items():
                for base in bases:
                    self.subclasses.setdefault(base.rpartition(".")[2], set()).add((module.path, qualname, base))

    def _sees(self, reader_path: str, name: str, defined_in: str) -> bool:
        """A bare name read in ``reader_path`` is the one ``defined_in`` binds: the same module, or a from-import
        of it (or of a package above it that re-exports it)."""
        if reader_path == defined_in:
            return True
        module = self.modules.get(reader_path)
        imported = module.imports.get(name) if module else None
        if not imported or imported[1] != name:
            return False
        source, defining = imported[0], code_changes.dotted_module(defined_in)
        # A package above re-exports a name of a module base lacks only if its own (changed) code imports it.
        return defining == source or (
            not self.is_added(defined_in)
            and defining.startswith(source + ".")
            and self._reexports(source, name, defining)
        )

    def _reexports(self, package: str, name: str, defining: str, depth: int = 0) -> bool:
        """Whether the package's ``__init__`` (either version) can bind ``name`` to the one ``defining`` binds: a
        from-import of it from there (or from a package between that does), a star import, a module ``__getattr__``,
        or a version the selection has not parsed."""
        versions = self.versions.get(f"{package.replace('.', '/')}/__init__.py")
        if not versions or depth > 8:
            return True
        for module in versions:
            imported = module.imports.get(name)
            if "*" in module.imports or "__getattr__" in module.functions:
                return True
            if imported and imported[1] == name:
                source = imported[0]
                if source == defining:
                    return True
                below = defining.startswith(source + ".") and source != package
                if below and self._reexports(source, name, defining, depth + 1):
                    return True
        return False

    def of_name(self, name: str, defined_in: str) -> set[str]:
        """Functions that read a module-level name: bare where it is visible; as an attribute or a string
        (``getattr(module, "name")``, ``globals()["name"]``) in its own module, or where their module imports the
        defining module (or a package above it) as an object (``from . import variants``)."""
        found = {key for key, path in self.by_name.get(name, ()) if self._sees(path, name, defined_in)}
        defining = code_changes.dotted_module(defined_in)
        # A module base lacks is reached as an attribute only through a module that imports it by name: code that
        # existed before it could not spell its path (``peft.PeftType`` is peft's binding, not a new tuner's).
        above = not self.is_added(defined_in)
        for key in self.by_attribute.get(name, set()) | self.by_string.get(name, set()):
            path = key.partition("::")[0]
            module = self.modules.get(path)
            if path == defined_in or (
                module
                and any(defining == m or (above and defining.startswith(m + ".")) for m in module.imported_modules())
            ):
                found.add(key)
        return found

    def reached_under_compile(self) -> set[str]:
        """The functions a block taken only under torch.compile may call, and those they may call, by name (a
        module-level function by its name, a method by its own): no eager footprint holds them."""
        if self._under_compile is None:
            by_leaf: dict[str, set[str]] = {}
            for path, versions in self.versions.items():
                for module in versions:
                    for qualname in module.functions:
                        by_leaf.setdefault(qualname.rpartition(".")[2], set()).add(f"{path}::{qualname}")
            pending = {
                name
                for versions in self.versions.values()
                for module in versions
                for function in module.functions.values()
                for name in function.read_under_compile()
            }
            seen: set[str] = set()
            found: set[str] = set()
            while pending:
                name = pending.pop()
                seen.add(name)
                for key in by_leaf.get(name, set()) - found:
                    found.add(key)
                    path, _, qualname = key.partition("::")
                    for module in self.versions.get(path, ()):
                        pending |= set(identifiers_of(module, qualname)) - seen
            self._under_compile = found
        return self._under_compile

    def is_added(self, path: str) -> bool:
        return path in self.added

    def added_functions(self) -> set[str]:
        """The keys of the functions head defines and base does not (in files both have, or only head)."""
        found = set()
        for path, versions in self.versions.items():
            if self.is_added(path):
                found |= {f"{path}::{q}" for q in versions[0].functions}
            elif len(versions) == 2:
                found |= {f"{path}::{q}" for q in versions[1].functions.keys() - versions[0].functions.keys()}
        return found

    def in_removed_folder(self, path: str) -> bool:
        """A file of a subpackage head no longer has (a removed method's tuner package)."""
        return self.head_folders is not None and path.rpartition("/")[0] not in self.head_folders

    def in_new_folder(self, path: str) -> bool:
        """A file of a subpackage base does not have (a new method's tuner package)."""
        folder = path.rpartition("/")[0]
        return self.is_added(path) and self.base_folders is not None and folder not in self.base_folders

    def iterating(self, names: Iterable[str]) -> set[str]:
        """Functions that go over one of these tables (a loop, ``.items()``, ``list(...)``) or use it other than to
        look one key up (return it, pass it on: it may be iterated there), not those that only look up a key."""
        names = list(names)
        return set().union(
            *(self.by_iteration.get(name, set()) | self.beyond_lookups.get(name, set()) for name in names)
        )

    def tables_written_by(self, names: Iterable[str]) -> set[str] | None:
        """The tables the module-level functions of these names add keys to; None when one of them is not this
        package's (its effect is unknown)."""
        written: set[str] = set()
        for name in names:
            for function in self.module_functions.get(name, []):
                written |= tables.written_tables(function.node)
        return written or None

    def spelled_in_a_body(self, name: str) -> bool:
        """Whether a module or class body statement spells the name (``adapter_layer_names = ("lora_A", ...)``, a
        name code may look up by string)."""
        if self._body_words is None:
            self._body_words = {
                word
                for versions in self.versions.values()
                for m in versions
                for s in m.statements
                if s.kind != "import"  # binds a module-level name: no lookup on an instance
                for word in set(QUOTED_NAME.findall(s.dump)) - s.binds  # what it binds it defines, not looks up
            }
        return name in self._body_words

    def plain_class(self, path: str, qualname: str) -> bool:
        """Whether the class and each of the package's classes it derives from is plain: its body binds attributes
        and methods, nothing reads it as data (no decorator such as ``dataclass``, no enum, no metaclass)."""
        return all(
            (module := self.modules.get(p)) is not None and q not in module.special_classes
            for p, q in {(path, qualname), *self.ancestors(path, qualname)}
        )

    def of_attribute(self, name: str) -> set[str]:
        """Functions that read an attribute of that name on anything (a class attribute, a dataclass field)."""
        return self.by_attribute.get(name, set()) | self.by_string.get(name, set())

    def of_attribute_any(self, names: Iterable[str]) -> set[str]:
        return set().union(*(self.of_attribute(name) for name in names))

    def at_import_time(self, name: str, defined_in: str) -> list[tuple[str, code_changes.Statement]]:
        return [(path, s) for path, s in self.at_import.get(name, []) if self._sees(path, name, defined_in)]

    def enclosing_class(self, path: str, qualname: str) -> str | None:
        module = self.modules.get(path)
        owner = qualname.rpartition(".")[0]
        return owner if module and owner in module.classes else None

    def with_subclasses(self, path: str, qualname: str) -> set[tuple[str, str]]:
        """The class and every class that names it (or one of them) as a base, transitively. A base counts where it is
        that class: a bare name in the same module or from-imported from it (``Linear`` in one tuner is not
        another's), a dotted one through a module the subclass's module imports (``lora.Linear``, not
        ``nn.Linear``)."""
        found, pending = {(path, qualname)}, [(path, qualname)]
        while pending:
            defined_in, name = pending.pop()
            name = name.rpartition(".")[2]
            for sub_path, sub_qualname, written in self.subclasses.get(name, ()):
                if not self._is_class(sub_path, written, defined_in):
                    continue
                if (sub_path, sub_qualname) not in found:
                    found.add((sub_path, sub_qualname))
                    pending.append((sub_path, sub_qualname))
        return found

    def ancestors(self, path: str, qualname: str) -> set[tuple[str, str]]:
        """The package's classes the class derives from, transitively (its external bases are not here)."""
        if self._classes is None:
            self._classes = {}
            for module in self.modules.values():
                for name in module.classes:
                    self._classes.setdefault(name.rpartition(".")[2], set()).add((module.path, name))
        found: set[tuple[str, str]] = set()
        pending = [(path, qualname)]
        while pending:
            at, name = pending.pop()
            module = self.modules.get(at)
            for written in module.classes.get(name, ()) if module else ():
                for candidate in self._classes.get(written.rpartition(".")[2], ()):
                    if candidate not in found and self._is_class(at, written, candidate[0]):
                        found.add(candidate)
                        pending.append(candidate)
        return found

    def _is_class(self, reader_path: str, written: str, defined_in: str) -> bool:
        """Whether ``written`` (a base as written in ``reader_path``) can be the class of that name ``defined_in``
        binds. A dotted base whose first name the module does not import counts (it may be bound another way)."""
        qualifier, _, name = written.rpartition(".")
        if not qualifier:
            return self._sees(reader_path, name, defined_in)
        first, _, rest = qualifier.partition(".")
        module = self.modules.get(reader_path)
        imported = module.imports.get(first) if module else None
        if imported is None:
            return True
        source, imported_name = imported
        obj = ".".join(part for part in (source, imported_name, rest) if part)
        defining = code_changes.dotted_module(defined_in)
        return defining == obj or defining.startswith(obj + ".")


def identifiers_of(module: Module, qualname: str) -> frozenset[str]:
    """What a function of the module reads: bare names, attributes and keywords, identifier strings."""
    return (
        module.names_read.get(qualname, frozenset())
        | module.attributes_read.get(qualname, frozenset())
        | module.strings_read.get(qualname, frozenset())
    )
