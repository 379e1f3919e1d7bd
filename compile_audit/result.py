"""What one audited case compiled: graph breaks per call, phases with their recompiles, recompile-limit hits."""

from __future__ import annotations

import dataclasses
from typing import Any

from compile_audit.ddp_splits import GraphSplit
from compile_audit.graph_breaks import GraphBreak, GraphBreakReport
from compile_audit.recompiles import PhaseRecord, Recompile, RecompileLimitHit


@dataclasses.dataclass
class AuditResult:
    explained: list[GraphBreakReport] = dataclasses.field(default_factory=list)  # from explain()
    phases: list[PhaseRecord] = dataclasses.field(default_factory=list)
    steady_state_from: str | None = None  # after this phase, nothing may compile

    @property
    def audited(self) -> bool:
        return bool(self.phases or self.explained)

    @property
    def graph_breaks(self) -> list[GraphBreakReport]:
        """Breaks counted by explain() calls, then those hit while compiling each phase."""
        return self.explained + [p.break_report() for p in self.phases if p.graph_breaks]

    @property
    def graph_break_count(self) -> int:
        return sum(report.count for report in self.graph_breaks)

    @property
    def break_signatures(self) -> dict[str, GraphBreak]:
        """Each distinct break signature with its first occurrence."""
        found: dict[str, GraphBreak] = {}
        for report in self.graph_breaks:
            for brk in report.breaks:
                found.setdefault(brk.signature, brk)
        return found

    @property
    def ddp_splits(self) -> list[tuple[str, GraphSplit]]:
        """(phase, split) of every graph DDPOptimizer split at bucket boundaries (not graph breaks)."""
        return [(phase.name, split) for phase in self.phases for split in phase.ddp_splits]

    @property
    def ddp_split_count(self) -> int:
        return sum(split.count for _, split in self.ddp_splits)

    @property
    def recompiles(self) -> list[Recompile]:
        return [r for phase in self.phases for r in phase.recompiles]

    @property
    def unexpected_recompiles(self) -> list[Recompile]:
        return [r for r in self.recompiles if not r.expected]

    @property
    def recompile_signatures(self) -> dict[str, Recompile]:
        """Each distinct signature of an unexpected recompile with its first occurrence."""
        found: dict[str, Recompile] = {}
        for recompile in self.unexpected_recompiles:
            found.setdefault(recompile.signature, recompile)
        return found

    @property
    def limit_hits(self) -> list[RecompileLimitHit]:
        return [h for phase in self.phases for h in phase.limit_hits]

    @property
    def steady_state_compiles(self) -> list[PhaseRecord]:
        if self.steady_state_from is None:
            return []
        names = [p.name for p in self.phases]
        if self.steady_state_from not in names:
            raise ValueError(f"steady_state_from={self.steady_state_from!r} is not a phase of {names}")
        return [p for p in self.phases[names.index(self.steady_state_from) + 1 :] if p.frames_compiled]

    @property
    def frames_compiled(self) -> int:
        return sum(p.frames_compiled for p in self.phases)

    @property
    def compile_seconds(self) -> float:
        return sum(p.compile_seconds for p in self.phases)

    def describe_breaks(self, limit: int = 20) -> list[str]:
        lines = []
        for report in self.graph_breaks:
            for brk, occurrences in report.grouped():
                times = f" x{occurrences}" if occurrences > 1 else ""
                eager = f"Dynamo ran {brk.eager_function} eagerly: " if brk.eager_function else ""
                lines.append(f"{brk.location} [{report.call}{times}]: {eager}{brk.reason}")
                if brk.source:
                    lines.append(f"    {brk.source}")
        return lines[: 2 * limit] + ([f"... {len(lines) // 2 - limit} more"] if len(lines) > 2 * limit else [])

    def to_dict(self) -> dict[str, Any]:
        return {
            "graph_breaks": {
                "count": self.graph_break_count,
                "signatures": sorted(self.break_signatures),
                "calls": [report.to_dict() for report in self.graph_breaks],
            },
            "recompiles": {
                "count": len(self.recompiles),
                "unexpected": len(self.unexpected_recompiles),
                "signatures": sorted(self.recompile_signatures),
                "limit_hits": [hit.to_dict() for hit in self.limit_hits],
                "events": [r.to_dict() for r in self.recompiles],
            },
            "ddp_splits": {"count": self.ddp_split_count},
            "steady_state_compiles": sum(p.frames_compiled for p in self.steady_state_compiles),
            "frames_compiled": self.frames_compiled,
            "compile_seconds": round(self.compile_seconds, 3),
            "phases": [p.to_dict() for p in self.phases],
        }
