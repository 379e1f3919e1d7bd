"""A case's footprint: the functions of chosen packages (PEFT) that it ran, traced by Dynamo or run by the interpreter.

Two sources, since a function Dynamo traces is never executed by the interpreter:

- the interpreter's profiler (cProfile) sees every Python function that runs eagerly: model building,
  ``merge_adapter``, a frame Dynamo skipped, an eager reference run. It is paused while Dynamo compiles, so Dynamo's
  own tracing costs nothing extra;
- Dynamo's tracing context lists the code objects a compiled frame traced, the functions it inlined included. The
  audit's counting backend hands them over (:func:`note_traced_code`) each time it receives a graph.

Module and class bodies are left out: they run once per process, in whichever case first imports them. It cannot
see Python code run in another process (the ranks of a distributed case) or in a thread the case started.

A case's first compiled call (:func:`mark_built`, called by the audit) splits its run in two: the functions that ran
only before it built the model and never ran again (``PeftModel.__init__``, ``inject_adapter``), which
:meth:`FootprintRecorder.built_only` lists. A change to one of those can alter what is compiled only through the model
it built, which the gate can compare (``compile_audit.probe.builds``).

With ``lines=True`` (``--footprints-only``, where Dynamo is off) it also records the lines of those packages that
ran, through a trace function that traces only their frames: the selection then narrows a changed function to the
cases that ran the changed statements.
"""

from __future__ import annotations

import contextlib
import cProfile
import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from torch._dynamo.callback import callback_handler
from torch._guards import TracingContext

from compile_audit.locations import short_path

_active: list[FootprintRecorder] = []


def active() -> tuple[FootprintRecorder, ...]:
    return tuple(_active)


def reinstall() -> None:
    """``torch._dynamo.reset()`` drops every compile callback: put back the pause of each active recorder."""
    for recorder in _active:
        recorder.install_callbacks()


def mark_built() -> None:
    """The case asks for its first compile: what ran so far built its model (each recorder keeps the first mark)."""
    for recorder in _active:
        recorder.mark_built()


def note_other_processes() -> None:
    """The case starts processes of its own (ranks): what runs there is in no footprint, which the file then says."""
    for recorder in _active:
        recorder.other_processes = True


def note_traced_code() -> None:
    """Called while Dynamo hands a graph to a backend: the code the current frame traced joins the footprint."""
    if not _active:
        return
    reinstall()  # after a reset nobody announced, at least the next compiles are paused again
    context = TracingContext.try_get()
    if context is None:
        return
    for recorder in _active:
        recorder.codes.update(context.traced_code)


