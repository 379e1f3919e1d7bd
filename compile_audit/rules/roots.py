"""Roots and their consequences: what someone can fix, and what follows from it.

A **root** is where Dynamo stopped: the file, function and graph-break id (else the kind of reason) of the break,
with the innermost frame of the code under test on its stack when the break is outside it. When a break cannot be
resumed, Dynamo runs each enclosing frame eagerly; the frames those call then become compile targets of their own,
break again (a comprehension called with an iterator it cannot trace) and recompile (a helper compiled once per
caller). Those are the root's **consequences**: reported under it, counted, never budgeted on their own.

- A graph break in a compiled graph is a root, at its innermost user frame.
- A frame run eagerly because of a break below its own line is a consequence of the root where Dynamo stopped.
- A frame Dynamo gives up on at its own line is its own root, unless Dynamo compiled it only because a frame that
  called it had been handed back to Python by a root: then it is that root's consequence.
- A recompile of a frame compiled only because a caller was handed back to Python is a consequence of that
  caller's root, unless a guard that failed was installed by the code under test (its state changed, and that
  recompiles a frame whatever made it a compile target). So is a recompile-limit hit on such a frame, unless the
  frame belongs to the code under test or the guard that kept failing was installed by it (then it stays a failure
  of its own).
- Nothing is a consequence of nothing: where no root explains a nested compile, it is judged on its own.
"""

from __future__ import annotations

import dataclasses
import linecache
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from compile_audit.frames import Frame, Guard
from compile_audit.normalize import normalize
from compile_audit.probe.frame_records import compile_id_of
from compile_audit.probe.graph_breaks import GraphBreak
from compile_audit.probe.recompiles import PhaseRecord, Recompile, RecompileLimitHit

EAGER_MARK = " (frame run eagerly)"
_MAX_HOPS = 32  # caller chains followed while looking for the root a nested compile follows from


@dataclasses.dataclass
class Root:
    """One place Dynamo stopped, with what it caused in the case."""

    identity: str  # "peft/utils/integrations.py in dequantize_module_weight: gb0156"
    location: str  # "peft/utils/integrations.py:90"
    function: str
    reason: str
    source: str
    via: str = ""  # the innermost frame of the code under test when the break is outside it
    kind: str = ""  # torch's graph-break id, else Dynamo's headline
    eager: bool = False  # a frame gave up here at its own line, and Dynamo ran it eagerly
    hits: int = 0
    phases: list[str] = dataclasses.field(default_factory=list)
    eager_frames: list[GraphBreak] = dataclasses.field(default_factory=list)  # enclosing frames run eagerly
    nested_breaks: list[GraphBreak] = dataclasses.field(default_factory=list)  # frames compiled only because of it
    recompiles: list[Recompile] = dataclasses.field(default_factory=list)
    limit_hits: list[RecompileLimitHit] = dataclasses.field(default_factory=list)

    def concerns(self, under_test: Sequence[str]) -> bool:
        """Whether the code under test is on the root's stack: the break is in it, or reached from it."""
        return bool(self.via) or _top_package(self.location) in under_test

    def seen_in(self, phase: str) -> None:
        if phase not in self.phases:
            self.phases.append(phase)

    @property
    def consequences(self) -> int:
        return len(self.eager_frames) + len(self.nested_breaks) + len(self.recompiles) + len(self.limit_hits)

    def describe(self) -> list[str]:
        """The root's lines of a failure: where, the source line, hits and phases, then each kind of consequence."""
        hits = f" x{self.hits}" if self.hits > 1 else ""
        via = f" (reached from {self.via})" if self.via else ""
        lines = [f"{self.location} in {self.function} [{', '.join(self.phases)}{hits}]: {self.reason}{via}"]
        if self.source:
            lines.append(f"    {self.source}")
        lines += [f"  {line}" for line in consequence_lines(self)]
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "location": self.location,
            "function": self.function,
            "reason": self.reason,
            "source": self.source,
            "via": self.via,
            "hits": self.hits,
            "phases": list(self.phases),
            "consequences": {
                "eager_frames": [b.eager_function for b in self.eager_frames],
                "nested_breaks": [f"{b.eager_function or b.location}: {b.reason}" for b in self.nested_breaks],
                "recompiles": [r.describe() for r in self.recompiles],
                "limit_hits": [h.describe() for h in self.limit_hits],
            },
        }


def _counted(names: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} (x{n})" if n > 1 else name for name, n in counts.items())


