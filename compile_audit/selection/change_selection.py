"""The cases a change to the package under test selects: those that ran a function whose executed code changed.

A change is read from two versions of the package's source (:mod:`compile_audit.selection.code_changes`: docstrings,
comments, formatting and annotations that never execute do not count), and met with the committed footprints
(:mod:`compile_audit.selection.footprints_file`). Each change selects, and says why:

- a changed or removed function: the cases that ran it. A function with a process-wide cache (``functools.cache``)
  runs its body in the first case only, so its callers' cases join; so do they for a function that no recorded case
  ran (a branch taken only under ``torch.compile``, say), and a function never run that module-level code reads runs
  at import: every case;
- an added function: a method, the cases that ran its class and a statement naming it or the ancestor's method it
  overrides, or every case of its class where code outside the package may look it up (a word of an installed
  library's or the suite's source: :mod:`compile_audit.selection.outside_names`), Python calls it (``__len__``) or
  a class or module body spells it; a module-level function, the cases that ran a statement that reads its name (a
  module's ``__getattr__``, added to a module that existed: every case);
- a module-level name (a constant, an import): the cases that ran a statement that reads it, following names that
  other module-level or class-body code computes from it;
- a class-body statement (a dataclass field, a class attribute) or a class's header (bases, decorators): the cases
  that ran the class, and those that ran a function that reads the name; when nothing of it ran, those that ran its
  file, then its folder;
- what cannot be mapped widens to every case: a file that does not parse, a statement run at import that binds no
  name (a registration call), a function no case ran that module-level code reads.

    python -m compile_audit.selection.change_selection record REPORT... --output tests/footprints.json
    python -m compile_audit.selection.change_selection select BASE_PACKAGE_DIR HEAD_PACKAGE_DIR --footprints FILE
    python -m compile_audit.selection.history_replay --repo PEFT_CLONE --last 400 --json out/replay.json
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from compile_audit.selection import code_changes, footprints_record
from compile_audit.selection.code_changes import (
    FunctionChange,
    Module,
    ModuleChanges,
    StatementChange,
    UnparsableSource,
)
from compile_audit.selection.footprints_file import Footprints, FootprintsError, load
from compile_audit.selection.outside_names import spelled_outside
from compile_audit.selection.readers import QUOTED_NAME, Readers, identifiers_of

EVERYTHING = None  # a pick that selects every case
CALLER_DEPTH = 3  # how far up the callers of a function that no case ran the selection looks
# Module-level functions Python calls without naming them: one added to a module that existed answers what used to
# raise (``hasattr``); in a new module, only new code can reach it, and that code is selected on its own
MODULE_HOOKS = frozenset({"__getattr__", "__dir__"})


@dataclasses.dataclass(frozen=True)
class Selection:
    everything: bool  # every case (the full matrix)
    cases: tuple[str, ...]  # when not everything: the cases the change selects
    reasons: tuple[str, ...]  # one line per change: what it selects and why
    changed_files: tuple[str, ...] = ()  # files whose executed code differs
    # Code in files base does not have: the cases no footprint can hold (a new method's) run too; the zoo names them.
    new_cases: bool = False
    new_methods: int = 0  # registration calls in subpackages base lacks: the methods a change adds
    # Of ``cases``, those the change reaches only through code they ran while building their model: an equal build
    # on both sides (``compile_audit.probe.builds``) compiles the same, and deselects them.
    build_only: tuple[str, ...] = ()
    # The tables (by their own name) the change adds keys to: a build that differs only by those keys builds the same
    # (compile_audit.selection.builds_file.only_gained); the code going over them is selected on its own.
    tables_gaining: tuple[str, ...] = ()
    # Module-level names the change's own statements bind anew (``module.NAME``), and those computed from them at
    # import: their readers are selected on their own, so a build that differs by their values alone builds the same.
    names_rebound: tuple[str, ...] = ()
    # The changes no recorded case runs (and no new case stands for): code the gate cannot judge, each named.
    unjudged: tuple[str, ...] = ()
    # Each change's pick, in the order of ``reasons``: which rule selected which cases (``scripts/gate --why``).
    decisions: tuple[Decision, ...] = ()

    @property
    def nothing_executes_differently(self) -> bool:
        return not self.everything and not self.changed_files


# ----------------------------------------------------------------------------- the rules


# Every rule the selection decides by, by its stable id: what it covers. Each ``Pick`` names the rule that made it;
# selection.md, ``scripts/gate --why`` and the self-tests speak of rules by these ids
# (tests/selftest/test_selection_rules.py: each has a self-test and a recall plant shape).
RULES: dict[str, str] = {
    "unparsable-file": "a changed file that does not parse: every case",
    "added-module-hook": "a module __getattr__/__dir__ added to a module that existed: every case",
    "added-function": "a module-level function added: the cases that ran a function naming it",
    "added-method": "a method added to a class: the cases of the class that ran a statement naming it (or an"
    " ancestor's method it overrides); every case of the class where code outside the package may look it up",
    "run-at-import": "a function importing the package runs: through the module-level statements calling it",
    "cached-function": "a function with a process-wide cache: the cases that ran it or its callers",
    "changed-statements": "a changed function: the cases that ran its changed statements",
    "ran-function": "a removed or changed function the statement footprints cannot narrow: the cases that ran it",
    "read-at-import": "a function no case ran that module-level code reads: every case",
    "unrun-function": "a function no recorded case ran: the cases that ran its callers (or the ranks that may)",
    "class-attribute": "an attribute of a plain class: the cases of the class that ran a statement naming it",
    "class-statement": "a class statement: the cases that ran the class or a subclass (or code naming it)",
    "class-body": "a class-body statement of a dataclass, enum or the like: the cases that ran the class",
    "variant-switch-added": "a config field added that switches a new variant on, off by default (is_lora_variant):"
    " existing configs request nothing of it, so the new variant's cases run (new cases) and no recorded one",
    "variant-entry-added": "entries added to a dict literal keyed by tuples of variant switches (a layer's"
    " lora_variants), each needing a switch the change adds off by default: no recorded config requests it, and"
    " the new variant's cases evaluate the same literal",
    "version-string": "a version string: the cases that ran code comparing it with a constant",
    "module-name-readers": "a module-level name: the cases that ran a statement reading it (or a name computed"
    " from it)",
    "table-gains-entries": "a dict literal gaining entries, none changed: the cases that ran code iterating it",
    "new-method-table-entry": "a table entry naming a class of a subpackage base lacks: the new method's cases",
    "table-key-set": "a statement setting a key of a table: added, the code iterating it; removed, its readers",
    "new-method-registration": "a registration call in a subpackage base lacks: the new cases, and the code"
    " iterating the tables it writes",
    "removed-subpackage": "a registration call in a subpackage head removes: its cases and the code iterating"
    " the tables",
    "import-time-effect": "a statement run at import that binds no name: its subpackage's cases, or every case",
}


# The rules that pick code a change adds: where a new variant's cases run, they run that code.
_NEW_CODE_RULES = frozenset({"added-function", "added-method", "class-statement"})


@dataclasses.dataclass(frozen=True)
class Decision:
    """One change's pick as the selection reports it: the rule, why, the cases it selected (None: every case) and,
    of them, those it reached only while building their model."""

    rule: str
    reason: str
    cases: tuple[str, ...] | None
    building: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Pick:
    cases: frozenset[str] | None  # None: every case
    reason: str
    new_cases: bool = False  # the cases no footprint holds run too
    new_method: str = ""  # with new_cases: the new subpackage (its method), counted once however many picks name it
    gains: frozenset[str] = frozenset()  # tables the change adds keys to, whose code going over them it selects
    building: frozenset[str] = frozenset()  # of ``cases``, those that ran the changed code only while building
    # No case selected because none can differ (a version no code compares with a constant), not because none ran
    # the code: nothing left unjudged.
    settled: bool = False
    rule: str = ""  # its id in RULES

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"a pick names no rule of RULES: {self.rule!r} ({self.reason})")

    def decision(self) -> Decision:
        cases = None if self.cases is EVERYTHING else tuple(sorted(self.cases))
        return Decision(self.rule, self.reason, cases, tuple(sorted(self.building)))


def _count(cases: frozenset[str]) -> str:
    return f"{len(cases)} case(s)"


def _names(names: Iterable[str]) -> str:
    shown = sorted(names)
    return ", ".join(shown[:4]) + (", ..." if len(shown) > 4 else "")


class _Rules:
    def __init__(
        self,
        footprints: Footprints,
        readers: Readers,
        changed: Iterable[str] = (),
        outside: frozenset[str] | None = None,
    ) -> None:
        self.footprints, self.readers = footprints, readers
        self.changed = frozenset(changed)  # functions (keys) whose changed statements their own pick selects
        self.outside = outside  # the words code outside the package spells (None: unknown)
        self.edited_statements: set[int] = set()  # ids of the statements the change adds or removes
        self.recorded = footprints  # as recorded: with the functions the change adds, where a replay's file has them
        self.new_switches: frozenset[str] = frozenset()  # variant switches (config fields) the change adds, off

    def cases_of(self, keys: Iterable[str]) -> frozenset[str]:
        return frozenset().union(*(self.footprints.ran(key) for key in keys))

    def cases_reading(self, keys: Iterable[str], names: Iterable[str], going_over: bool = False) -> frozenset[str]:
        """The cases that ran a statement of these functions that reads one of ``names`` (``going_over``: that goes
        over one as a table or hands it on), in either version of each function (the whole function where only its
        signature or decorators read them). A statement that only one version of a changed function has is that
        function's own change, which its own pick selects."""
        names = frozenset(names)
        cases: set[str] = set()
        for key in keys:
            path, _, qualname = key.partition("::")
            versions = [m for m in self.readers.versions.get(path, ()) if qualname in m.functions]
            if not versions:  # read by name only (a string): the whole function
                cases |= self.footprints.ran(key)
                continue
            found: set[str] = set()
            enclosing: dict[str, tuple[str, ...]] = {}
            named: list[set[str]] = []  # each version's statement names
            whole = False
            for module in versions:
                function = module.functions[qualname]
                around = function.enclosing()
                named.append(set(around))
                statements = function.statements_reading(names, going_over)
                if statements:
                    found.update(statements)
                    enclosing.update(around)
                elif names & identifiers_of(module, qualname):
                    whole = True
            if whole:
                cases |= self.footprints.ran(key)
                continue
            if key in self.changed and len(versions) == 2:
                found &= named[0] & named[1]
            if found:
                cases |= self.footprints.ran_statements(key, sorted(found), enclosing)[0]
        return frozenset(cases)

    def class_cases(self, path: str, qualname: str) -> frozenset[str]:
        """The cases that ran a function of the class or of a subclass: those that can hold an instance of it."""
        return frozenset().union(
            *(self.footprints.ran_any(f"{p}::{q}.") for p, q in self.readers.with_subclasses(path, qualname))
        )

    def unrun(self, path: str, qualname: str, depth: int = 0) -> frozenset[str]:
        """Where a function that no recorded case ran could run: a method, in the cases that ran its class; a
        module-level function, in those that ran a function reading its name (further up while none ran)."""
        owner = self.readers.enclosing_class(path, qualname)
        if owner is not None:  # where its class can be, a statement that names it ran
            leaf = qualname.rpartition(".")[2]
            return self.cases_reading(self.readers.of_attribute(leaf), {leaf}) & self.class_cases(path, owner)
        if "<locals>" in qualname:  # runs where the function it is defined in runs
            return self.footprints.ran(f"{path}::{qualname.split('.<locals>.')[0]}")
        if depth >= CALLER_DEPTH:
            return frozenset()
        callers = self.readers.of_name(qualname, path)
        cases = self.cases_reading(callers, {qualname})
        for caller in callers:
            if not self.footprints.ran(caller):
                above = self.unrun(*caller.split("::", 1), depth=depth + 1)
                cases |= above & self.footprints.elsewhere if self.known_unrun(caller) else above
        return cases

    def function(self, change: FunctionChange) -> Pick:
        label = f"{change.path}::{change.qualname}"
        owner = self.readers.enclosing_class(change.path, change.qualname)
        if change.kind == "added":
            if owner is not None:
                return self.added_method(label, change.path, owner, change.qualname.rpartition(".")[2])
            if change.qualname in MODULE_HOOKS and len(self.readers.versions.get(change.path, ())) == 2:
                return Pick(
                    EVERYTHING,
                    f"{label}: added: Python calls it for any missing attribute of the module",
                    rule="added-module-hook",
                )
            cases = self.unrun(change.path, change.qualname)
            pick = Pick(
                cases, f"{label}: added: the {_count(cases)} that ran a function that names it", rule="added-function"
            )
            callers = self.readers.of_name(change.qualname, change.path) if "<locals>" not in change.qualname else ()
            if callers and all(self.footprints.ran(caller) for caller in callers):  # no caller's callers joined
                return self.marked(pick, self.read_only_building(callers, {change.qualname}, cases))
            return pick
        ran = self.footprints.ran(label)
        if label in self.footprints.at_import:
            return self.run_at_import(change, label, ran)
        if change.cached:
            cases = ran | self.unrun(change.path, change.qualname)
            return Pick(
                cases,
                f"{label}: {change.kind}, cached once per process: the {_count(cases)} that ran it or its callers",
                rule="cached-function",
            )
        both_sides = change.kind == "changed" and change.base is not None and change.head is not None
        if both_sides:
            keys = code_changes.variant_entries_added(change.base, change.head, self.new_switches)
            if keys:
                return Pick(
                    frozenset(),
                    f"{label}: adds {', '.join(keys)} only, each needing a variant switch the change adds, off by"
                    " default: no recorded config requests it; the new variant's cases evaluate it",
                    new_cases=True,
                    settled=True,
                    rule="variant-entry-added",
                )
        if ran and both_sides:
            return self.building(self.changed_statements(change, label, ran), label)
        if ran:
            return self.building(Pick(ran, f"{label}: {change.kind}: run by {_count(ran)}", rule="ran-function"), label)
        at_import = self.readers.at_import_time(change.qualname, change.path) if owner is None else []
        if at_import and not self.known_unrun(label):  # else, known not to run at import
            path, statement = at_import[0]
            return Pick(
                EVERYTHING,
                f"{label}: {change.kind}, run by no recorded case, read at import by `{statement.text}` ({path}):"
                " every case",
                rule="read-at-import",
            )
        cases = self.unrun(change.path, change.qualname)
        if self.known_unrun(label):
            cases &= self.footprints.elsewhere
            return Pick(
                cases,
                f"{label}: {change.kind}, run by no recorded case nor at import, though the footprints know it: the"
                f" {_count(cases)} that could reach it in processes of their own (ranks), which no footprint holds",
                rule="unrun-function",
            )
        where = f"ran {owner} (or a subclass) and code that names it" if owner else "ran code that names it"
        return Pick(
            cases,
            f"{label}: {change.kind}, run by no recorded case: the {_count(cases)} that {where}",
            rule="unrun-function",
        )

    def known_unrun(self, key: str) -> bool:
        """The footprints know no case and no import ran the function, and nothing hides it from them: no block
        taken only under torch.compile may reach it (eager footprints never run those), and it is no special
        method (Python, or torch while compiling, calls those without naming them)."""
        leaf = key.rpartition(".")[2].rpartition("::")[2]
        return (
            self.footprints.run_by_none(key)
            and not (leaf.startswith("__") and leaf.endswith("__"))
            and key not in self.readers.reached_under_compile()
        )

    def run_at_import(self, change: FunctionChange, label: str, ran: frozenset[str]) -> Pick:
        """A function importing the package runs acts through the module-level statements that call it (what they
        bind, or register), as if they changed, and in the cases that ran it; called from elsewhere (a function
        those statements call), on every case."""
        owner = self.readers.enclosing_class(change.path, change.qualname)
        found = self.readers.at_import_time(change.qualname, change.path) if owner is None else []
        calling = list({(path, statement.dump): (path, statement) for path, statement in found}.values())
        if not calling:
            return Pick(
                EVERYTHING,
                f"{label}: {change.kind}, runs while the package is imported: every case",
                rule="run-at-import",
            )
        picks = [self.statement(StatementChange(path, statement, "removed")) for path, statement in calling]
        if any(pick.cases is EVERYTHING for pick in picks):
            return Pick(
                EVERYTHING,
                f"{label}: {change.kind}, runs while the package is imported: every case",
                rule="run-at-import",
            )
        cases = ran.union(*(pick.cases for pick in picks))
        if change.cached:  # what importing computed is what later callers get
            cases |= self.unrun(change.path, change.qualname)
        shown = "; ".join(f"`{statement.text}` ({path})" for path, statement in calling[:3])
        return Pick(
            cases,
            f"{label}: {change.kind}, runs while the package is imported, called by {len(calling)} module-level"
            f" statement(s) ({shown}): the {_count(cases)} that ran it or read what those statements bind",
            rule="run-at-import",
        )

    def added_method(self, label: str, path: str, owner: str, name: str) -> Pick:
        """A method added to a class: where its instances can be (the cases that ran the class or a subclass), it
        changes what a lookup of its name finds. Where nothing outside the package can look the name up (no outside
        source spells it, it is no special method, no class or module body spells it), the lookups are the
        package's own: the cases that ran a statement naming it, or the method of that name it now overrides (an
        ancestor's)."""
        cases = self.class_cases(path, owner)
        whole = f"{label}: added to {owner}: the {_count(cases)} that ran it or a subclass"
        why = self.looked_up_outside(name)
        if why:
            return Pick(cases, f"{whole} ({why})", rule="added-method")
        ancestors = [f"{p}::{q}.{name}" for p, q in self.readers.ancestors(path, owner)]
        readers = self.readers.of_attribute(name)
        narrowed = cases & (self.cases_reading(readers, {name}) | self.cases_of(ancestors))
        pick = Pick(
            narrowed,
            f"{label}: added to {owner}, a name only the package spells: the {_count(narrowed)} that ran {owner} (or"
            " a subclass) and a statement naming it or an ancestor's method of that name",
            rule="added-method",
        )
        return self.marked(pick, self.read_only_building(readers, {name}, narrowed, ancestors))

    def looked_up_outside(self, name: str) -> str | None:
        """Why code this selection cannot read may look the attribute up by name, or None: Python does (a special
        name), code outside the package spells it (or that code is unknown here), or a class or module body does."""
        if name.startswith("__") and name.endswith("__"):
            return "Python looks it up by protocol"
        if self.outside is None:
            return "the code outside the package is unknown here"
        if name in self.outside:
            return f"code outside the package spells `{name}`"
        if self.readers.spelled_in_a_body(name):
            return f"a class or module body spells `{name}`"
        return None

    def class_attribute(self, where: str, path: str, statement: code_changes.Statement, cases: frozenset[str]) -> Pick:
        """A class attribute of a plain class (no dataclass, no enum) changes what a lookup of its name on the class
        or its instances finds: where only the package looks it up, the cases of the class that ran a statement
        naming it."""
        owner = statement.scope
        whole = f"{where}: the {_count(cases)} that ran {owner} or a subclass"
        for name in sorted(statement.binds):
            why = self.looked_up_outside(name)
            if why:
                return Pick(cases, f"{whole} ({why})", rule="class-attribute")
        readers = self.readers.of_attribute_any(statement.binds)
        narrowed = cases & self.cases_reading(readers, statement.binds)
        pick = Pick(
            narrowed,
            f"{where}: an attribute of {owner}, a plain class, that only the package looks up: the {_count(narrowed)}"
            f" that ran {owner} (or a subclass) and a statement naming {_names(statement.binds)}",
            rule="class-attribute",
        )
        return self.marked(pick, self.read_only_building(readers, statement.binds, narrowed))

    def building(self, pick: Pick, label: str) -> Pick:
        """The pick's cases that ran the function only while building their model are marked as such."""
        assert pick.cases is not EVERYTHING
        return self.marked(pick, pick.cases & self.footprints.ran_only_building(label))

    def marked(self, pick: Pick, building: frozenset[str]) -> Pick:
        """The pick with these of its cases reached only while building their model."""
        if not building:
            return pick
        reason = f"{pick.reason} ({len(building)} of them only while building their model)"
        return dataclasses.replace(pick, reason=reason, building=building)

    def read_only_building(
        self, keys: Iterable[str], names: Iterable[str], cases: frozenset[str], whole: Iterable[str] = ()
    ) -> frozenset[str]:
        """Of ``cases``, those that ran every function of ``keys`` they read ``names`` in, and every function of
        ``whole`` they ran, only while building their model."""
        firm: set[str] = set()
        for key in keys:
            firm |= self.cases_reading([key], names) - self.footprints.ran_only_building(key)
        for key in whole:
            firm |= self.footprints.ran(key) - self.footprints.ran_only_building(key)
        return cases - firm

    def changed_statements(self, change: FunctionChange, label: str, ran: frozenset[str]) -> Pick:
        """A changed function that cases ran: those that ran the changed statements of base's version (each edited
        or removed, or the one before an insertion) or of head's (each edited or inserted, or the one before a
        removal), whichever side's statements the footprints know."""
        assert change.base is not None and change.head is not None
        best: tuple[int, frozenset[str], str] | None = None
        for side, version, other in (("base", change.base, change.head), ("head", change.head, change.base)):
            indexes = code_changes.changed_statements(version, other)
            if indexes is None:
                return Pick(ran, f"{label}: changed at its entry: run by {_count(ran)}", rule="changed-statements")
            names, spans = version.statement_ids(), version.statement_lines()
            cases, known = self.footprints.ran_statements(label, (names[i] for i in indexes), version.enclosing())
            lines = ", ".join(str(spans[i][0]) for i in indexes[:6]) + (", ..." if len(indexes) > 6 else "")
            if best is None or known > best[0]:
                best = (known, cases, f"{side} lines {lines}")
        assert best is not None
        known, cases, where = best
        return Pick(
            cases,
            f"{label}: changed ({where}): {len(cases)} of the {_count(ran)} that ran it ran that code",
            rule="changed-statements",
        )

    def statement(self, change: StatementChange) -> Pick:
        statement, path = change.statement, change.path
        where = f"{path}: {change.kind} `{statement.text}`"
        if not statement.binds and statement.writes and not statement.scope:
            return self.table_write(change, where)
        if not statement.binds:
            return self.import_time_effect(path, where, statement)
        if statement.kind == "class":
            (name,) = statement.binds
            owner = f"{statement.scope}.{name}" if statement.scope else name
            cases = self.class_cases(path, owner)
            if cases:
                return Pick(
                    cases, f"{where}: the {_count(cases)} that ran {owner} or a subclass", rule="class-statement"
                )
            cases = self.cases_reading(self.readers.of_name(name, path), {name})
            return Pick(
                cases,
                f"{where}: nothing ran {owner}: the {_count(cases)} that ran code naming it",
                rule="class-statement",
            )
        if statement.scope and statement.variant_switch and change.kind == "added":
            return Pick(
                frozenset(),
                f"{where}: a field that switches a new variant on, off by default: existing configs request nothing"
                " of it (PEFT resolves variants from the fields switched on), so the new variant's cases run as new"
                " cases; what it saves each side loads itself",
                new_cases=True,
                settled=True,
                rule="variant-switch-added",
            )
        if statement.scope:
            # A member added to a class (an enum's): code that iterates the class sees it.
            leaf = statement.scope.rpartition(".")[2]
            members = frozenset()
            if change.kind == "added":
                members = self.cases_reading(self.readers.iterating({leaf}), {leaf})
            cases = self.class_cases(path, statement.scope) | members
            if cases and statement.kind == "other" and self.readers.plain_class(path, statement.scope):
                return self.class_attribute(where, path, statement, cases)
            if cases:
                return Pick(
                    cases, f"{where}: the {_count(cases)} that ran {statement.scope} or a subclass", rule="class-body"
                )
            readers = set().union(*(self.readers.of_attribute(n) for n in statement.binds))
            cases = self.cases_reading(readers, statement.binds)
            return Pick(
                cases,
                f"{where}: nothing ran {statement.scope}: the {_count(cases)} that ran a reader of"
                f" {_names(statement.binds)}",
                rule="class-body",
            )
        names = self.computed_from(path, set(statement.binds))
        module_level = {(p, name) for p, scope, name in names if not scope}
        readers = set().union(*(self.readers.of_name(name, p) for p, name in module_level))
        if statement.version:
            # A version string changes what code does only where code compares it (or parses it to compare): one
            # stored or passed on (into a saved config) reads differently, and compiles the same.
            spelled = {name for _, _, name in names} | {
                f"{code_changes.dotted_module(p).rpartition('.')[2]}.{name}" for p, _, name in names
            }
            comparing = set().union(*(self.readers.by_comparison.get(name, set()) for name in spelled))
            cases = self.cases_reading(readers & comparing, {name for _, _, name in names})
            if not cases:
                return Pick(
                    cases,
                    f"{where}: a version no code run compares with a constant: each side saves and loads its own, so"
                    " no case can differ",
                    settled=True,
                    rule="version-string",
                )
            return Pick(
                cases,
                f"{where}: a version: the {_count(cases)} that ran code comparing it with a constant",
                rule="version-string",
            )
        cases = self.cases_reading(readers, {name for _, name in module_level})
        building = self.read_only_building(readers, {name for _, name in module_level}, cases)
        for p, scope, name in names:
            if scope:  # a class attribute computed from it
                computed = self.cases_reading(self.readers.of_attribute(name), {name}) & self.class_cases(p, scope)
                cases, building = cases | computed, building - computed
        pick = Pick(
            cases,
            f"{where}: the {_count(cases)} that ran a reader of {_names(n for _, _, n in names)}",
            rule="module-name-readers",
        )
        return self.marked(pick, building)

    def iterated(self, names: set[tuple[str, str, str]]) -> frozenset[str]:
        """The cases that ran code going over these tables (or passing them on): a module-level name's readers, a
        class attribute's on its class or a subclass."""
        cases = set()
        for path, scope, name in names:
            iterating = self.readers.iterating({name})
            if scope:
                readers = self.readers.of_attribute(name) & iterating
                cases |= self.cases_reading(readers, {name}, going_over=True) & self.class_cases(path, scope)
            else:
                cases |= self.cases_reading(self.readers.of_name(name, path) & iterating, {name}, going_over=True)
        return frozenset(cases)

    def tables_grown(self, path: str, changes: Sequence[StatementChange]) -> tuple[list[Pick], list[StatementChange]]:
        """A dict literal rewritten with entries added and none changed or removed (``MAPPING = {...}`` gaining a
        new method's entry): like a key set, it selects the code iterating the table; the other changes, as they
        are."""
        picks, paired = [], set()
        for removed in (c for c in changes if c.kind == "removed" and c.statement.table):
            for added in (c for c in changes if c.kind == "added" and c.statement.table and id(c) not in paired):
                old, new = removed.statement, added.statement
                if (old.scope, old.binds, old.table[0]) != (new.scope, new.binds, new.table[0]):
                    continue
                if not old.table[1] < new.table[1]:
                    continue
                paired |= {id(removed), id(added)}
                names = self.computed_from(path, set(new.binds))
                cases = self.iterated(names)
                names = {name for _, _, name in names}
                gained = new.table[1] - old.table[1]
                count = len(gained)
                reason = (
                    f"{path}: `{new.text}` gains {count} entr{'y' if count == 1 else 'ies'}, none changed: the"
                    f" {_count(cases)} that ran code iterating {_names(names)}"
                )
                # An entry naming a class of a subpackage base lacks registers a new method (before
                # register_peft_method, PEFT's tables were literals): its cases are new.
                words = {w for _, value in gained for w in QUOTED_NAME.findall(value)}
                folders = sorted(
                    m.path.rpartition("/")[0]
                    for m in self.readers.modules.values()
                    if self.readers.in_new_folder(m.path) and words & set(m.classes)
                )
                for folder in folders:
                    picks.append(
                        Pick(
                            frozenset(),
                            f"{reason}; one names a class of {folder}/: the new cases",
                            new_cases=True,
                            new_method=folder,
                            rule="new-method-table-entry",
                        )
                    )
                picks.append(Pick(cases, reason, gains=frozenset(names), rule="table-gains-entries"))
                break
        return picks, [c for c in changes if id(c) not in paired]

    def table_write(self, change: StatementChange, where: str) -> Pick:
        """A statement that sets keys of a table at import (``MAPPING["vit"] = ...``). Added, it can change only what
        code going over the table sees (or over a name computed from it): a lookup of another key reads what it read
        before. Removed (or edited: one of each), every reader of the table may read another value."""
        tables_ = {name for _, _, name in self.computed_from(change.path, set(change.statement.writes))}
        if change.kind == "added":
            cases = self.cases_reading(self.readers.iterating(tables_), tables_, going_over=True)
            return Pick(
                cases,
                f"{where}: sets a key of {_names(tables_)}: the {_count(cases)} that ran code iterating it",
                gains=frozenset(tables_),
                rule="table-key-set",
            )
        readers = set().union(*(self.readers.of_name(n, change.path) | self.readers.of_attribute(n) for n in tables_))
        cases = self.cases_reading(readers, tables_)
        return Pick(cases, f"{where}: the {_count(cases)} that ran a reader of {_names(tables_)}", rule="table-key-set")

    def import_time_effect(self, path: str, where: str, statement: code_changes.Statement | None = None) -> Pick:
        """A statement that binds nothing acts at import (a registration call): on its own subpackage's cases; in
        the package's top folder, or a subpackage no recorded case ran, on every case. In a subpackage base does not
        have (a new method's), a call of this package's functions adds keys to the tables they write: the new cases,
        and the cases that ran code iterating those tables; in one head removes, the subpackage's cases and those
        that ran code iterating the tables."""
        folder = path.rpartition("/")[0]
        if statement is not None and self.readers.in_new_folder(path):
            written = self.readers.tables_written_by(statement.reads)
            if written:
                iterating = self.readers.iterating(written)
                cases = self.cases_reading(iterating, written, going_over=True)
                return Pick(
                    cases,
                    f"{where}: runs at import in a new subpackage and adds keys to {_names(written)}: the new cases,"
                    f" and the {_count(cases)} that ran code iterating them",
                    new_cases=True,
                    new_method=folder,
                    gains=frozenset(written),
                    rule="new-method-registration",
                )
        if statement is not None and self.readers.in_removed_folder(path):
            written = self.readers.tables_written_by(statement.reads)
            if written:
                own = self.footprints.ran_any(f"{folder}/")
                cases = own | self.cases_reading(self.readers.iterating(written), written)
                return Pick(
                    cases,
                    f"{where}: ran at import in a subpackage head removes, adding keys to {_names(written)}: its"
                    f" {_count(own)}, and those that ran code iterating them: {_count(cases)}",
                    rule="removed-subpackage",
                )
        cases = self.footprints.ran_any(f"{folder}/") if "/" in folder else frozenset()
        if cases:
            return Pick(
                cases,
                f"{where}: runs at import, binds no name: the {_count(cases)} that ran code of {folder}/",
                rule="import-time-effect",
            )
        return Pick(
            EVERYTHING,
            f"{where}: runs at import and binds no name, in {folder}/: every case",
            rule="import-time-effect",
        )

    def less_new_subpackages(self, picks: list[Pick], paths: Iterable[str]) -> list[Pick]:
        """The picks less the cases that ran a subpackage base lacks: those are the new method's, which run as its
        new cases. Only a footprints file recorded after the method came (a replay of history) holds any."""
        folders = sorted({p.rpartition("/")[0] for p in paths if self.readers.in_new_folder(p)})
        own = {folder: self.recorded.ran_any(f"{folder}/") for folder in folders}
        own = {folder: cases for folder, cases in own.items() if cases}
        if not own:
            return picks
        every = frozenset().union(*own.values())
        kept = []
        for pick in picks:
            if pick.cases is EVERYTHING or not pick.cases & every:
                kept.append(pick)
                continue
            left = pick.cases - every
            reason = (
                f"{pick.reason}; {len(pick.cases) - len(left)} of them ran {', '.join(f'{f}/' for f in own)}, which"
                f" base lacks (the new method's cases, run as new): {_count(left)} left"
            )
            kept.append(dataclasses.replace(pick, cases=left, reason=reason, building=pick.building - every))
        return kept

    def rebound(self, changes: Sequence[ModuleChanges]) -> tuple[str, ...]:
        """The module-level names the change's statements bind (added, removed or edited), and those module-level
        code computes from them, dotted (``peft.utils.save_and_load.PEFT_TYPE_TO_PREFIX_MAPPING``)."""
        found = set()
        for module in changes:
            for change in module.statements:
                if change.statement.scope or not change.statement.binds:
                    continue
                for path, scope, name in self.computed_from(module.path, set(change.statement.binds)):
                    if not scope:
                        found.add(f"{code_changes.dotted_module(path)}.{name}")
        return tuple(sorted(found))

    def computed_from(self, path: str, names: set[str]) -> set[tuple[str, str, str]]:
        """The names, and those that module-level or class-body code computes from them at import (transitively),
        each with the module that binds it and its class ("" for the module)."""
        found = {(path, "", name) for name in names}
        pending = list(found)
        while pending:
            where, _, name = pending.pop()
            for reader_path, statement in self.readers.at_import_time(name, where):
                if id(statement) in self.edited_statements:  # its own pick follows what it binds now
                    continue
                for bound in statement.binds:
                    if (reader_path, statement.scope, bound) not in found:
                        found.add((reader_path, statement.scope, bound))
                        pending.append((reader_path, statement.scope, bound))
        return found


