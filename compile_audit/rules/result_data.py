"""An AuditResult as plain data (JSON-able) and back, whole: for audits run in another process (a rank)."""

from __future__ import annotations

import dataclasses
from typing import Any

from compile_audit.probe.ddp_splits import GraphSplit
from compile_audit.probe.graph_breaks import GraphBreak, GraphBreakReport
from compile_audit.probe.guards import GuardFailure
from compile_audit.probe.recompiles import PhaseRecord, Recompile, RecompileLimitHit
from compile_audit.rules.result import AuditResult


def result_to_data(result: AuditResult) -> dict[str, Any]:
    return {
        "explained": [dataclasses.asdict(report) for report in result.explained],
        "phases": [dataclasses.asdict(phase) for phase in result.phases],
        "steady_state_from": result.steady_state_from,
    }


def _report(data: dict[str, Any]) -> GraphBreakReport:
    return GraphBreakReport(data["call"], [GraphBreak(**b) for b in data["breaks"]], data["graph_count"])


def _recompile(data: dict[str, Any]) -> Recompile:
    failures = tuple(GuardFailure(**f) for f in data["failures"])
    return Recompile(**{**data, "failures": failures})


def _phase(data: dict[str, Any]) -> PhaseRecord:
    return PhaseRecord(
        **{
            **data,
            "recompiles": [_recompile(r) for r in data["recompiles"]],
            "graph_breaks": [GraphBreak(**b) for b in data["graph_breaks"]],
            "limit_hits": [RecompileLimitHit(**h) for h in data["limit_hits"]],
            "ddp_splits": [GraphSplit(**{**s, "bucket_params": tuple(s["bucket_params"])}) for s in data["ddp_splits"]],
        }
    )


def result_from_data(data: dict[str, Any]) -> AuditResult:
    return AuditResult(
        explained=[_report(r) for r in data["explained"]],
        phases=[_phase(p) for p in data["phases"]],
        steady_state_from=data["steady_state_from"],
    )
