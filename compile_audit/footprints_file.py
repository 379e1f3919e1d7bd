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
statements: for each function some statement of which not every case that ran the function ran, the version of the
function it holds for (``digest``, :mod:`compile_audit.code_changes`) and, by pre-order index, the cases that ran
those statements::

     "statements": {
     "peft/peft_model.py::PeftModel.__init__": {"digest": "3f0c...", "ran": {"12": "239-301", "13": ""}},
     ...}
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

FORMAT = 2
_INNER_CODE = re.compile(r"(\.<locals>)?\.<(dictcomp|listcomp|setcomp|genexpr|lambda)>.*$")


class FootprintsError(ValueError):
    """A malformed footprints file or report; the message names the file and what is wrong."""


def function_key(path: str, qualname: str) -> str:
    """``peft/tuners/lora/layer.py::Linear.forward``; a comprehension or lambda is the function it is written in."""
    return f"{path}::{_INNER_CODE.sub('', qualname)}"


def split_key(key: str) -> tuple[str, str]:
    path, _, qualname = key.partition("::")
    return path, qualname


@dataclasses.dataclass(frozen=True)
class StatementRuns:
    digest: str  # the version of the function the indexes are valid for
    ran: Mapping[int, frozenset[str]]  # statement index -> the cases that ran it, where not all the function's did


@dataclasses.dataclass(frozen=True)
class Footprints:
    cases: tuple[str, ...]  # every recorded case, in the file's order
    runs: Mapping[str, frozenset[str]]  # function key -> the cases that ran it
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    statements: Mapping[str, StatementRuns] = dataclasses.field(default_factory=dict)

    def ran_statements(self, key: str, digest: str, indexes: Iterable[int]) -> frozenset[str] | None:
        """The cases that ran any of these statements of this version of the function; None when the file holds no
        statements for that version (then every case that ran the function counts)."""
        runs = self.statements.get(key)
        if runs is None or runs.digest != digest:
            return None
        ran = self.ran(key)
        return frozenset().union(*(runs.ran.get(index, ran) for index in indexes))

    def missed(self) -> dict[str, dict[str, set[int]]]:
        """Per case, per function key: the statements it did not run (the inverse of ``statements``)."""
        missed: dict[str, dict[str, set[int]]] = {}
        for key, runs in self.statements.items():
            for index, cases in runs.ran.items():
                for case in self.ran(key) - cases:
                    missed.setdefault(case, {}).setdefault(key, set()).add(index)
        return missed

    def ran(self, key: str) -> frozenset[str]:
        return self.runs.get(key, frozenset())

    def ran_any(self, prefix: str) -> frozenset[str]:
        """The cases that ran any function whose key starts with ``prefix`` (a file, a class, a directory)."""
        return frozenset().union(*(cases for key, cases in self.runs.items() if key.startswith(prefix)))

    def by_case(self) -> dict[str, set[str]]:
        functions: dict[str, set[str]] = {case: set() for case in self.cases}
        for key, cases in self.runs.items():
            for case in cases:
                functions[case].add(key)
        return functions

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
                + json.dumps(
                    {
                        "digest": runs.digest,
                        "ran": {str(i): _ranges(sorted(index[c] for c in runs.ran[i])) for i in sorted(runs.ran)},
                    }
                )
                for key, runs in sorted(self.statements.items())
            ),
            "}",
            "}",
        ]
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
            ran = {
                int(i): frozenset(cases[n] for n in _parse_ranges(str(text), len(cases)) if text)
                for i, text in entry["ran"].items()
            }
            statements[key] = StatementRuns(str(entry["digest"]), ran)
        except (KeyError, TypeError, ValueError) as error:
            raise FootprintsError(f"{path}: statements of {key!r}: {error}") from None
    return Footprints(tuple(cases), runs, dict(data.get("versions") or {}), statements)


