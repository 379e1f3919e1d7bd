"""Footprints of many cases, committed as data, and the cases a change to the package under test selects.

The data file (JSON) maps each case id to the package files it ran (``compile_audit.footprint``), with the versions
it was recorded on::

    {"format": 1, "versions": {"peft": "0.21.2", ...},
     "files": ["peft/peft_model.py", "peft/tuners/ia3/layer.py", ...],
     "cases": {"llama-tiny/ia3/merge": [0, 1, ...], ...}}

Selection (:func:`select`): a change selects every case whose footprint holds a changed file. A changed file that no
footprint holds, or one that most cases run (``peft_model.py``, ``tuners_utils.py``), selects everything.

    python -m compile_audit.change_selection record REPORT... --output tests/footprints.json
    python -m compile_audit.change_selection changed BASE_PACKAGE_DIR HEAD_PACKAGE_DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from compile_audit.files import write_text_atomic

FORMAT = 1
# A changed file that more than this share of the recorded cases runs selects every case: selecting "most" is
# selecting all, and says so.
EVERYTHING_SHARE = 0.5


class FootprintsError(ValueError):
    """A malformed footprints file or report; the message names the file and what is wrong."""


@dataclasses.dataclass(frozen=True)
class Footprints:
    cases: Mapping[str, frozenset[str]]  # case id -> package-relative files it ran
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def cases_running(self, path: str) -> list[str]:
        return sorted(case for case, files in self.cases.items() if path in files)

    def to_json(self) -> str:
        files = sorted(set().union(*self.cases.values())) if self.cases else []
        index = {path: number for number, path in enumerate(files)}
        lines = [
            "{",
            f'"format": {FORMAT},',
            f'"versions": {json.dumps(dict(sorted(self.versions.items())))},',
            '"files": [',
            ",\n".join(json.dumps(path) for path in files),
            "],",
            '"cases": {',
            ",\n".join(
                f"{json.dumps(case)}: {json.dumps(sorted(index[p] for p in self.cases[case]))}"
                for case in sorted(self.cases)
            ),
            "}",
            "}",
        ]
        return "\n".join(lines) + "\n"


def load(path: Path) -> Footprints:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FootprintsError(f"{path}: no such footprints file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise FootprintsError(f"{path}: unreadable footprints file: {error}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FootprintsError(f"{path}: not a footprints file of format {FORMAT}")
    files, cases = data.get("files"), data.get("cases")
    if not isinstance(files, list) or not isinstance(cases, dict):
        raise FootprintsError(f"{path}: 'files' must be a list and 'cases' an object")
    footprints = {}
    for case, numbers in cases.items():
        if not isinstance(numbers, list) or not all(isinstance(n, int) and 0 <= n < len(files) for n in numbers):
            raise FootprintsError(f"{path}: case {case!r}: expected indexes into 'files' (0 to {len(files) - 1})")
        footprints[case] = frozenset(files[n] for n in numbers)
    return Footprints(footprints, dict(data.get("versions") or {}))


def from_reports(reports: Iterable[Mapping[str, Any]]) -> Footprints:
    """The footprints of every audited case of compile reports (``--compile-report``); later reports win."""
    cases: dict[str, frozenset[str]] = {}
    versions: dict[str, str] = {}
    for report in reports:
        versions.update(report.get("versions") or {})
        for record in report.get("cases", []):
            footprint = record.get("footprint")
            if isinstance(footprint, dict) and footprint:
                cases[record["id"]] = frozenset(footprint)
    return Footprints(cases, versions)


def merged(old: Footprints, new: Footprints) -> Footprints:
    """``old`` with every case ``new`` recorded replaced; the versions are those of ``new``."""
    return Footprints({**old.cases, **new.cases}, dict(new.versions) or dict(old.versions))


@dataclasses.dataclass(frozen=True)
class Selection:
    everything: bool  # every case (the full matrix)
    cases: tuple[str, ...]  # when not everything: the cases the change selects
    reasons: tuple[str, ...]  # one line per changed file: how many cases run it, or why it selects everything


def select(footprints: Footprints, changed: Sequence[str]) -> Selection:
    selected: set[str] = set()
    reasons, everything = [], False
    total = len(footprints.cases)
    for path in sorted(changed):
        running = footprints.cases_running(path)
        if not running:
            everything = True
            reasons.append(f"{path}: in no case's footprint (a new file, or one no recorded case ran): every case")
        elif len(running) > EVERYTHING_SHARE * total:
            everything = True
            reasons.append(
                f"{path}: run by {len(running)} of {total} cases, more than {EVERYTHING_SHARE:.0%}: every case"
            )
        else:
            selected.update(running)
            reasons.append(f"{path}: run by {len(running)} case(s)")
    return Selection(everything, () if everything else tuple(sorted(selected)), tuple(reasons))


def _digests(root: Path) -> dict[str, str]:
    package = root.name
    return {
        f"{package}/{path.relative_to(root).as_posix()}": hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def changed_files(base_root: Path, head_root: Path) -> list[str]:
    """The package-relative Python files that differ between two installed copies of a package (added, removed or
    edited), e.g. ``peft/tuners/ia3/layer.py``."""
    for root in (base_root, head_root):
        if not (root / "__init__.py").is_file():
            raise FootprintsError(f"{root}: not a package directory (no __init__.py)")
    base, head = _digests(base_root), _digests(head_root)
    return sorted(path for path in base.keys() | head.keys() if base.get(path) != head.get(path))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compile_audit.change_selection", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("record", help="footprints of compile reports into the footprints file")
    record.add_argument("reports", nargs="+", type=Path)
    record.add_argument("--output", required=True, type=Path, help="the footprints file (merged when it exists)")
    changed = commands.add_parser("changed", help="the files that differ between two copies of a package")
    changed.add_argument("base", type=Path)
    changed.add_argument("head", type=Path)
    choose = commands.add_parser("select", help="what a change selects, as JSON (scripts/gate)")
    choose.add_argument("base", type=Path, help="the base side's installed package directory")
    choose.add_argument("head", type=Path, help="the head side's installed package directory")
    choose.add_argument("--footprints", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "changed":
            for path in changed_files(args.base, args.head):
                print(path)
            return 0
        if args.command == "select":
            files = changed_files(args.base, args.head)
            selection = select(load(args.footprints), files)
            print(json.dumps({"changed": files, **dataclasses.asdict(selection)}))
            return 0
        reports = []
        for path in args.reports:
            try:
                reports.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError) as error:
                raise FootprintsError(f"{path}: unreadable compile report: {error}") from None
        new = from_reports(reports)
        if not new.cases:
            raise FootprintsError(f"{', '.join(map(str, args.reports))}: no case with a footprint")
        result = merged(load(args.output), new) if args.output.exists() else new
        write_text_atomic(args.output, result.to_json())
        print(f"{args.output}: {len(new.cases)} case(s) recorded, {len(result.cases)} in all")
        return 0
    except FootprintsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
