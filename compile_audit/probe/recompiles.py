"""Recompiles of a compiled callable across named phases, each with its guard-failure reasons.

A *recompile* is Dynamo compiling a frame it has compiled before (compile id ``F/N`` with N > 0),
because a guard of every cached entry failed. Dynamo's compile callbacks tell the audit when a
frame compile starts (and so the compile time); the failed guards are the entries Dynamo appended
to ``torch._dynamo.utils.guard_failures`` just before that compile (one per cache entry).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.callback import CallbackArgs, CallbackTrigger

from compile_audit.frames import Frame
from compile_audit.locations import code_location, short_path
from compile_audit.normalize import normalize
from compile_audit.probe.ddp_splits import GraphSplit, is_ddp_piece
from compile_audit.probe.footprint import note_traced_code
from compile_audit.probe.frame_records import FrameRecords, compile_id_of
from compile_audit.probe.graph_breaks import GraphBreak, GraphBreakReport, graph_break_of, stack_entry
from compile_audit.probe.guards import GuardFailure, parse_guard_failure
from compile_audit.probe.regions import NoRepeatedBlocks, compile_each_block

_COMPILE_ID = re.compile(r"(\d+)/(\d+)$")
# Dynamo's warning when a frame reaches its recompile limit: from then on the frame runs eagerly.
_LIMIT_WARNING = "torch._dynamo hit config."
_FUNCTION_INFO = re.compile(r"'(?P<name>[^']*)' \((?P<file>.*):(?P<line>\d+)\)")


@dataclasses.dataclass(frozen=True)
class Recompile:
    phase: str
    frame: str  # "forward at peft/peft_model.py:1001"
    compile_id: str
    failures: tuple[GuardFailure, ...]
    expected: bool

    @property
    def reason(self) -> str:
        return "; ".join(f.describe() for f in self.failures) or "(no guard failure recorded)"

    @property
    def signature(self) -> str:
        """Identity that survives moved lines and run-specific ids: the frame (no line) and what the newest
        cache entry guarded (the failures of older entries repeat in every later recompile of the frame)."""
        kind = self.failures[0].kind if self.failures else "(no guard failure recorded)"
        return f"{normalize(self.frame)}: {kind}"

    def describe(self) -> str:
        kind = "expected" if self.expected else "UNEXPECTED"
        return f"[{self.phase}] {self.frame} (compile {self.compile_id}, {kind}): {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "frame": self.frame,
            "compile_id": self.compile_id,
            "expected": self.expected,
            "reason": self.reason,
            "signature": self.signature,
            "failures": [dataclasses.asdict(f) for f in self.failures],
        }


@dataclasses.dataclass(frozen=True)
class RecompileLimitHit:
    """Dynamo gave up on a frame: it reached ``recompile_limit`` (or the accumulated limit) and, from this
    phase on, runs that frame eagerly, silently."""

    phase: str
    frame: str  # "forward at peft/tuners/lora/layer.py:700"
    limit: str  # "recompile_limit (8)"
    last_guard: str  # the guard that kept failing

    def describe(self) -> str:
        return (
            f"[{self.phase}] {self.frame} hit Dynamo's {self.limit}: it runs eagerly from this phase on;"
            f" the guard that kept failing: {self.last_guard}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _limit_hit_of(record: logging.LogRecord, phase: str) -> RecompileLimitHit | None:
    if not str(record.msg).startswith(_LIMIT_WARNING):
        return None
    args = tuple(record.args) if isinstance(record.args, tuple) else ()
    limit_type, value, function, reason = (list(args) + ["?"] * 4)[:4]
    match = _FUNCTION_INFO.search(str(function))
    frame = str(Frame(match["name"], short_path(match["file"]), int(match["line"]))) if match else str(function)
    last_guard = parse_guard_failure(str(reason)).describe() if reason != "?" else "(not given)"
    return RecompileLimitHit(phase, frame, f"{limit_type} ({value})", last_guard)


class _LimitHitHandler(logging.Handler):
    def __init__(self, record: PhaseRecord) -> None:
        super().__init__(level=logging.WARNING)
        self.record = record

    def emit(self, log_record: logging.LogRecord) -> None:
        hit = _limit_hit_of(log_record, self.record.name)
        if hit is not None:
            self.record.limit_hits.append(hit)


@dataclasses.dataclass
class PhaseRecord:
    name: str
    kind: str  # "train", "eval" or another label; a change of kind is a transition
    first_transition: bool  # the first time the scenario switches into this kind from that one
    frames_compiled: int = 0
    graphs_compiled: int = 0
    operations_captured: int = 0  # FX operations in the graphs of the frames compiled (Dynamo's compile metrics)
    guards: int = 0  # guards installed for them
    compile_seconds: float = 0.0
    seconds: float = 0.0
    recompiles: list[Recompile] = dataclasses.field(default_factory=list)
    graph_breaks: list[GraphBreak] = dataclasses.field(default_factory=list)
    limit_hits: list[RecompileLimitHit] = dataclasses.field(default_factory=list)
    ddp_splits: list[GraphSplit] = dataclasses.field(default_factory=list)
    # compile id ("3/0") -> the frame that compile was for ("forward at peft/peft_model.py:1890"), every frame
    # Dynamo compiled or tried in the phase
    frame_codes: dict[str, str] = dataclasses.field(default_factory=dict)
    # compile id -> the user frames that called the frame being compiled, innermost first, each as
    # (its code, "file:line in function"): a caller that Dynamo handled makes the compile a nested one
    callers: dict[str, list[list[str]]] = dataclasses.field(default_factory=dict)
    # Dynamo's own record of the phase's breaks, to reconcile the report with (compile_audit.rules.reconcile): the
    # breaks its counter added, and where it resumed after one (the resume functions it compiled).
    dynamo_counted_breaks: int = 0
    resumed_at: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def break_report(self) -> GraphBreakReport:
        return GraphBreakReport(call=self.name, breaks=self.graph_breaks, graph_count=self.graphs_compiled)

    def to_dict(self) -> dict[str, Any]:
        skip = ("recompiles", "graph_breaks", "limit_hits", "ddp_splits", "frame_codes", "callers", "resumed_at")
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}
        data["graph_breaks"] = len(self.graph_breaks)
        data["recompiles"] = [r.to_dict() for r in self.recompiles]
        data["limit_hits"] = [h.to_dict() for h in self.limit_hits]
        if self.ddp_splits:
            data["ddp_splits"] = [dataclasses.asdict(s) for s in self.ddp_splits]
        return data


class CountingBackend:
    """Wraps a real backend (name or callable); counts the graphs handed to it and, as
    ``torch._dynamo.explain`` does, records the graph break that ended each graph. The pieces of a graph that
    DDPOptimizer split are compiled but not counted (``compile_audit.probe.ddp_splits``)."""

    def __init__(self, backend: str | Callable[..., Any] = "eager") -> None:
        self.name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
        self._inner = torch._dynamo.lookup_backend(backend) if isinstance(backend, str) else backend
        self.graphs = 0
        self.breaks: list[GraphBreak] = []
        self.splits: list[GraphSplit] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        # Counted once the real backend accepted the graph: AOTAutograd may reject one to make Dynamo trace the
        # frame again (TensorifyScalarRestartAnalysis, a float it cannot turn into a tensor), and that graph, with
        # the break that ended it, never runs.
        compiled = self._inner(gm, example_inputs)
        if not is_ddp_piece(gm):
            self.count_graph(gm)
            note_traced_code()
        return compiled

    def count_graph(self, gm: torch.fx.GraphModule) -> None:
        self.graphs += 1
        compile_id = compile_id_of(torch._guards.CompileContext.current_compile_id())
        brk = graph_break_of(getattr(gm, "compile_subgraph_reason", None), compile_id)
        if brk is not None:
            self.breaks.append(brk)

    def record_split(self, split: GraphSplit) -> None:
        self.splits.append(split)


def _guard_failure_counts() -> dict[Any, int]:
    return {code: len(reasons) for code, reasons in torch._dynamo.utils.guard_failures.items()}


_CONVERT_FRAME = "torch/_dynamo/convert_frame.py"


def _callers_of_compile() -> list[list[str]]:
    """The user frames that called the frame Dynamo is about to compile, innermost first, as (code, stack entry).

    Called from a compile-start callback: the frames below Dynamo's outermost ``convert_frame`` frame are its own
    machinery; the frame being compiled has not started, so the next frame is its caller."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    machinery = [i for i, f in enumerate(frames) if f.f_code.co_filename.replace("\\", "/").endswith(_CONVERT_FRAME)]
    if not machinery:
        return []
    return [
        [code_location(f.f_code), stack_entry(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)]
        for f in frames[machinery[-1] + 1 :]
    ]