def select(
    footprints: Footprints,
    changes: Sequence[ModuleChanges],
    readers: Readers,
    unparsable: Sequence[str] = (),
    outside: frozenset[str] | None = None,
) -> Selection:
    """``outside``: the words code outside the package spells (:mod:`compile_audit.selection.outside_names`); None
    where unknown, and every method added to a class then selects the cases that ran the class."""
    changed = [f"{m.path}::{c.qualname}" for m in changes for c in m.functions if c.kind == "changed"]
    rules = _Rules(footprints.without(readers.added_functions()), readers, changed, outside)
    rules.recorded = footprints
    rules.edited_statements = {id(change.statement) for module in changes for change in module.statements}
    rules.new_switches = frozenset(
        name
        for module in changes
        for change in module.statements
        if change.kind == "added" and change.statement.scope and change.statement.variant_switch
        for name in change.statement.binds
    )
    picks = [Pick(EVERYTHING, f"{message}: every case", rule="unparsable-file") for message in unparsable]
    for module in changes:
        picks += [rules.function(change) for change in module.functions]
        grown, statements = rules.tables_grown(module.path, module.statements)
        picks += grown
        picks += [rules.statement(change) for change in statements]
    picks = rules.less_new_subpackages(picks, [m.path for m in changes])
    everything = any(pick.cases is EVERYTHING for pick in picks)
    cases = set().union(*(pick.cases for pick in picks if pick.cases is not EVERYTHING))
    firm = set().union(*(pick.cases - pick.building for pick in picks if pick.cases is not EVERYTHING))
    changed = sorted({m.path for m in changes if m.executes_differently} | {u.split(":", 1)[0] for u in unparsable})
    ordered = sorted(picks, key=lambda pick: pick.cases is not EVERYTHING)  # what widened to everything first
    new_methods = len({p.new_method for p in picks if p.new_cases})
    # A new variant's class and functions run in its new cases (the zoo derives its method from PEFT's declarations).
    variant_added = any(p.rule == "variant-switch-added" for p in picks)
    new_cases = bool(new_methods) or any(readers.is_added(m.path) for m in changes)
    return Selection(
        everything,
        () if everything else tuple(sorted(cases)),
        tuple(p.reason for p in ordered),
        tuple(changed),
        new_cases=new_cases and not everything,
        new_methods=0 if everything else new_methods,
        build_only=() if everything else tuple(sorted(cases - firm)),
        tables_gaining=tuple(sorted(set().union(*(pick.gains for pick in picks)))),
        names_rebound=() if everything else rules.rebound(changes),
        unjudged=tuple(
            p.reason
            for p in ordered
            if p.cases is not EVERYTHING
            and not p.cases
            and not p.new_cases
            and not p.settled
            and not (variant_added and p.rule in _NEW_CODE_RULES)
        ),
        decisions=tuple(p.decision() for p in ordered),
    )


