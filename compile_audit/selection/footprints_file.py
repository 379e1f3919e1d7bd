"""The footprints file: which recorded case ran which function of the package under test, committed as data.

One line per function, naming the cases that ran it (traced by Dynamo or run by the interpreter) as ranges of
indexes into the case list, so that a function's coverage reads and diffs as one line::

    {"format": 2,
     "versions": {"peft": "0.21.2", ...},
     "cases": [
     "bert-tiny/adalora/depth",
     ...],
     "functions": {
     "peft/peft_model.py::PeftModel.forward": "0-2317",
     "peft/tuners/ia3/layer.py::Linear.merge": "401-409,1210",
     ...}}

The case list keeps its order when cases are added (new ones go at its end), so that recording one method again
leaves the other lines as they were. A comprehension or lambda is recorded as the function it is written in: a
change to it is a change to that function.

Where the reports carry the lines each case ran (``--footprints-only``), ``statements`` narrows a function to its
statements: for each function some statement of which not every case that ran the function ran, the cases that ran
each such statement, by the statement's name (its code under the headers enclosing it,
:meth:`compile_audit.selection.code_changes.FunctionDef.statement_ids`, so that it names the same statement in nearby
versions of the function). A statement not listed was run by every case that ran its function, or is unknown here:
either way, those cases count::

     "statements": {
     "peft/peft_model.py::PeftModel.__init__": {"0c1d2e3f4a.1": "239-301", "5b6c7d8e9f.1": ""},
     ...}

Where the reports say which functions each case ran only before its first compile (``footprint_build_only``),
``build_only`` lists, per function, the cases that ran it only while building their model: a change to it can alter
what those cases compile only through what they built (a file without it: no case counts as building only)::

     "build_only": {
     "peft/peft_model.py::PeftModel.__init__": "0-1090,1200-2317",
     ...}

What the package held when it was recorded, for a function no case ran (written by ``change_selection record`` and
``change_selection inventory``; a file without them knows nothing of it): ``defined``, every function its files
define, by file; ``at_import``, those that ran while it and its modules were imported (no case's footprint holds
them); and ``elsewhere``, the cases that ran code in processes of their own (ranks), which their footprints miss. A
function ``defined`` lists, that no case and no import ran, was run by none of the cases but those::

     "elsewhere": "2300-2317",
     "at_import": ["peft/utils/peft_types.py::register_peft_method", ...],
     "defined": {
     "peft/config.py": ["PeftConfigMixin.__post_init__", ...],
     ...}
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from compile_audit.case_ids import CaseId

FORMAT = 2
_INNER_CODE = re.compile(r"(\.<locals>)?\.<(dictcomp|listcomp|setcomp|genexpr|lambda)>.*$")


class FootprintsError(ValueError):
    """A malformed footprints file or report; the message names the file and what is wrong."""


def function_key(path: str, qualname: str) -> str:
    """``peft/tuners/lora/layer.py::Linear.forward``; a comprehension or lambda is the function it is written in."""
    return f"{path}::{_INNER_CODE.sub('', qualname)}"


@dataclasses.dataclass(frozen=True)
class Footprints:
    cases: tuple[str, ...]  # every recorded case, in the file's order
    runs: Mapping[str, frozenset[str]]  # function key -> the cases that ran it
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # function key -> statement name -> the cases that ran it, where not every case that ran the function did
    statements: Mapping[str, Mapping[str, frozenset[str]]] = dataclasses.field(default_factory=dict)
    # function key -> the cases that ran it only before their first compile (while building their model)
    build_only: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    defined: frozenset[str] | None = None  # every function key the recorded package defines (None: unknown)
    at_import: frozenset[str] = frozenset()  # the functions importing the package ran
    elsewhere: frozenset[str] = frozenset()  # the cases whose footprints miss processes they started

    def run_by_none(self, key: str) -> bool:
        """Whether the file knows that no case ran the function: the package defined it, no recorded case ran it,
        and importing the package did not (the cases in ``elsewhere`` aside)."""
        return self.defined is not None and key in self.defined and key not in self.at_import and not self.ran(key)

    def ran_only_building(self, key: str) -> frozenset[str]:
        return self.build_only.get(key, frozenset())

    def ran_statements(
        self, key: str, names: Iterable[str], enclosing: Mapping[str, Sequence[str]] | None = None
    ) -> tuple[frozenset[str], int]:
        """The cases that ran any of these statements of the function, and how many of them the file lists. A
        statement not listed counts as the nearest listed statement enclosing it (``enclosing``: name -> the
        compound statements around it, nearest first), for it runs only where that one ran; with none, as every
        case that ran the function (not listed may mean every such case ran it, or a version the file never saw)."""
        listed, ran = self.statements.get(key, {}), self.ran(key)
        names = list(names)
        cases: set[str] = set()
        for name in names:
            around = (enclosing or {}).get(name, ())
            cases |= next((listed[n] for n in (name, *around) if n in listed), ran)
        return frozenset(cases), sum(name in listed for name in names)

    def missed(self) -> dict[str, dict[str, set[str]]]:
        """Per case, per function key: the statements it did not run (the inverse of ``statements``)."""
        missed: dict[str, dict[str, set[str]]] = {}
        for key, listed in self.statements.items():
            for name, cases in listed.items():
                for case in self.ran(key) - cases:
                    missed.setdefault(case, {}).setdefault(key, set()).add(name)
        return missed

    def ran(self, key: str) -> frozenset[str]:
        return self.runs.get(key, frozenset())

    def without(self, keys: Iterable[str]) -> Footprints:
        """These functions as run by no case: a footprints file recorded after a change (a replay of history) holds
        functions the change adds, which no case can have run on the side that lacks them."""
        known = self.runs.keys() | self.statements.keys() | self.build_only.keys() | (self.defined or set())
        drop = set(keys) & known
        if not drop:
            return self
        return dataclasses.replace(
            self,
            defined=None if self.defined is None else self.defined - drop,
            runs={k: v for k, v in self.runs.items() if k not in drop},
            statements={k: v for k, v in self.statements.items() if k not in drop},
            build_only={k: v for k, v in self.build_only.items() if k not in drop},
        )

    def ran_any(self, prefix: str) -> frozenset[str]:
        """The cases that ran any function whose key starts with ``prefix`` (a file, a class, a directory)."""
        return frozenset().union(*(cases for key, cases in self.runs.items() if key.startswith(prefix)))

    def by_case(self) -> dict[str, set[str]]:
        functions: dict[str, set[str]] = {case: set() for case in self.cases}
        for key, cases in self.runs.items():
            for case in cases:
                functions[case].add(key)
        return functions

    def built_by_case(self) -> dict[str, set[str]]:
        """Per case, the functions it ran only while building its model."""
        built: dict[str, set[str]] = {}
        for key, cases in self.build_only.items():
            for case in cases:
                built.setdefault(case, set()).add(key)
        return built

    def to_json(self) -> str:
        index = {case: number for number, case in enumerate(self.cases)}
        lines = [
            "{",
            f'"format": {FORMAT},',
            f'"versions": {json.dumps(dict(sorted(self.versions.items())))},',
            '"cases": [',
            ",\n".join(json.dumps(case) for case in self.cases),
            "],",
            '"functions": {',
            ",\n".join(
                f"{json.dumps(key)}: {json.dumps(_ranges(sorted(index[c] for c in self.runs[key])))}"
                for key in sorted(self.runs)
                if self.runs[key]
            ),
            "},",
            '"statements": {',
            ",\n".join(
                f"{json.dumps(key)}: "
                + json.dumps({name: _ranges(sorted(index[c] for c in listed[name])) for name in sorted(listed)})
                for key, listed in sorted(self.statements.items())
            ),
            "},",
            '"build_only": {',
            ",\n".join(
                f"{json.dumps(key)}: {json.dumps(_ranges(sorted(index[c] for c in cases)))}"
                for key, cases in sorted(self.build_only.items())
                if cases
            ),
            "}",
        ]
        if self.defined is not None:
            by_file: dict[str, list[str]] = {}
            for key in sorted(self.defined):
                path, _, qualname = key.partition("::")
                by_file.setdefault(path, []).append(qualname)
            lines[-1] += ","
            lines += [
                f'"elsewhere": {json.dumps(_ranges(sorted(index[c] for c in self.elsewhere if c in index)))},',
                '"at_import": [',
                ",\n".join(json.dumps(key) for key in sorted(self.at_import)),
                "],",
                '"defined": {',
                ",\n".join(f"{json.dumps(path)}: {json.dumps(names)}" for path, names in by_file.items()),
                "}",
            ]
        lines.append("}")
        return "\n".join(lines) + "\n"


def _ranges(numbers: list[int]) -> str:
    parts, start = [], None
    for position, number in enumerate(numbers):
        if start is None:
            start = number
        if position + 1 == len(numbers) or numbers[position + 1] != number + 1:
            parts.append(str(start) if start == number else f"{start}-{number}")
            start = None
    return ",".join(parts)


def _parse_ranges(text: str, count: int) -> list[int]:
    numbers = []
    if not text:
        return numbers
    for part in text.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if not 0 <= low <= high < count:
            raise ValueError(f"{part!r} is outside the case list (0 to {count - 1})")
        numbers.extend(range(low, high + 1))
    return numbers


def load(path: Path) -> Footprints:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FootprintsError(f"{path}: no such footprints file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise FootprintsError(f"{path}: unreadable footprints file: {error}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise FootprintsError(
            f"{path}: format {found!r}, expected {FORMAT} (functions, not files): record it again (README, 'Selection"
            " by change')"
        )
    cases, functions = data.get("cases"), data.get("functions")
    if not isinstance(cases, list) or not all(isinstance(c, str) for c in cases) or not isinstance(functions, dict):
        raise FootprintsError(f"{path}: 'cases' must be a list of case ids and 'functions' an object")
    runs = {}
    for key, text in functions.items():
        if "::" not in key:
            raise FootprintsError(f"{path}: function {key!r}: expected 'FILE::QUALNAME'")
        try:
            runs[key] = frozenset(cases[n] for n in _parse_ranges(str(text), len(cases)))
        except ValueError as error:
            raise FootprintsError(f"{path}: function {key!r}: {error}") from None
    statements = {}
    for key, entry in (data.get("statements") or {}).items():
        try:
            statements[key] = {
                str(name): frozenset(cases[n] for n in _parse_ranges(str(text), len(cases)))
                for name, text in entry.items()
            }
        except (AttributeError, TypeError, ValueError) as error:
            raise FootprintsError(f"{path}: statements of {key!r}: {error}") from None
    build_only = {}
    for key, text in (data.get("build_only") or {}).items():
        try:
            build_only[key] = frozenset(cases[n] for n in _parse_ranges(str(text), len(cases))) & runs.get(key, set())
        except ValueError as error:
            raise FootprintsError(f"{path}: build_only of {key!r}: {error}") from None
    defined = None
    if data.get("defined") is not None:
        try:
            defined = frozenset(f"{p}::{q}" for p, names in data["defined"].items() for q in names)
            at_import = frozenset(str(key) for key in data.get("at_import") or ())
            elsewhere = frozenset(cases[n] for n in _parse_ranges(str(data.get("elsewhere") or ""), len(cases)))
        except (AttributeError, TypeError, ValueError) as error:
            raise FootprintsError(f"{path}: 'defined', 'at_import' or 'elsewhere': {error}") from None
        return Footprints(
            tuple(cases), runs, dict(data.get("versions") or {}), statements, build_only, defined, at_import, elsewhere
        )
    return Footprints(tuple(cases), runs, dict(data.get("versions") or {}), statements, build_only)


def from_reports(reports: Iterable[Mapping[str, Any]], source: Callable[[str], str | None] | None = None) -> Footprints:
    """The footprints of every case of compile reports (``--compile-report``) that recorded one; later reports win.
    ``source`` reads a package-relative file as the cases ran it: with it, the lines the cases ran (where the reports
    carry them) narrow each function to its statements."""
    by_case: dict[str, set[str]] = {}
    built: dict[str, set[str]] = {}
    lines: dict[str, dict[str, list[int]]] = {}
    versions: dict[str, str] = {}
    elsewhere: set[str] = set()
    for report in reports:
        versions.update(report.get("versions") or {})
        for record in report.get("cases", []):
            footprint = record.get("footprint")
            if isinstance(footprint, dict) and footprint:
                keys = {function_key(path, name) for path, names in footprint.items() for name in names}
                by_case[record["id"]] = keys
                lines[record["id"]] = record.get("footprint_lines") or {}
                built[record["id"]] = only_building(footprint, record.get("footprint_build_only") or {})
                if record.get("footprint_elsewhere"):
                    elsewhere.add(record["id"])
    order = sorted(by_case, key=_grouping)
    missed = statements_missed(by_case, lines, source) if source is not None and any(lines.values()) else None
    return dataclasses.replace(_from_cases(order, by_case, versions, missed, built), elsewhere=frozenset(elsewhere))


def statements_missed(
    by_case: Mapping[str, set[str]], lines: Mapping[str, Mapping[str, list[int]]], source: Callable[[str], str | None]
) -> dict[str, dict[str, set[str]]]:
    """Per case, the statements of the functions it ran that it did not run (by the lines it ran), by name."""
    from compile_audit.selection.code_changes import UnparsableSource, parse_module

    functions: dict[str, Any] = {}
    for path in sorted({key.partition("::")[0] for keys in by_case.values() for key in keys}):
        text = source(path)
        if text is None:
            continue
        try:
            module = parse_module(path, text)
        except UnparsableSource:
            continue
        functions.update({f"{path}::{name}": function for name, function in module.functions.items()})
    spans = {key: list(zip(f.statement_ids(), f.statement_lines(), strict=True)) for key, f in functions.items()}
    missed: dict[str, dict[str, set[str]]] = {}
    for case, keys in by_case.items():
        ran_lines = {path: sorted(numbers) for path, numbers in lines.get(case, {}).items()}
        if not ran_lines:
            continue
        for key in keys:
            if key not in spans:
                continue
            numbers = ran_lines.get(key.partition("::")[0], [])
            for name, (first, last) in spans[key]:
                position = bisect.bisect_left(numbers, first)
                if position == len(numbers) or numbers[position] > last:
                    missed.setdefault(case, {}).setdefault(key, set()).add(name)
    return missed


def _grouping(case: str) -> tuple[str, ...]:
    """Cases of one method and scenario side by side: a method's functions then read as a few ranges."""
    try:
        identity = CaseId.parse(case)
    except ValueError:
        return (case,)
    return identity.method, identity.scenario, identity.model, identity.device, identity.backend