class FootprintRecorder:
    """Records the functions run or traced while active (a context manager); :meth:`footprint` keeps those of
    ``packages`` as ``{package-relative file: [function names]}``. The interpreter's side is cProfile's, whose
    C hook costs far less than a Python profile function."""

    def __init__(self, packages: Sequence[str], lines: bool = False) -> None:
        self.packages = tuple(packages)
        self.codes: set[types.CodeType] = set()
        self.other_processes = False  # the case ran code in processes it started, which no footprint holds
        self._profile = cProfile.Profile(builtins=False)  # C functions are no footprint
        self._stopped: dict[str, list[str]] | None = None
        self._built_at: dict[tuple[str, str], int] | None = None  # calls per function at the first compile
        self._stopped_built_only: dict[str, list[str]] | None = None
        self._line_tracer = _LineTracer(self._in_packages) if lines else None

    def _in_packages(self, filename: str) -> str | None:
        path = short_path(filename)
        return path if path.split("/", 1)[0] in self.packages and path.endswith(".py") else None

    def lines(self) -> dict[str, list[int]]:
        """The lines of the packages that ran, by package-relative file (empty unless recorded)."""
        return self._line_tracer.recorded() if self._line_tracer else {}

    def _pause(self, *_: Any) -> None:
        self._profile.disable()

    def _resume(self, *_: Any) -> None:
        self._profile.enable()

    def install_callbacks(self) -> None:
        if self._pause not in callback_handler.start_callbacks:
            callback_handler.register_start_callback(self._pause)
        if self._resume not in callback_handler.end_callbacks:
            callback_handler.register_end_callback(self._resume)

    def __enter__(self) -> FootprintRecorder:
        _active.append(self)
        self.install_callbacks()
        if self._line_tracer:
            self._line_tracer.start()
        self._resume()
        return self

    def __exit__(self, *exc: object) -> None:
        self._pause()
        if self._line_tracer:
            self._line_tracer.stop()
        with contextlib.suppress(ValueError):
            callback_handler.remove_start_callback(self._pause)
        with contextlib.suppress(ValueError):
            callback_handler.remove_end_callback(self._resume)
        _active.remove(self)
        # The profiler holds every code object that ran, Dynamo's transformed code among them, and Dynamo removes a
        # compiled graph (a global of the traced module) only when its transformed code dies: a stopped recorder
        # keeps the names alone, so that each case's graphs die with the case.
        self._stopped = self._recorded()
        self._stopped_built_only = self._recorded_built_only()
        del self._profile  # its callbacks are removed above: nothing calls it again
        self.codes = set()

    def _calls(self) -> dict[tuple[str, str], int]:
        """Calls per function the interpreter ran (cProfile counts a call when it returns)."""
        calls: dict[tuple[str, str], int] = {}
        for entry in self._profile.getstats():
            function = _function(entry.code)
            if function is not None:
                calls[function] = calls.get(function, 0) + entry.callcount
        return calls

    def _functions(self) -> Iterator[tuple[str, str]]:
        yield from (f for f in map(_function, self.codes) if f is not None)
        yield from self._calls()

    def mark_built(self) -> None:
        if self._built_at is None and self._stopped is None:
            self._built_at = self._calls()

    def footprint(self) -> dict[str, list[str]]:
        return self._stopped if self._stopped is not None else self._recorded()

    def built_only(self) -> dict[str, list[str]]:
        """The functions of the footprint that ran only before the first compile (none when the case never asked
        for one): a call that returned after it, or code Dynamo traced, is not building."""
        return self._stopped_built_only if self._stopped_built_only is not None else self._recorded_built_only()

    def _recorded_built_only(self) -> dict[str, list[str]]:
        if self._built_at is None:
            return {}
        calls, traced = self._calls(), {f for f in map(_function, self.codes) if f is not None}
        built = (f for f, count in self._built_at.items() if calls.get(f, 0) == count and f not in traced)
        return _by_file(built, self._in_packages)

    def _recorded(self) -> dict[str, list[str]]:
        return _by_file(self._functions(), self._in_packages)


def _function(code: object) -> tuple[str, str] | None:
    # Module and class bodies run once per process, in whichever case imports them first: no footprint.
    if isinstance(code, types.CodeType) and code.co_flags & inspect.CO_NEWLOCALS:
        return code.co_filename, getattr(code, "co_qualname", code.co_name)
    return None


def _by_file(functions: Iterable[tuple[str, str]], in_packages: Callable[[str], str | None]) -> dict[str, list[str]]:
    files: dict[str, set[str]] = {}
    for filename, name in functions:
        path = in_packages(filename)
        if path is not None:
            files.setdefault(path, set()).add(name)
    return {path: sorted(names) for path, names in sorted(files.items())}


class _LineTracer:
    """The lines run in the frames of chosen files (``sys.settrace``; other frames are not traced line by line)."""

    def __init__(self, wanted: Callable[[str], str | None]) -> None:
        self._wanted, self._paths = wanted, {}
        self._lines: dict[str, set[int]] = {}
        self._previous: Any = None

    def _call(self, frame: types.FrameType, event: str, arg: Any):
        filename = frame.f_code.co_filename
        if filename not in self._paths:
            self._paths[filename] = self._wanted(filename)
        path = self._paths[filename]
        if path is None:
            return None
        lines = self._lines.setdefault(path, set())
        lines.add(frame.f_lineno)

        def line(frame: types.FrameType, event: str, arg: Any):
            if event == "line":
                lines.add(frame.f_lineno)
            return line

        return line

    def start(self) -> None:
        self._previous = sys.gettrace()
        sys.settrace(self._call)
        threading.settrace(self._call)

    def stop(self) -> None:
        sys.settrace(self._previous)
        threading.settrace(self._previous)  # type: ignore[arg-type]

    def recorded(self) -> dict[str, list[int]]:
        return {path: sorted(lines) for path, lines in sorted(self._lines.items())}