# ----------------------------------------------------------------------------- two versions of a package


@dataclasses.dataclass(frozen=True)
class Source:
    identity: str  # equal identities, equal text (a content hash, a git blob id)
    read: Callable[[], str]


class ModuleCache:
    """Parsed modules by path and identity: a replay over many commits parses each version of a file once."""

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str], Module | UnparsableSource] = {}

    def parse(self, path: str, source: Source) -> Module:
        key = (path, source.identity)
        if key not in self._parsed:
            try:
                self._parsed[key] = code_changes.parse_module(path, source.read())
            except UnparsableSource as error:
                self._parsed[key] = error
        found = self._parsed[key]
        if isinstance(found, UnparsableSource):
            raise found
        return found


def compare_sources(
    base: Mapping[str, Source], head: Mapping[str, Source], cache: ModuleCache | None = None
) -> tuple[list[ModuleChanges], list[str], Readers]:
    """The executed-code changes between two versions of a package (package-relative path -> source), the files that
    do not parse, and who reads what on both sides."""
    cache = cache or ModuleCache()
    parsed: dict[tuple[str, str], Module] = {}
    unparsable: dict[str, str] = {}
    for side, files in (("base", base), ("head", head)):
        for path, source in files.items():
            try:
                parsed[(side, path)] = cache.parse(path, source)
            except UnparsableSource as error:
                unparsable.setdefault(path, f"{error} ({side})")
    changes = []
    for path in sorted(base.keys() | head.keys()):
        old, new = base.get(path), head.get(path)
        if path in unparsable or (old and new and old.identity == new.identity):
            continue
        module_changes = code_changes.compare(parsed.get(("base", path)), parsed.get(("head", path)))
        if module_changes.executes_differently:
            changes.append(module_changes)
    base_folders = {path.rpartition("/")[0] for path in base}
    head_folders = {path.rpartition("/")[0] for path in head}
    readers = Readers(parsed.values(), head.keys() - base.keys(), base_folders, head_folders)
    return changes, list(unparsable.values()), readers


