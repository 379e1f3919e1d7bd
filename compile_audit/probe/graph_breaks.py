"""Graph breaks of one call, counted with ``torch._dynamo.explain``, each with reason and location."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

import torch._dynamo

from compile_audit.locations import location
from compile_audit.probe.dynamic import dynamic_shapes


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    reason: str  # one line: Dynamo's headline and explanation
    location: str  # innermost user frame, path:line; for a frame run eagerly, the line of that frame
    source: str  # the source line at that location
    function: str = "?"  # the function of that frame
    # A break Dynamo could not resume from: it ran this whole function eagerly ("forward at peft/peft_model.py:1903").
    eager_function: str = ""
    graph_break_id: str = ""  # torch's stable id of the graph-break type (gb0025), where torch has one
    # For a frame run eagerly because of a break below its own line: where Dynamo stopped, and in which function.
    stopped_at: str = ""
    stopped_in: str = ""
    # Per occurrence, not part of what makes two breaks the same: the frame compile it ended ("3/0"), and the user
    # frames from that frame down to the break, outermost first ("peft/peft_model.py:1915 in forward").
    compile_id: str = dataclasses.field(default="", compare=False)
    stack: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    @property
    def kind(self) -> str:
        """Dynamo's headline (its graph-break type), e.g. ``Unsupported method call``; for a frame Dynamo ran
        eagerly, ``Frame run eagerly (<headline>)``."""
        headline = self.reason.split(": ", 1)[0]
        return f"Frame run eagerly ({headline})" if self.eager_function else headline


@dataclasses.dataclass
class GraphBreakReport:
    call: str  # what was explained, e.g. "train forward"
    breaks: list[GraphBreak]
    graph_count: int

    @property
    def count(self) -> int:
        return len(self.breaks)

    def grouped(self) -> list[tuple[GraphBreak, int]]:
        """Identical breaks (a layer repeated N times breaks N times) folded into one line with a count."""
        return collections.Counter(self.breaks).most_common()

    def to_dict(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "count": self.count,
            "graph_count": self.graph_count,
            "breaks": [
                {
                    "reason": b.reason,
                    "location": b.location,
                    "source": b.source,
                    "function": b.function,
                    "occurrences": n,
                    **({"eager_function": b.eager_function} if b.eager_function else {}),
                    **({"graph_break_id": b.graph_break_id} if b.graph_break_id else {}),
                    **({"stopped_at": b.stopped_at, "stopped_in": b.stopped_in} if b.stopped_at else {}),
                }
                for b, n in self.grouped()
            ],
        }


# explain() reports some breaks by the bytecode handler's internal name; say what it means.
_TERSE_REASONS = {"generic_jump": "Data-dependent branching: `if`/`while` on a tensor value"}


def one_line_reason(reason: str) -> str:
    """Dynamo's multi-line reason (headline, Explanation, Hints, debug context) as one line."""
    lines = [line.strip() for line in str(reason).strip().splitlines() if line.strip()]
    if not lines:
        return "(no reason given)"
    headline = lines[0]
    for prefix, meaning in _TERSE_REASONS.items():
        if headline.startswith(prefix):
            return f"{meaning} ({headline})"
    explanation = next((line for line in lines[1:] if line.startswith("Explanation:")), None)
    if explanation:
        return f"{headline}: {explanation.removeprefix('Explanation:').strip()}"
    return headline


def graph_break_id(reason: str) -> str:
    """torch's id of the break's type (``gb0025``) from its registry, keyed by the headline; "" where it has none."""
    try:
        from torch._dynamo.exc import _load_gb_type_to_gb_id_map

        known = _load_gb_type_to_gb_id_map()
    except (ImportError, OSError, ValueError):  # an older torch without the registry
        return ""
    found = known.get(reason.split(": ", 1)[0].strip())
    return str(found).lower() if found else ""


def stack_entry(filename: str, lineno: int | None, function: str) -> str:
    """One user frame of a break's stack: ``peft/peft_model.py:1915 in forward``."""
    return f"{location(filename, lineno)} in {function}"


def _user_frame(user_stack: list[Any]) -> tuple[str, str, str]:
    if not user_stack:
        return "<unknown>:?", "", "?"
    frame = user_stack[-1]
    return location(frame.filename, frame.lineno), (frame.line or "").strip(), getattr(frame, "name", "?") or "?"


def graph_break_of(compile_reason: Any, compile_id: str = "") -> GraphBreak | None:
    """The break behind one compiled graph (``gm.compile_subgraph_reason``), as explain() reads it."""
    if compile_reason is None or not getattr(compile_reason, "graph_break", False):
        return None
    user_stack = list(compile_reason.user_stack)
    where, source, function = _user_frame(user_stack)
    reason = one_line_reason(compile_reason.reason)
    stack = tuple(stack_entry(f.filename, f.lineno, getattr(f, "name", "?") or "?") for f in user_stack)
    return GraphBreak(
        reason=reason,
        location=where,
        source=source,
        function=function,
        graph_break_id=graph_break_id(reason),
        compile_id=compile_id,
        stack=stack,
    )


def find_graph_breaks(
    fn: Callable[..., Any], *args: Any, call: str = "call", dynamic: bool | None = None, **kwargs: Any
) -> GraphBreakReport:
    """Run ``fn(*args, **kwargs)`` under ``torch._dynamo.explain`` and list every graph break.

    ``explain`` resets Dynamo first, so run it before, not during, a compiled run you are auditing.
    """
    with dynamic_shapes(dynamic):
        explanation = torch._dynamo.explain(fn)(*args, **kwargs)
    breaks = [graph_break_of(reason) for reason in explanation.break_reasons]
    return GraphBreakReport(call=call, breaks=[b for b in breaks if b], graph_count=explanation.graph_count)
