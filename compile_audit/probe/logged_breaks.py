"""The graph breaks Dynamo writes to its graph-break log (``TORCH_LOGS=graph_breaks``), read back as records.

Dynamo logs every break it resumes from, once per frame compile that hits it, whether or not a graph came of it.
A break before the first operation of a frame (``torch._dynamo.graph_break()`` as the first statement of a
``forward``, or in a helper called before any tensor operation) ends an empty graph, which Dynamo never hands to a
backend: only this log and Dynamo's counters tell of it. Two shapes of the entry are read: the first for a break type
and place, with the user traceback, and the short one Dynamo writes for the same break again. A frame Dynamo gives up
on entirely is read from its compilation metrics instead (``compile_audit.probe.frame_records``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
import re

from compile_audit.locations import location
from compile_audit.probe.graph_breaks import GraphBreak, graph_break_id, one_line_reason, stack_entry

_FIRST = re.compile(r"^Graph break in user code at (?P<file>.+):(?P<line>\d+)$")
_AGAIN = re.compile(
    r"^Graph break \(user stack suppressed due to duplicate graph break\) in user code at (?P<file>.+):(?P<line>\d+)$"
)
_REASON = "Graph Break Reason: "
_TRACEBACK = "\nUser code traceback:\n"
_TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)$')
# Lines Dynamo puts before the break's own reason: where it was in the bytecode, or what it did about the break.
_PREAMBLES = ("Encountered graph break", "Failed to handle graph break")


@dataclasses.dataclass(frozen=True)
class LoggedBreak:
    """One entry of the graph-break log: the frame compile it happened in, where, why, and the user traceback
    (outermost first, as (file, line, function)) where the entry has one."""

    compile_id: str
    file: str
    line: int
    reason: str
    traceback: tuple[tuple[str, int, str], ...] = ()

    @property
    def location(self) -> str:
        return location(self.file, self.line)

    def as_graph_break(self, compiled: tuple[str, str] | None = None) -> GraphBreak:
        """The break as the probe records one. ``compiled``: (function, file) of the frame being compiled; the
        stack starts there, as a compiled graph's does (the traceback also holds the frames that called it)."""
        frames = list(self.traceback)
        if compiled is not None:
            own = [i for i, (file, _, name) in enumerate(frames) if (name, file) == compiled]
            frames = frames[own[0] :] if own else frames
        stack = tuple(stack_entry(file, line, name) for file, line, name in frames)
        reason = one_line_reason(self.reason)
        return GraphBreak(
            reason=reason,
            location=self.location,
            source=linecache.getline(self.file, self.line).strip(),
            function=self._function(frames),
            graph_break_id=graph_break_id(reason),
            compile_id=self.compile_id,
            stack=stack or (stack_entry(self.file, self.line, "?"),),
        )

    def _function(self, frames: list[tuple[str, int, str]]) -> str:
        """The function the break is in: the traceback's innermost frame, else (the short entry has no traceback)
        the innermost function of the source that holds the line."""
        if frames and (frames[-1][0], frames[-1][1]) == (self.file, self.line):
            return frames[-1][2]
        return enclosing_function(self.file, self.line)


@functools.cache
def _functions(file: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, name) of every function in the file, outermost first."""
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return ()
    return tuple(
        (node.lineno, node.end_lineno or node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


def enclosing_function(file: str, line: int) -> str:
    """The innermost function whose source holds ``line`` ("?" where none does, or the file cannot be read)."""
    holding = [(last - first, name) for first, last, name in _functions(file) if first <= line <= last]
    return min(holding)[1] if holding else "?"


def logged_break(text: str, compile_id: str) -> LoggedBreak | None:
    """The entry as a record, or None for a log line that is no resumable break (a frame skipped whole)."""
    head, _, rest = text.partition("\n")
    match = _FIRST.match(head) or _AGAIN.match(head)
    if match is None or not rest.startswith(_REASON):
        return None
    body, _, traceback = rest.removeprefix(_REASON).partition(_TRACEBACK)
    return LoggedBreak(
        compile_id=compile_id,
        file=match["file"],
        line=int(match["line"]),
        reason=_own_reason(body),
        traceback=tuple(
            (found["file"], int(found["line"]), found["name"])
            for found in map(_TRACEBACK_FRAME.match, traceback.splitlines())
            if found
        ),
    )


def _own_reason(body: str) -> str:
    """The break's reason without what Dynamo says before it ("Encountered graph break when attempting to trace
    CALL: ...:"), so that it reads, and its graph-break id looks up, as a compiled graph's reason does."""
    first, blank, after = body.partition("\n\n")
    if blank and first.startswith(_PREAMBLES):
        return after.strip()
    return body.strip()
