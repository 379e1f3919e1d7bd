"""The run report: one record per case, as JSON (``--compile-report``) and as a terminal table, and the one
reader of reports that the diff and the matrix share.

Schema ``compile-audit-report/2`` (documented in README.md)::

    {"schema": ..., "created": ISO time, "versions": {"torch": ..., ...},
     "cases": [{"id", "model", "method", "scenario", "device", "backend",
                "status": "passed" | "failed" | "skipped" | "xfailed" | "error", "message": str | null,
                "graph_breaks": {"count", "budget", "calls": [...]},
                "recompiles": {"count", "budget", "unexpected", "unexpected_budget", "events": [...]},
                "ddp_splits": {"count", "budget"},
                "steady_state_compiles", "compile_seconds", "wall_seconds", "phases": [...],
                "benchmarks": {...}}]}
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compile_audit.files import write_text_atomic
from compile_audit.rules.versions import DEFAULT_GATED

SCHEMA = "compile-audit-report/2"
REQUIRED_FIELDS = ("id", "status")


def build_report(
    cases: list[dict[str, Any]], versions: dict[str, str], gated: Sequence[str] = DEFAULT_GATED
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": versions,
        "gated": list(gated),
        "cases": sorted(cases, key=lambda c: c["id"]),
    }


def write_report(path: str | Path, report: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(report, indent=1, sort_keys=False) + "\n")


def load_report(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: cannot read the report: {error}") from None
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        found = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ValueError(f"{path}: not a compile report (schema {found!r}, expected {SCHEMA!r})")
    return report


# ----------------------------------------------------------------------------- reading cases


@dataclasses.dataclass
class ReportCases:
    """A report's versions and cases (in file order), validated; ``by_id`` for lookups."""

    path: Path
    report: dict[str, Any]
    cases: list[dict[str, Any]]

    @property
    def versions(self) -> dict[str, Any]:
        versions = self.report.get("versions")
        return versions if isinstance(versions, dict) else {}

    @property
    def by_id(self) -> dict[str, dict[str, Any]]:
        return {case["id"]: case for case in self.cases}

    @property
    def audited_count(self) -> int:
        return sum(audited(case) for case in self.cases)


def read_cases(path: str | Path) -> ReportCases:
    """Every case of a report; ValueError naming the file and the case when one is unusable."""
    report = load_report(path)
    cases = report.get("cases")
    if not isinstance(cases, list):
        raise ValueError(f"{path}: 'cases' is not a list")
    seen: set[str] = set()
    for index, case in enumerate(cases):
        missing = [k for k in REQUIRED_FIELDS if not isinstance(case, dict) or not isinstance(case.get(k), str)]
        if missing:
            raise ValueError(f"{path}: case #{index} has no {', '.join(missing)}")
        if case["id"] in seen:
            raise ValueError(f"{path}: case {case['id']!r} appears twice")
        seen.add(case["id"])
    return ReportCases(Path(path), report, cases)


def section(case: dict[str, Any], name: str) -> dict[str, Any]:
    value = case.get(name)
    return value if isinstance(value, dict) else {}


def count(case: dict[str, Any], name: str, key: str) -> int:
    value = section(case, name).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def audited(case: dict[str, Any]) -> bool:
    """Whether the case was compiled and measured (a skip, or a crash before compiling, was not). Its counts compare
    with another run's, a known failure's included: it stops where it always stops, at the end of the phase that hit
    the recompile limit, so a new break in it is a regression like any other."""
    return bool(case.get("audited", bool(case.get("phases"))))


def recompile_limit_hits(case: dict[str, Any]) -> list[dict[str, Any]]:
    hits = section(case, "recompiles").get("limit_hits")
    return [hit for hit in hits if isinstance(hit, dict)] if isinstance(hits, list) else []


def clean(case: dict[str, Any]) -> bool:
    """Compiles cleanly: audited, passed, no graph break, no unexpected recompile, Dynamo never gave up."""
    return (
        audited(case)
        and case.get("status") == "passed"
        and count(case, "graph_breaks", "count") == 0
        and count(case, "recompiles", "unexpected") == 0
        and not recompile_limit_hits(case)
    )


# ----------------------------------------------------------------------------- terminal table


def _fraction(value: Any, budget: Any) -> str:
    if value is None:
        return "-"
    return f"{value}/{'exp' if budget is None else budget}"


def summary_table(cases: list[dict[str, Any]]) -> list[str]:
    """Fixed-width lines: case, graph breaks/budget, DDP splits/budget (when a case has any), recompiles/budget
    (unexpected), seconds, status."""
    with_splits = any(count(c, "ddp_splits", "count") or count(c, "ddp_splits", "budget") for c in cases)
    rows = [("case", "breaks", *(("splits",) if with_splits else ()), "recompiles", "unexpected", "seconds", "status")]
    for case in sorted(cases, key=lambda c: c["id"]):
        breaks, recompiles = section(case, "graph_breaks"), section(case, "recompiles")
        splits = section(case, "ddp_splits")
        seconds = case.get("wall_seconds")
        status = case["status"] + (" (recompile limit hit)" if recompile_limit_hits(case) else "")
        rows.append(
            (
                case["id"],
                _fraction(breaks.get("count"), breaks.get("budget", 0)),
                *((_fraction(splits.get("count"), splits.get("budget", 0)),) if with_splits else ()),
                _fraction(recompiles.get("count"), recompiles.get("budget")),
                _fraction(recompiles.get("unexpected"), recompiles.get("unexpected_budget", 0)),
                "-" if seconds is None else f"{seconds:.1f}",
                status,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