def from_reports(reports: Iterable[Mapping[str, Any]], source: Callable[[str], str | None] | None = None) -> Footprints:
    """The footprints of every case of compile reports (``--compile-report``) that recorded one; later reports win.
    ``source`` reads a package-relative file as the cases ran it: with it, the lines the cases ran (where the reports
    carry them) narrow each function to its statements."""
    by_case: dict[str, set[str]] = {}
    lines: dict[str, dict[str, list[int]]] = {}
    versions: dict[str, str] = {}
    for report in reports:
        versions.update(report.get("versions") or {})
        for record in report.get("cases", []):
            footprint = record.get("footprint")
            if isinstance(footprint, dict) and footprint:
                keys = {function_key(path, name) for path, names in footprint.items() for name in names}
                by_case[record["id"]] = keys
                lines[record["id"]] = record.get("footprint_lines") or {}
    order = sorted(by_case, key=_grouping)
    if source is None or not any(lines.values()):
        return _from_cases(order, by_case, versions)
    missed, digests = statements_missed(by_case, lines, source)
    return _from_cases(order, by_case, versions, missed, digests)


def statements_missed(
    by_case: Mapping[str, set[str]], lines: Mapping[str, Mapping[str, list[int]]], source: Callable[[str], str | None]
) -> tuple[dict[str, dict[str, set[int]]], dict[str, str]]:
    """Per case, the statements of the functions it ran that it did not run (by the lines it ran), and the digest of
    each function's version."""
    from compile_audit.code_changes import UnparsableSource, parse_module

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
    spans = {key: function.statement_lines() for key, function in functions.items()}
    missed: dict[str, dict[str, set[int]]] = {}
    for case, keys in by_case.items():
        ran_lines = {path: sorted(numbers) for path, numbers in lines.get(case, {}).items()}
        if not ran_lines:
            continue
        for key in keys:
            if key not in spans:
                continue
            numbers = ran_lines.get(key.partition("::")[0], [])
            for index, (first, last) in enumerate(spans[key]):
                position = bisect.bisect_left(numbers, first)
                if position == len(numbers) or numbers[position] > last:
                    missed.setdefault(case, {}).setdefault(key, set()).add(index)
    return missed, {key: function.digest for key, function in functions.items()}


def _grouping(case: str) -> tuple[str, ...]:
    """Cases of one method and scenario side by side: a method's functions then read as a few ranges."""
    model, _, rest = case.partition("/")
    method, _, scenario = rest.partition("/")
    return method, scenario, model


def _from_cases(
    order: list[str],
    by_case: Mapping[str, set[str]],
    versions: Mapping[str, str],
    missed: Mapping[str, Mapping[str, set[int]]] | None = None,
    digests: Mapping[str, str] | None = None,
) -> Footprints:
    runs: dict[str, set[str]] = {}
    for case, keys in by_case.items():
        for key in keys:
            runs.setdefault(key, set()).add(case)
    frozen = {key: frozenset(cases) for key, cases in runs.items()}
    statements: dict[str, StatementRuns] = {}
    for key, digest in (digests or {}).items():
        if key not in frozen:
            continue
        not_run: dict[int, set[str]] = {}
        for case in frozen[key]:
            for index in (missed or {}).get(case, {}).get(key, ()):
                not_run.setdefault(index, set()).add(case)
        if not_run:
            statements[key] = StatementRuns(digest, {i: frozen[key] - cases for i, cases in not_run.items()})
    return Footprints(tuple(order), frozen, dict(versions), statements)


def merged(old: Footprints, new: Footprints) -> Footprints:
    """``old`` with every case ``new`` recorded replaced; old cases keep their place, new ones go at the end. A
    function whose version differs between the two keeps no statements (the indexes would not agree)."""
    by_case = old.by_case()
    by_case.update(new.by_case())
    order = [*old.cases, *(case for case in new.cases if case not in set(old.cases))]
    missed = {case: functions for case, functions in old.missed().items() if case not in set(new.cases)}
    missed.update(new.missed())
    digests = {key: runs.digest for key, runs in old.statements.items()}
    for key, runs in new.statements.items():
        digests[key] = runs.digest if digests.get(key, runs.digest) == runs.digest else ""
    digests = {key: digest for key, digest in digests.items() if digest}
    return _from_cases(order, by_case, dict(new.versions) or dict(old.versions), missed, digests)
