"""The run report: one record per case, as JSON (``--compile-report``) and as a terminal table, and the one
reader of reports that the diff, the matrix, merge and the tools share.

The format is docs/report-schema.md (schema ``compile-audit-report/3``); ``read_cases`` gives a report's cases as
typed records (compile_audit.artifacts.records). It also reads ``compile-audit-report/2``, the schema before cases
recorded what causes' shared allowances held: what a /2 report lacks reads as empty, and no reader sees the difference.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from compile_audit.artifacts.json_fields import ReportError, Where, field_value, read_only_mapping, texts
from compile_audit.artifacts.records import CaseRecord
from compile_audit.files import write_text_atomic
from compile_audit.rules.versions import DEFAULT_GATED

SCHEMA = "compile-audit-report/3"
# The older schemas this reader accepts, each with the case fields it never had. Those fields are left out of its
# cases, so that they read as empty: the few /2 files written while allowed_by_causes was being added carry it as
# text, which no reader parses.
OLDER_SCHEMAS = {"compile-audit-report/2": ("allowed_by_causes",)}
READABLE_SCHEMAS = (SCHEMA, *OLDER_SCHEMAS)


def build_report(
    cases: list[dict[str, Any]], versions: dict[str, str], gated: Sequence[str] = DEFAULT_GATED, schema: str = SCHEMA
) -> dict[str, Any]:
    return {
        "schema": schema,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": versions,
        "gated": list(gated),
        "cases": sorted(cases, key=lambda c: c["id"]),
    }


def write_report(path: str | Path, report: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(report, indent=1, sort_keys=False) + "\n")


def load_report(path: str | Path) -> dict[str, Any]:
    """The report's JSON, of a schema this reader accepts; ReportError naming the file otherwise."""
    path = Path(path)
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ReportError(f"{path}: cannot read the report: {error}") from None
    _schema(report, Where(str(path)))
    return report


def _schema(data: Any, where: Where) -> str:
    found = data.get("schema") if isinstance(data, Mapping) else type(data).__name__
    if found not in READABLE_SCHEMAS:
        expected = " or ".join(map(repr, READABLE_SCHEMAS))
        raise where.error(f"not a compile report this checkout reads (schema {found!r}, expected {expected})")
    return found


# ----------------------------------------------------------------------------- reading cases


@dataclasses.dataclass(frozen=True)
class ReportCases:
    """A report, validated: its own fields and its cases (in file order), typed."""

    path: Path
    schema: str
    created: str | None
    versions: Mapping[str, str]  # library -> version
    gated: tuple[str, ...]  # the libraries whose versions decide whether a budget is current
    cases: tuple[CaseRecord, ...]
    data: Mapping[str, Any]  # the JSON as read, for the tools that write a report from it (merge, the gate)

    @property
    def by_id(self) -> dict[str, CaseRecord]:
        return {case.id: case for case in self.cases}

    @property
    def audited_count(self) -> int:
        return sum(case.audited for case in self.cases)


def read_cases(path: str | Path) -> ReportCases:
    """Every case of a report; ReportError (a ValueError) naming the file, the case and the field when one is
    unusable."""
    return parse_report(load_report(path), path)


def parse_report(data: Any, path: str | Path) -> ReportCases:
    """A report's JSON, already read from ``path``, as typed records; ReportError as ``read_cases``."""
    where = Where(str(path))
    schema = _schema(data, where)
    cases = data.get("cases")
    if not isinstance(cases, list):
        raise where.error("'cases' is not a list")
    lacking = OLDER_SCHEMAS.get(schema, ())
    records, seen = [], set()
    for index, case in enumerate(cases):
        missing = [key for key in ("id", "status") if not isinstance(case, dict) or not isinstance(case.get(key), str)]
        if missing:
            raise where.error(f"case #{index} has no {', '.join(missing)}")
        if case["id"] in seen:
            raise where.error(f"case {case['id']!r} appears twice")
        seen.add(case["id"])
        kept = {key: value for key, value in case.items() if key not in lacking}
        records.append(CaseRecord.from_dict(kept, dataclasses.replace(where, case=f"case #{index}")))
    versions = read_only_mapping(data, "versions", where)
    for name in versions:
        field_value(versions, name, where.at("versions"), str, "")
    return ReportCases(
        path=Path(path),
        schema=schema,
        created=field_value(data, "created", where, str, None, optional=True),
        versions=versions,
        gated=texts(data, "gated", where) if "gated" in data else tuple(versions),  # absent: every library it names
        cases=tuple(records),
        data=MappingProxyType(data),
    )


# ----------------------------------------------------------------------------- terminal table
# The session's records: a case never audited (skipped in setup, say) has no counts ("-").


def _fraction(value: Any, budget: Any) -> str:
    if value is None:
        return "-"
    return f"{value}/{'exp' if budget is None else budget}"


def summary_table(cases: Sequence[CaseRecord]) -> list[str]:
    """Fixed-width lines: case, graph breaks/budget, DDP splits/budget (when a case has any), recompiles/budget
    (unexpected), seconds, status; a case never audited has no counts ("-")."""
    with_splits = any(case.ddp_splits.count or case.ddp_splits.budget for case in cases)
    rows = [("case", "breaks", *(("splits",) if with_splits else ()), "recompiles", "unexpected", "seconds", "status")]
    for case in sorted(cases, key=lambda c: c.id):
        breaks, recompiles, splits = case.graph_breaks, case.recompiles, case.ddp_splits
        counts = case.audited
        status = case.status + (" (recompile limit hit)" if recompiles.limit_hits else "")
        rows.append(
            (
                case.id,
                _fraction(breaks.count if counts else None, breaks.budget),
                *((_fraction(splits.count if counts else None, splits.budget),) if with_splits else ()),
                _fraction(recompiles.count if counts else None, recompiles.budget),
                _fraction(recompiles.unexpected if counts else None, recompiles.unexpected_budget),
                "-" if case.wall_seconds is None else f"{case.wall_seconds:.1f}",
                status,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