def package_files(root: Path) -> dict[str, Source]:
    """The Python files of a package directory, by package-relative path (``peft/tuners/...``)."""
    if not (root / "__init__.py").is_file():
        raise FootprintsError(f"{root}: not a package directory (no __init__.py)")
    files = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        text = data.decode("utf-8", errors="replace")
        files[f"{root.name}/{path.relative_to(root).as_posix()}"] = Source(
            hashlib.sha256(data).hexdigest(), lambda text=text: text
        )
    return files


def select_between(footprints: Footprints, base_root: Path, head_root: Path) -> Selection:
    changes, unparsable, readers = compare_sources(package_files(base_root), package_files(head_root))
    return select(footprints, changes, readers, unparsable, outside_of(footprints, base_root.name))


def outside_of(footprints: Footprints, package: str) -> frozenset[str] | None:
    """The words code outside ``package`` spells here, if the libraries the footprints were recorded with are
    installed (else None: unknown)."""
    libraries = tuple(sorted(name for name in footprints.versions if name not in ("python", package)))
    return _spelled_outside(package, libraries)


@functools.cache
def _spelled_outside(package: str, libraries: tuple[str, ...]) -> frozenset[str] | None:
    return spelled_outside(package, libraries)


# ----------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compile_audit.selection.change_selection", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("record", help="footprints of compile reports into the footprints file")
    record.add_argument("reports", nargs="+", type=Path)
    record.add_argument("--output", required=True, type=Path, help="the footprints file (merged when it exists)")
    record.add_argument(
        "--source", type=Path, help="the folder holding the package the reports ran (default: where it is installed)"
    )
    listing = commands.add_parser(
        "inventory", help="what the recorded package defines and runs at import, into the footprints file"
    )
    listing.add_argument("--output", required=True, type=Path, help="the footprints file")
    listing.add_argument(
        "--source", type=Path, help="the folder holding the package the cases ran (default: where it is installed)"
    )
    choose = commands.add_parser("select", help="what a change selects, as JSON (scripts/gate)")
    choose.add_argument("base", type=Path, help="the base side's package directory")
    choose.add_argument("head", type=Path, help="the head side's package directory")
    choose.add_argument("--footprints", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "select":
            selection = select_between(load(args.footprints), args.base, args.head)
            print(json.dumps(dataclasses.asdict(selection)))
            return 0
        if args.command == "inventory":
            return footprints_record.inventory(args.output, args.source)
        return footprints_record.record(args.reports, args.output, args.source)
    except FootprintsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