def _compiled_frame(frame_id: str) -> str:
    """The frame an earlier compile of ``frame_id`` compiled (Dynamo's compilation metrics name its code), for a
    recompile with no guard failure to name it: its cache entry was dropped because an object it guarded died."""
    for metrics in reversed(torch._dynamo.utils._compilation_metrics):
        match = _COMPILE_ID.search(str(metrics.compile_id or ""))
        if match and match[1] == frame_id and metrics.co_name and metrics.co_filename:
            return str(Frame(metrics.co_name, short_path(metrics.co_filename), metrics.co_firstlineno or 0))
    return f"frame {frame_id}"


class _PhaseListener:
    """Listens to Dynamo's compile callbacks during one phase."""

    def __init__(self, record: PhaseRecord, expect: tuple[str, ...] = ()) -> None:
        self.record = record
        self._expect = [re.compile(pattern) for pattern in expect]
        self._failures_seen = _guard_failure_counts()
        self._started: float | None = None

    def _new_guard_failures(self) -> tuple[list[Any], list[GuardFailure]]:
        codes, failures = [], []
        for code, reasons in torch._dynamo.utils.guard_failures.items():
            new = reasons[self._failures_seen.get(code, 0) :]
            if new:
                codes.append(code)
                failures.extend(parse_guard_failure(r) for r in new)
            self._failures_seen[code] = len(reasons)
        return codes, failures

    def on_start(self, args: CallbackArgs) -> None:
        self._started = time.perf_counter()
        if args.callback_trigger != CallbackTrigger.DYNAMO:
            return
        self.record.frames_compiled += 1
        compile_id = compile_id_of(args.compile_id)
        if compile_id:
            self.record.callers[compile_id] = _callers_of_compile()
        codes, failures = self._new_guard_failures()
        match = _COMPILE_ID.search(str(args.compile_id))
        if match and int(match[2]) > 0:
            frame = ", ".join(code_location(c) for c in codes) or _compiled_frame(match[1])
            # Dynamo lists its cache entries most recently used first, not newest first: the newest entry's
            # failure is what this recompile adds (older ones repeat in every later recompile of the frame).
            failures.sort(key=lambda f: f.entry_index, reverse=True)
            expected = bool(failures) and all(self._is_expected(f) for f in failures)
            self.record.recompiles.append(
                Recompile(self.record.name, frame, str(args.compile_id), tuple(failures), expected)
            )

    def _is_expected(self, failure: GuardFailure) -> bool:
        if self.record.first_transition and failure.is_mode_switch:
            return True
        return any(pattern.search(failure.guard) for pattern in self._expect)

    def on_end(self, args: CallbackArgs) -> None:
        if self._started is not None:
            self.record.compile_seconds += time.perf_counter() - self._started
            self._started = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        callbacks = torch._dynamo.callback_handler
        callbacks.register_start_callback(self.on_start)
        callbacks.register_end_callback(self.on_end)
        limit_logger = logging.getLogger(torch._dynamo.convert_frame.log.name)
        limit_handler = _LimitHitHandler(self.record)
        limit_logger.addHandler(limit_handler)
        try:
            with torch._dynamo.config.patch(report_guard_failures=True):
                yield
        finally:
            callbacks.remove_start_callback(self.on_start)
            callbacks.remove_end_callback(self.on_end)
            limit_logger.removeHandler(limit_handler)