def consequence_lines(root: Root) -> list[str]:
    lines = []
    if root.eager_frames:
        frames = [b.eager_function for b in root.eager_frames]
        lines.append(f"so Dynamo ran {len(frames)} enclosing frame(s) eagerly: {_counted(frames)}")
    if root.nested_breaks:
        frames = [f"{b.eager_function or b.location} ({b.kind})" for b in root.nested_breaks]
        lines.append(f"and {len(frames)} frame(s) it then compiled on their own broke: {_counted(frames)}")
    if root.recompiles:
        frames = [normalize(r.frame) for r in root.recompiles]
        lines.append(f"and {len(frames)} recompile(s) of frames compiled because of it: {_counted(frames)}")
    if root.limit_hits:
        frames = [hit.frame for hit in root.limit_hits]
        lines.append(f"and {len(frames)} of those frames hit Dynamo's recompile limit: {_counted(frames)}")
    return lines


def is_graph_break_id(kind: str) -> bool:
    """Whether a root's kind is torch's stable graph-break id (``gb0025``), not Dynamo's wording."""
    return len(kind) > 2 and kind.startswith("gb") and kind[2:].isdigit()


def _identity(root: Root) -> str:
    """File, function and graph-break id (else kind): no line number, no wording where torch has an id."""
    identity = f"{_file(root.location)} in {normalize(root.function)}: {root.kind}{EAGER_MARK if root.eager else ''}"
    if root.via:
        via_file, _, via_function = root.via.partition(" in ")
        identity += f" via {_file(via_file)} in {normalize(via_function)}"
    return identity


def _top_package(entry: str) -> str:
    return entry.split("/", 1)[0]


def _file(entry_or_location: str) -> str:
    return entry_or_location.split(" in ", 1)[0].rsplit(":", 1)[0]


@dataclasses.dataclass
class Attribution:
    """A case's roots, and what is judged on its own (recompiles and limit hits no root explains)."""

    roots: list[Root] = dataclasses.field(default_factory=list)
    recompiles: list[Recompile] = dataclasses.field(default_factory=list)
    limit_hits: list[RecompileLimitHit] = dataclasses.field(default_factory=list)


