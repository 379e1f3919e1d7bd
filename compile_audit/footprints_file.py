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
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
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
class Footprints:
    cases: tuple[str, ...]  # every recorded case, in the file's order
    runs: Mapping[str, frozenset[str]]  # function key -> the cases that ran it
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)

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
    return Footprints(tuple(cases), runs, dict(data.get("versions") or {}))


def from_reports(reports: Iterable[Mapping[str, Any]]) -> Footprints:
    """The footprints of every case of compile reports (``--compile-report``) that recorded one; later reports win."""
    by_case: dict[str, set[str]] = {}
    versions: dict[str, str] = {}
    for report in reports:
        versions.update(report.get("versions") or {})
        for record in report.get("cases", []):
            footprint = record.get("footprint")
            if isinstance(footprint, dict) and footprint:
                by_case[record["id"]] = {
                    function_key(path, name) for path, names in footprint.items() for name in names
                }
    return _from_cases(sorted(by_case, key=_grouping), by_case, versions)


def _grouping(case: str) -> tuple[str, ...]:
    """Cases of one method and scenario side by side: a method's functions then read as a few ranges."""
    model, _, rest = case.partition("/")
    method, _, scenario = rest.partition("/")
    return method, scenario, model


def _from_cases(order: list[str], by_case: Mapping[str, set[str]], versions: Mapping[str, str]) -> Footprints:
    runs: dict[str, set[str]] = {}
    for case, keys in by_case.items():
        for key in keys:
            runs.setdefault(key, set()).add(case)
    return Footprints(tuple(order), {key: frozenset(cases) for key, cases in runs.items()}, dict(versions))


def merged(old: Footprints, new: Footprints) -> Footprints:
    """``old`` with every case ``new`` recorded replaced; old cases keep their place, new ones go at the end."""
    by_case = old.by_case()
    by_case.update(new.by_case())
    order = [*old.cases, *(case for case in new.cases if case not in set(old.cases))]
    return _from_cases(order, by_case, dict(new.versions) or dict(old.versions))
