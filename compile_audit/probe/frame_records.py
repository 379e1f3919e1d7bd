"""What Dynamo recorded of each frame it tried to compile in a span of work: the frames it ran eagerly, and the compile
work (graph operations, guards) of the frames it compiled.

A graph break Dynamo cannot resume from (one inside an attribute load, say) makes it skip the whole function and run
it eagerly: no graph is compiled for it, so counting the graphs the backend receives misses it. Dynamo records every
frame compile in its compilation metrics (``torch._dynamo.utils``), a failed one with the exception type, reason and
innermost user frame; its graph-break log carries the user traceback, which names the line of the skipped function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import logging
import re
from collections.abc import Iterator
from typing import Any

import torch._dynamo.utils

from compile_audit.frames import Frame
from compile_audit.locations import location, short_path
from compile_audit.probe.graph_breaks import GraphBreak, graph_break_id, one_line_reason, stack_entry
from compile_audit.probe.logged_breaks import LoggedBreak, logged_break

# Types Dynamo raises for a graph break it did not handle; the frame then runs eagerly.
_GRAPH_BREAK_FAILURES = frozenset({"Unsupported", "UserError"})
_TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)$')
_COMPILE_ID = re.compile(r"(\d+)/(\d+)\]?$")
_METRICS_LIMIT = 100_000  # a phase's frame compiles all stay in the window (Dynamo's default keeps 64)


@dataclasses.dataclass(frozen=True)
class FrameWork:
    """Compile work of a span: frames Dynamo compiled, the operations its graphs captured, the guards installed."""

    frames: int = 0
    operations: int = 0
    guards: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class _GraphBreakLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.tracebacks: list[list[tuple[str, int, str]]] = []
        self.breaks: list[LoggedBreak] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        compile_id = compile_id_of(torch._guards.CompileContext.current_compile_id())
        logged = logged_break(text, compile_id)
        if logged is not None:
            self.breaks.append(logged)
        if "\nUser code traceback:\n" not in text:
            return
        frames = []
        for line in text.split("\nUser code traceback:\n", 1)[1].splitlines():
            match = _TRACEBACK_FRAME.match(line)
            if match:
                frames.append((match["file"], int(match["line"]), match["name"]))
        self.tracebacks.append(frames)


def _graph_break_logger() -> logging.Logger:
    from torch._dynamo.symbolic_convert import graph_break_log

    return graph_break_log


class FrameRecords:
    """``with FrameRecords() as records: ...``, then ``records.eager_frames`` and ``records.work``."""

    def __init__(self) -> None:
        self.eager_frames: list[GraphBreak] = []
        self.work = FrameWork()
        self.codes: dict[str, str] = {}  # compile id ("3/0") -> the frame it compiled or tried ("forward at f.py:12")
        self.logged: list[LoggedBreak] = []  # every resumable break in Dynamo's graph-break log
        self.counted_by_dynamo = 0  # the breaks Dynamo's own counter (counters["graph_break"]) added
        # Where Dynamo resumed after a break, from the resume functions it compiled: ("f.py:12", "forward")
        self.resumed_at: list[tuple[str, str]] = []
        self._compiled: dict[str, tuple[str, str]] = {}  # compile id -> (function, file) of the frame compiled

    @contextlib.contextmanager
    def watching(self) -> Iterator[FrameRecords]:
        utils = torch._dynamo.utils
        previous_limit = utils._compilation_metrics.maxlen
        utils.set_compilation_metrics_limit(_METRICS_LIMIT)
        seen = {id(m) for m in utils._compilation_metrics}  # the records kept alive by the deque
        logger = _graph_break_logger()
        handler = _GraphBreakLog()
        level, propagate = logger.level, logger.propagate
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # Dynamo's own handler would print every break to stderr
        counted_before = _dynamo_break_counter()
        try:
            yield self
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
            new = [m for m in utils._compilation_metrics if id(m) not in seen]
            utils.set_compilation_metrics_limit(previous_limit or 64)
            self.logged = handler.breaks
            self.counted_by_dynamo = _dynamo_break_counter() - counted_before
            self._read(new, handler.tracebacks)

    def breaks_without_graph(self, counted: list[GraphBreak]) -> list[GraphBreak]:
        """The logged breaks of frame compiles that ``counted`` has no break for: Dynamo stopped there before any
        operation, so the graph it ended was empty and no backend saw it. One per place and reason per compile (a
        compile Dynamo restarts may log its break again)."""
        accounted = {brk.compile_id for brk in counted if brk.compile_id}
        found: dict[tuple[str, str, str], GraphBreak] = {}
        for logged in self.logged:
            if logged.compile_id in accounted:
                continue
            brk = logged.as_graph_break(self._compiled.get(logged.compile_id))
            found.setdefault((logged.compile_id, brk.location, brk.reason), brk)
        return list(found.values())

    def _read(self, metrics: list[Any], tracebacks: list[list[tuple[str, int, str]]]) -> None:
        compiled = [m for m in metrics if m.has_guarded_code]
        self.work = FrameWork(
            frames=len(compiled),
            operations=sum(m.graph_op_count or 0 for m in compiled),
            guards=sum(m.guard_count or 0 for m in compiled),
        )
        for m in metrics:
            compile_id = compile_id_of(m.compile_id)
            if compile_id and m.co_name and m.co_filename:
                self.codes[compile_id] = str(Frame(m.co_name, short_path(m.co_filename), m.co_firstlineno or 0))
                self._compiled[compile_id] = (m.co_name, m.co_filename)
            resumed = Frame(m.co_name or "")
            if resumed.resumed_line is not None and m.co_filename and compile_id.endswith("/0"):
                self.resumed_at.append((location(m.co_filename, resumed.resumed_line), resumed.resumes))
        self.eager_frames = [
            eager_frame_break(m, tracebacks)
            for m in metrics
            if m.fail_type in _GRAPH_BREAK_FAILURES and not m.has_guarded_code and m.co_filename
        ]


def _dynamo_break_counter() -> int:
    return sum(torch._dynamo.utils.counters["graph_break"].values())


def compile_id_of(value: Any) -> str:
    """Dynamo's compile id as ``frame/attempt`` ("3/0"), whatever its wrapping ("[3/0]", "[!0/3/0]")."""
    match = _COMPILE_ID.search(str(value or ""))
    return f"{match[1]}/{match[2]}" if match else ""


