"""The run report: one record per case, as JSON (``--compile-report``) and as a terminal table.

Schema ``compile-audit-report/1`` (documented in README.md)::

    {"schema": ..., "created": ISO time, "versions": {"torch": ..., ...},
     "cases": [{"id", "model", "method", "scenario", "device", "backend",
                "status": "passed" | "failed" | "skipped" | "xfailed" | "error", "message": str | null,
                "graph_breaks": {"count", "budget", "calls": [...]},
                "recompiles": {"count", "budget", "unexpected", "unexpected_budget", "events": [...]},
                "steady_state_compiles", "compile_seconds", "wall_seconds", "phases": [...],
                "benchmarks": {...}}]}
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

SCHEMA = "compile-audit-report/1"


def build_report(cases: list[dict[str, Any]], versions: dict[str, str]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions,
        "cases": sorted(cases, key=lambda c: c["id"]),
    }


def write_report(path: str | Path, report: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n", encoding="utf-8")


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


def _fraction(count: Any, budget: Any) -> str:
    if count is None:
        return "-"
    return f"{count}/{'exp' if budget is None else budget}"


def summary_table(cases: list[dict[str, Any]]) -> list[str]:
    """Fixed-width lines: case, graph breaks/budget, recompiles/budget (unexpected), seconds, status."""
    rows = [("case", "breaks", "recompiles", "unexpected", "seconds", "status")]
    for case in sorted(cases, key=lambda c: c["id"]):
        breaks = case.get("graph_breaks") or {}
        recompiles = case.get("recompiles") or {}
        seconds = case.get("wall_seconds")
        rows.append(
            (
                case["id"],
                _fraction(breaks.get("count"), breaks.get("budget", 0)),
                _fraction(recompiles.get("count"), recompiles.get("budget")),
                _fraction(recompiles.get("unexpected"), recompiles.get("unexpected_budget", 0)),
                "-" if seconds is None else f"{seconds:.1f}",
                case["status"],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