class _Attributor:
    def __init__(self, phases: Sequence[PhaseRecord], under_test: Sequence[str]) -> None:
        self.phases = phases
        self.under_test = tuple(under_test)
        self.codes: dict[str, str] = {}
        self.callers: dict[str, list[list[str]]] = {}
        for phase in phases:
            self.codes.update(phase.frame_codes)
            self.callers.update({compile_id_of(k): v for k, v in phase.callers.items()})
        self.handled = set(self.codes.values())
        self.roots: dict[str, Root] = {}  # by location
        self.root_of_code: dict[str, Root] = {}  # a frame handed back to Python -> the root that did it

    def _via(self, stack: Sequence[str], compile_id: str, root_file: str) -> str:
        if not self.under_test or _top_package(root_file) in self.under_test:
            return ""
        outside = [entry for _, entry in self.callers.get(compile_id, [])]
        for entry in [*reversed(stack), *outside]:
            if _top_package(entry) in self.under_test:
                return entry
        return ""

    def _root(
        self, phase: str, location: str, function: str, brk: GraphBreak, *, eager: bool, source: str = ""
    ) -> Root:
        """The root at this location: one per place Dynamo stopped, whichever record named it first. ``eager``: a
        frame gave up there, at its own line (its identity says so)."""
        root = self.roots.get(location)
        if root is None:
            root = Root("", location, function, brk.reason.split(" (the break: ", 1)[0], source)
            root.kind = brk.graph_break_id or brk.kind.removeprefix("Frame run eagerly (").removesuffix(")")
            root.via = self._via(brk.stack, brk.compile_id, location.rsplit(":", 1)[0])
            self.roots[location] = root
        if root.function == "?" and function != "?":
            root.function = function
        root.eager = root.eager or eager
        root.identity = _identity(root)
        root.source = root.source or source
        root.seen_in(phase)
        return root

    def _nested_owner(self, compile_id: str) -> Root | None:
        """The root that made Dynamo compile this frame on its own: that of the nearest caller it handled."""
        seen: set[str] = set()
        pending = [compile_id]
        for _ in range(_MAX_HOPS):
            if not pending:
                return None
            callers = self.callers.get(pending.pop(0), [])
            for code, _entry in callers:
                if code not in self.handled or code in seen:
                    continue
                seen.add(code)
                owner = self._owner_of_code(code)
                if owner is not None:
                    return owner
                pending += [cid for cid, c in self.codes.items() if c == code]
                break
        return None

    def _owner_of_code(self, code: str) -> Root | None:
        if code in self.root_of_code:
            return self.root_of_code[code]
        frame = Frame.parse(code)
        for candidate, root in self.root_of_code.items():
            if Frame.parse(candidate).resumes_in(frame):
                return root
        return None

    def _guarded_by_code_under_test(self, recompile: Recompile) -> bool:
        """A recompile on a guard the code under test installed (PEFT's merged flag, its active adapter): its state
        changed, which recompiles a frame whether or not a root made that frame a compile target."""
        return any(
            failure.location and _top_package(failure.location) in self.under_test for failure in recompile.failures
        )

    def _under_test_state(self, hit: RecompileLimitHit) -> bool:
        """A limit hit that stays a failure of its own: on a frame of the code under test, or on a guard it
        installed (its own state keeps changing, whatever made the frame a compile target)."""
        frame_file = Frame.parse(hit.frame).file
        return _top_package(frame_file) in self.under_test or _guard_under_test(hit.last_guard, self.under_test)

    def attribute(self) -> Attribution:
        # Pass 1: the breaks where Dynamo stopped, then the frames run eagerly because of a break below them.
        own_line: list[tuple[str, GraphBreak]] = []
        below: list[tuple[str, GraphBreak]] = []
        for phase in self.phases:
            for brk in phase.graph_breaks:
                if brk.eager_function and brk.stopped_at:
                    below.append((phase.name, brk))
                elif brk.eager_function:
                    own_line.append((phase.name, brk))
                else:
                    root = self._root(phase.name, brk.location, brk.function, brk, eager=False, source=brk.source)
                    root.hits += 1
                    code = self.codes.get(brk.compile_id)
                    if code:
                        self.root_of_code.setdefault(code, root)
        for phase_name, brk in below:
            root = self._root(phase_name, brk.stopped_at, brk.stopped_in or "?", brk, eager=False)
            root.eager_frames.append(brk)
            self.root_of_code.setdefault(brk.eager_function, root)
        # Pass 2: frames Dynamo gave up on at their own line: roots, unless compiled only because of another root.
        for phase_name, brk in own_line:
            owner = self._nested_owner(brk.compile_id)
            if owner is not None and owner.location != brk.location:
                owner.nested_breaks.append(brk)
                continue
            root = self._root(phase_name, brk.location, brk.function, brk, eager=True, source=brk.source)
            root.hits += 1
            self.root_of_code.setdefault(brk.eager_function, root)
        for root in self.roots.values():
            root.hits = max(root.hits, 1)
            if not root.source:
                root.source = _source_of(root.location)
        # Pass 3: recompiles and limit hits of frames compiled only because of a root.
        result = Attribution(roots=list(self.roots.values()))
        consequence_frames: dict[str, Root] = {}
        for phase in self.phases:
            for recompile in phase.recompiles:
                owner = (
                    None
                    if self._guarded_by_code_under_test(recompile)
                    else self._nested_owner(compile_id_of(recompile.compile_id))
                )
                if owner is None:
                    result.recompiles.append(recompile)
                else:
                    owner.recompiles.append(recompile)
                    consequence_frames.setdefault(normalize(recompile.frame), owner)
            for hit in phase.limit_hits:
                owner = consequence_frames.get(normalize(hit.frame))
                if owner is None or self._under_test_state(hit):
                    result.limit_hits.append(hit)
                else:
                    owner.limit_hits.append(hit)
        return result


def _guard_under_test(last_guard: str, under_test: Sequence[str]) -> bool:
    """Whether the guard that kept failing was installed by the code under test ("(guard from peft/...)")."""
    where = Guard.parse(last_guard).location
    return bool(where) and _top_package(where) in under_test


def _source_of(location: str) -> str:
    """The source line at a short location (``transformers/configuration_utils.py:645``), found on ``sys.path``:
    a root named by a frame run eagerly above it has no source line of its own."""
    file, _, line = location.rpartition(":")
    if not line.isdigit():
        return ""
    for root in sys.path:
        text = linecache.getline(f"{root}/{file}", int(line))
        if text:
            return text.strip()
    return ""


def attribute(phases: Sequence[PhaseRecord], under_test: Sequence[str] = ()) -> Attribution:
    return _Attributor(phases, under_test).attribute()


def explained_roots(breaks: Iterable[tuple[str, GraphBreak]]) -> list[Root]:
    """Roots of breaks counted with explain() (no frames run eagerly there): each break is where Dynamo stopped."""
    found: dict[tuple[str, str], Root] = {}
    for call, brk in breaks:
        root = found.get((brk.location, brk.function))
        if root is None:
            root = Root("", brk.location, brk.function, brk.reason, brk.source, kind=brk.graph_break_id or brk.kind)
            root.identity = _identity(root)
            found[(brk.location, brk.function)] = root
        root.hits += 1
        root.seen_in(call)
    return list(found.values())
