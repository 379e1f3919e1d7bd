"""The generated note of a budget entry: Dynamo's reasons for what the budget allows, condensed."""

from __future__ import annotations

import collections

from compile_audit.result import AuditResult

MOST_COMMON_GUARDS = 3


def auto_note(result: AuditResult) -> str:
    """Each distinct break once (reason kind, location, count), the most common unexpected guard failures, then
    the DDP splits."""
    parts = []
    for report in result.graph_breaks:
        for brk, occurrences in report.grouped():
            parts.append(f"{brk.kind} at {brk.location} (x{occurrences})")
    guards = collections.Counter(
        recompile.failures[0].kind if recompile.failures else "(no guard failure recorded)"
        for recompile in result.unexpected_recompiles
    )
    if guards:
        common = "; ".join(f"{guard} (x{n})" for guard, n in guards.most_common(MOST_COMMON_GUARDS))
        parts.append(f"{sum(guards.values())} unexpected recompile(s), most common guard failures: {common}")
    if result.ddp_split_count:
        graphs = len(result.ddp_splits)
        parts.append(
            f"{result.ddp_split_count} DDP split(s) of {graphs} graph(s): DDPOptimizer intentional graph-break at"
            " DDP gradient bucket boundaries (not a graph break: the pieces stay compiled)"
        )
    return "; ".join(dict.fromkeys(parts))