def eager_frame_break(metrics: Any, tracebacks: list[list[tuple[str, int, str]]]) -> GraphBreak:
    """The graph break of a frame Dynamo skipped, at the line of that frame where it broke (from the graph-break
    log's user traceback; the function's first line when the log has no traceback for it)."""
    inner = ""
    if metrics.fail_user_frame_filename:
        inner = location(metrics.fail_user_frame_filename, metrics.fail_user_frame_lineno)
    line = metrics.co_firstlineno
    stack: tuple[str, ...] = ()
    # The traceback of this frame's own break: through the frame, ending where Dynamo stopped (another break's
    # traceback may pass through the same frame).
    through = [
        frames for frames in tracebacks if any(n == metrics.co_name and f == metrics.co_filename for f, _, n in frames)
    ]
    ending = [frames for frames in through if inner and location(frames[-1][0], frames[-1][1]) == inner]
    for frames in ending or through:
        own = [i for i, (file, _, name) in enumerate(frames) if name == metrics.co_name and file == metrics.co_filename]
        line = frames[own[0]][1]
        stack = tuple(stack_entry(file, n, name) for file, n, name in frames[own[0] :])
        break
    reason = one_line_reason(metrics.fail_reason or metrics.fail_type)
    own_location = location(metrics.co_filename, line)
    below = bool(inner) and inner != own_location
    stopped_in = "?"
    if below:
        for frames in tracebacks:
            names = [name for file, n, name in frames if location(file, n) == inner]
            if names:
                stopped_in = names[-1]
                break
    source = linecache.getline(metrics.co_filename, line).strip()
    return GraphBreak(
        reason=f"{reason} (the break: {inner})" if below else reason,
        location=own_location,
        source=source,
        function=metrics.co_name,
        eager_function=str(Frame(metrics.co_name, short_path(metrics.co_filename), metrics.co_firstlineno)),
        graph_break_id=graph_break_id(reason),
        stopped_at=inner if below else "",
        stopped_in=stopped_in if below else "",
        compile_id=compile_id_of(metrics.compile_id),
        stack=stack,
    )