def only_building(footprint: Mapping[str, Sequence[str]], building: Mapping[str, Sequence[str]]) -> set[str]:
    """The function keys a case ran only while building. A lambda or comprehension is its enclosing function's key:
    one that ran after the first compile (a lambda registered as a hook) makes that function not building only."""
    built = {function_key(path, name) for path, names in building.items() for name in names}
    later = {
        function_key(path, name)
        for path, names in footprint.items()
        for name in names
        if name not in set(building.get(path, ()))
    }
    return built - later


def _from_cases(
    order: list[str],
    by_case: Mapping[str, set[str]],
    versions: Mapping[str, str],
    missed: Mapping[str, Mapping[str, set[str]]] | None = None,
    built: Mapping[str, set[str]] | None = None,
) -> Footprints:
    runs: dict[str, set[str]] = {}
    for case, keys in by_case.items():
        for key in keys:
            runs.setdefault(key, set()).add(case)
    frozen = {key: frozenset(cases) for key, cases in runs.items()}
    not_run: dict[str, dict[str, set[str]]] = {}
    for case, functions in (missed or {}).items():
        for key, names in functions.items():
            if case in frozen.get(key, ()):
                for name in names:
                    not_run.setdefault(key, {}).setdefault(name, set()).add(case)
    statements = {key: {name: frozen[key] - cases for name, cases in names.items()} for key, names in not_run.items()}
    build_only: dict[str, set[str]] = {}
    for case, keys in (built or {}).items():
        for key in keys:
            build_only.setdefault(key, set()).add(case)
    return Footprints(
        tuple(order), frozen, dict(versions), statements, {k: frozenset(c) for k, c in build_only.items()}
    )


def merged(old: Footprints, new: Footprints) -> Footprints:
    """``old`` with every case ``new`` recorded replaced; old cases keep their place, new ones go at the end."""
    by_case = old.by_case()
    by_case.update(new.by_case())
    order = [*old.cases, *(case for case in new.cases if case not in set(old.cases))]
    missed = {case: functions for case, functions in old.missed().items() if case not in set(new.cases)}
    missed.update(new.missed())
    built = {case: keys for case, keys in old.built_by_case().items() if case not in set(new.cases)}
    built.update(new.built_by_case())
    merged_ = _from_cases(order, by_case, dict(new.versions) or dict(old.versions), missed, built)
    package = new if new.defined is not None else old
    elsewhere = (old.elsewhere - set(new.cases)) | new.elsewhere
    return dataclasses.replace(merged_, defined=package.defined, at_import=package.at_import, elsewhere=elsewhere)
