"""The report against Dynamo's own record of a case: every break Dynamo recorded must be in the report.

The probe counts breaks from the graphs a backend receives, the frames Dynamo ran eagerly and its graph-break log.
Dynamo keeps two records the probe does not count from, so they can catch it missing one:

- its graph-break counter (``torch._dynamo.utils.counters["graph_break"]``), per phase. It leaves some breaks out
  (a data-dependent branch), so it is a floor: the report may hold more, never fewer;
- the resume functions it compiles (``torch_dynamo_resume_in_<function>_at_<line>``): each is where it went on after
  a break in that function at that line, so a break of the report (in that phase or an earlier one) must pass
  through that line or have ended a compile of that function.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from compile_audit.frames import Frame
from compile_audit.probe.recompiles import PhaseRecord


@dataclasses.dataclass(frozen=True)
class MissedBreaks:
    """Breaks Dynamo recorded in a phase that the report lacks: how many, and where they were, where known."""

    phase: str
    count: int
    where: tuple[str, ...]

    def describe(self) -> str:
        return f"[{self.phase}] {self.count} graph break(s): " + "; ".join(self.where)


def _own_function(code: str) -> tuple[str, str]:
    """(function, file) of a compiled code ("forward at f.py:12"); a resume function counts as the one it resumes."""
    frame = Frame.parse(code)
    return frame.own_function, frame.file


def _accounted(phase: PhaseRecord, codes: dict[str, str]) -> set[str]:
    """What a resume function may be explained by: every ``file:line`` a break of the phase passed through (its own
    location included), every function (``function in file``) a break passed through, and every function whose compile
    a break ended. A break Dynamo places at the output of a graph (a ``requires_grad_()`` tensor leaked by a hook)
    carries only the hook's frame; Dynamo's own traceback may stop above the line it resumed at."""
    found = set()
    for brk in phase.graph_breaks:
        found.add(brk.location)
        for entry in brk.stack:
            where, _, function = entry.partition(" in ")
            found.update({where, f"{function} in {where.rpartition(':')[0]}"})
        if brk.stopped_at:
            found.add(brk.stopped_at)
        if brk.compile_id in codes:
            found.add("{} in {}".format(*_own_function(codes[brk.compile_id])))
    return found


def missed_breaks(phases: Sequence[PhaseRecord]) -> list[MissedBreaks]:
    """Per phase, the breaks Dynamo recorded that the report lacks (none, when they agree)."""
    missed = []
    codes: dict[str, str] = {}
    accounted: set[str] = set()
    for phase in phases:
        codes.update(phase.frame_codes)
        accounted |= _accounted(phase, codes)
        unresumed = [
            f"Dynamo resumed after a break at {where} in {function}, and no break of the report passes there"
            for where, function in phase.resumed_at
            if where not in accounted and f"{function} in {where.rpartition(':')[0]}" not in accounted
        ]
        fewer = phase.dynamo_counted_breaks - len(phase.graph_breaks)
        where = list(unresumed)
        if fewer > 0:
            where.append(
                f"Dynamo's graph-break counter added {phase.dynamo_counted_breaks}, the report has"
                f" {len(phase.graph_breaks)} (run with TORCH_LOGS=graph_breaks to see them)"
            )
        count = max(len(unresumed), fewer)
        if count:
            missed.append(MissedBreaks(phase.name, count, tuple(where)))
    return missed