class PhaseAudit:
    """Compile a callable once, then run named phases and record what each one compiled.

    >>> audit = PhaseAudit(backend="eager")
    >>> compiled = audit.compile(model, dynamic=True)
    >>> with audit.phase("train-1", kind="train"):
    ...     train_step(compiled, optimizer, batch)
    """

    def __init__(
        self, backend: str | Callable[..., Any] = "eager", dynamic: bool | None = None, *, regional: bool = False
    ) -> None:
        self.backend = CountingBackend(backend)
        self.dynamic = dynamic  # torch.compile's dynamic= unless a call names its own
        self.regional = regional  # a module's repeated blocks compiled in place instead of the module (regions.py)
        self.phases: list[PhaseRecord] = []
        self._seen_transitions: set[tuple[str, str]] = set()

    def compile(self, fn: Any, **compile_kwargs: Any) -> Any:
        compile_kwargs.setdefault("dynamic", self.dynamic)
        if self.regional:
            if not isinstance(fn, torch.nn.Module):
                raise NoRepeatedBlocks(f"regional compilation compiles a module's blocks, not {type(fn).__name__}")
            return compile_each_block(fn, backend=self.backend, **compile_kwargs)
        return torch.compile(fn, backend=self.backend, **compile_kwargs)

    @contextlib.contextmanager
    def phase(self, name: str, kind: str = "other", expect: tuple[str, ...] = ()) -> Iterator[PhaseRecord]:
        """Run a phase. ``expect``: regexes of guard failures that are expected *in this phase*
        (e.g. ``("size mismatch",)`` where automatic dynamic shapes must mark a length dynamic)."""
        if any(p.name == name for p in self.phases):
            raise ValueError(f"phase name {name!r} used twice; phase names must be unique")
        previous_kind = self.phases[-1].kind if self.phases else None
        first_transition = (
            previous_kind is not None and previous_kind != kind and (previous_kind, kind) not in self._seen_transitions
        )
        if previous_kind is not None:
            self._seen_transitions.add((previous_kind, kind))
        record = PhaseRecord(name=name, kind=kind, first_transition=first_transition)
        self.phases.append(record)

        listener = _PhaseListener(record, expect)
        graphs_before, breaks_before = self.backend.graphs, len(self.backend.breaks)
        splits_before = len(self.backend.splits)
        frames = FrameRecords()
        started = time.perf_counter()
        try:
            with listener.installed(), frames.watching():
                yield record
        finally:
            record.seconds = time.perf_counter() - started
            record.graphs_compiled = self.backend.graphs - graphs_before
            # Frames Dynamo gave up on and ran eagerly are graph breaks too: no graph tells of them. Nor of a break
            # before a frame's first operation: the graph it ended was empty; Dynamo's log tells of it.
            counted = self.backend.breaks[breaks_before:] + frames.eager_frames
            record.graph_breaks = counted + frames.breaks_without_graph(counted)
            record.dynamo_counted_breaks = frames.counted_by_dynamo
            record.resumed_at = frames.resumed_at
            record.operations_captured, record.guards = frames.work.operations, frames.work.guards
            record.frame_codes = frames.codes
            record.ddp_splits = self.backend.splits[splits_before:]

    @property
    def recompiles(self) -> list[Recompile]:
        return [r for p in self.phases for r in p.recompiles]

    @property
    def limit_hits(self) -> list[RecompileLimitHit]:
        return [h for p in self.phases for h in p.limit_hits]
