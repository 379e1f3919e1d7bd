"""What one audited case compiled: graph breaks per call, phases with their recompiles, recompile-limit hits."""

from __future__ import annotations

import dataclasses
from typing import Any

from compile_audit.probe.ddp_splits import GraphSplit
from compile_audit.probe.graph_breaks import GraphBreakReport
from compile_audit.probe.recompiles import PhaseRecord, Recompile, RecompileLimitHit
from compile_audit.rules.roots import Attribution, Root, attribute, explained_roots


@dataclasses.dataclass
class AuditResult:
    explained: list[GraphBreakReport] = dataclasses.field(default_factory=list)  # from explain()
    phases: list[PhaseRecord] = dataclasses.field(default_factory=list)
    steady_state_from: str | None = None  # after this phase, nothing may compile
    # The top-level packages of the code under test ("peft"): a root outside them names the innermost frame of
    # theirs on its stack.
    under_test: tuple[str, ...] = ()

    @property
    def audited(self) -> bool:
        return bool(self.phases or self.explained)

    @property
    def attribution(self) -> Attribution:
        """Roots with their consequences, and the recompiles and limit hits that are judged on their own."""
        return attribute(self.phases, self.under_test)

    @property
    def roots(self) -> list[Root]:
        explained = explained_roots((report.call, brk) for report in self.explained for brk in report.breaks)
        return explained + self.attribution.roots

    @property
    def graph_breaks(self) -> list[GraphBreakReport]:
        """Breaks counted by explain() calls, then those hit while compiling each phase."""
        return self.explained + [p.break_report() for p in self.phases if p.graph_breaks]

    @property
    def graph_break_count(self) -> int:
        """The places Dynamo stopped (roots); the frames each one sent back to Python are its consequences."""
        return len(self.roots)

    @property
    def break_records(self) -> int:
        """Every graph-break record Dynamo made, consequences included (the report's raw count)."""
        return sum(report.count for report in self.graph_breaks)

    @property
    def break_signatures(self) -> dict[str, Root]:
        """Each root's identity with the root."""
        found: dict[str, Root] = {}
        for root in self.roots:
            found.setdefault(root.identity, root)
        return found

    @property
    def ddp_splits(self) -> list[tuple[str, GraphSplit]]:
        """(phase, split) of every graph DDPOptimizer split at bucket boundaries (not graph breaks)."""
        return [(phase.name, split) for phase in self.phases for split in phase.ddp_splits]

    @property
    def ddp_split_count(self) -> int:
        return sum(split.count for _, split in self.ddp_splits)

    @property
    def all_recompiles(self) -> list[Recompile]:
        """Every recompile, consequences of roots included."""
        return [r for phase in self.phases for r in phase.recompiles]

    @property
    def recompiles(self) -> list[Recompile]:
        """The recompiles judged on their own: not those of frames compiled only because a root sent a caller back
        to Python (they are that root's consequences)."""
        return self.attribution.recompiles

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
        """Recompile-limit hits judged on their own (a root's consequences are listed under it)."""
        return self.attribution.limit_hits

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

    def to_dict(self) -> dict[str, Any]:
        judged = {id(r) for r in self.recompiles}
        return {
            "graph_breaks": {
                "count": self.graph_break_count,
                "signatures": sorted(self.break_signatures),
                "roots": [root.to_dict() for root in self.roots],
                "records": self.break_records,
                "calls": [report.to_dict() for report in self.graph_breaks],
            },
            "recompiles": {
                "count": len(self.recompiles),
                "unexpected": len(self.unexpected_recompiles),
                "signatures": sorted(self.recompile_signatures),
                # Every frame Dynamo gave up on, a root's consequences included: each fails the case.
                "limit_hits": [hit.to_dict() for phase in self.phases for hit in phase.limit_hits],
                "events": [{**r.to_dict(), "consequence": id(r) not in judged} for r in self.all_recompiles],
                "consequences": len(self.all_recompiles) - len(self.recompiles),
            },
            "ddp_splits": {"count": self.ddp_split_count},
            "steady_state_compiles": sum(p.frames_compiled for p in self.steady_state_compiles),
            "frames_compiled": self.frames_compiled,
            "compile_seconds": round(self.compile_seconds, 3),
            "phases": [p.to_dict() for p in self.phases],
        }
