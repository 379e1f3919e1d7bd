"""A case's signature: what bisect compares between two runs of one case, and the evidence of a change.

The signature of an audited case is
  - its status (passed, failed, error, xfailed);
  - its counts: graph breaks, recompiles, unexpected recompiles;
  - its break signatures and its unexpected-recompile signatures: the identities the budgets record and the diff
    compares (``GraphBreak.signature``, ``Recompile.signature``, written into the report), so that what fails the
    gate is a change to bisect too, a renamed function included;
  - its guard kinds: the set of (expected or not, guard) over the failed guards of its recompiles, the
    guard being its first sentence with ids, addresses, sizes and indices taken out.
A report written before signatures existed is compared on (file, reason kind) of its breaks instead.
A known failure (xfailed) is compared on its status and break signatures only: its counts and guards
vary from run to run (the diff ignores them too). A candidate is bad when its signature differs in any
of these from the good one's, in either direction: a release that removed breaks is a change too.

A case that is not in the report, or is in it without an audit (skipped, or crashed before compiling),
says nothing about compile behaviour: that candidate is untestable and skipped.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

_LINE_NUMBER = re.compile(r"(\.py):\d+")
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+")
_ANY_LINE = re.compile(r":\d+\b")
_RESUME_LINE = re.compile(r"_at_\d+\b")
LIST_LIMIT = 10  # evidence lines per kind of change; the rest are counted
TEXT_WIDTH = 160
MESSAGE_WIDTH = 480  # the gate's messages put the measured evidence last (a known failure's "today: ...")


@dataclasses.dataclass(frozen=True)
class Signature:
    status: str
    graph_breaks: int | None
    recompiles: int | None
    unexpected_recompiles: int | None
    breaks: frozenset
    guards: frozenset[tuple[bool, str]]
    recompile_signatures: frozenset[str] = frozenset()

    def summary(self) -> str:
        if self.graph_breaks is None:
            return f"{self.status} (known failure: counts not compared)"
        return (
            f"{self.graph_breaks} graph breaks, {self.recompiles} recompiles "
            f"({self.unexpected_recompiles} unexpected), {self.status}"
        )


def _shorten(line: str, width: int = TEXT_WIDTH) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def file_of(location: Any) -> str:
    """``peft/utils/integrations.py:90`` -> ``peft/utils/integrations.py``."""
    return _LINE_NUMBER.sub(r"\1", str(location or "?"))


def frame_kind(frame: Any) -> str:
    """``torch_dynamo_resume_in_forward_at_141 at peft/tuners/lora/dora.py:141`` without its line numbers."""
    return _RESUME_LINE.sub("_at_#", _ANY_LINE.sub("", str(frame or "?")))


def reason_kind(reason: Any) -> str:
    """Dynamo's reason up to its first ': ' (``Unsupported method call``)."""
    return _first_line(reason).split(": ", 1)[0]


def guard_kind(guard: Any) -> str:
    """A failed guard's first sentence without the numbers that differ between runs and versions (ids, sizes,
    indices): ``tensor 'self.weight' size mismatch at index #`` (the rest is Dynamo's advice)."""
    return _shorten(_NUMBER.sub("#", _first_line(guard).split(". ", 1)[0]))


def untestable_reason(case: dict[str, Any] | None) -> str | None:
    """Why this run says nothing about the case's compile behaviour, or None when it was audited."""
    if case is None:
        return "the case did not run (not in the report)"
    if not case.get("audited"):
        message = _shorten(_first_line(case.get("message"))) or "no message"
        return f"the case was not audited ({case.get('status', '?')}: {message})"
    return None


def _section(case: dict[str, Any], name: str) -> dict[str, Any]:
    value = case.get(name)
    return value if isinstance(value, dict) else {}


def break_occurrences(case: dict[str, Any]) -> collections.Counter:
    """Occurrences per break (location, reason, source), over every call of the case."""
    counts: collections.Counter = collections.Counter()
    for call in _section(case, "graph_breaks").get("calls") or []:
        for brk in call.get("breaks") or []:
            key = (str(brk.get("location", "?")), _first_line(brk.get("reason")), str(brk.get("source") or "").strip())
            occurrences = brk.get("occurrences")
            counts[key] += occurrences if isinstance(occurrences, int) else 1
    return counts


def _break_kind(key: tuple[str, str, str]) -> tuple[str, str]:
    """(location, reason, source) -> its break signature (file, reason kind)."""
    return file_of(key[0]), reason_kind(key[1])


def guard_failures(case: dict[str, Any]) -> collections.Counter:
    """Failed guards per guard kind (expected, frame, guard) over every recompile of the case."""
    counts: collections.Counter = collections.Counter()
    for event in _section(case, "recompiles").get("events") or []:
        frame = frame_kind(event.get("frame"))
        failures = event.get("failures") or [{"guard": event.get("reason") or "(no guard failure recorded)"}]
        for failure in failures:
            counts[(bool(event.get("expected")), frame, guard_kind(failure.get("guard")))] += 1
    return counts


def _guard_groups(case: dict[str, Any]) -> dict[tuple[bool, str], collections.Counter]:
    """Failed guards per (expected, guard), each with its count per frame."""
    groups: dict[tuple[bool, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for (expected, frame, guard), count in guard_failures(case).items():
        groups[(expected, guard)][frame] += count
    return groups


def _identities(case: dict[str, Any], name: str) -> frozenset[str] | None:
    values = _section(case, name).get("signatures")
    return frozenset(str(v) for v in values) if isinstance(values, list) else None


def signature_of(case: dict[str, Any]) -> Signature:
    """The signature of an audited case (see the module docstring)."""
    identities = _identities(case, "graph_breaks")
    breaks = identities if identities is not None else frozenset(_break_kind(k) for k in break_occurrences(case))
    recompile_signatures = _identities(case, "recompiles") or frozenset()
    if case.get("status") == "xfailed":
        return Signature("xfailed", None, None, None, breaks, frozenset(), recompile_signatures)
    recompiles = _section(case, "recompiles")
    return Signature(
        status=str(case.get("status")),
        graph_breaks=_section(case, "graph_breaks").get("count", 0),
        recompiles=recompiles.get("count", 0),
        unexpected_recompiles=recompiles.get("unexpected", 0),
        breaks=breaks,
        guards=frozenset(_guard_groups(case)),
        recompile_signatures=recompile_signatures,
    )


# ----------------------------------------------------------------------------- evidence


def _capped(lines: list[str]) -> list[str]:
    if len(lines) <= LIST_LIMIT:
        return lines
    return [*lines[:LIST_LIMIT], f"... and {len(lines) - LIST_LIMIT} more"]


def _count_lines(before: Signature, after: Signature) -> list[str]:
    lines = [f"status {before.status} -> {after.status}"] if before.status != after.status else []
    for name in ("graph_breaks", "recompiles", "unexpected_recompiles"):
        old, new = getattr(before, name), getattr(after, name)
        if old is not None and new is not None and old != new:
            lines.append(f"{name.replace('_', ' ')} {old} -> {new} ({new - old:+d})")
    return lines


def _break_line(how: str, location: str, reason: str, source: str, times: str) -> str:
    text = f"{how} break at {location} ({times}): {_shorten(reason)}"
    return f"{text}\n      {source}" if source else text


def _breaks_by_code(case: dict[str, Any]) -> tuple[collections.Counter, dict[tuple[str, str, str], str]]:
    """Occurrences per (file, reason, source), so that a break whose line only moved is the same break;
    and each one's location (file:line)."""
    counts: collections.Counter = collections.Counter()
    locations = {}
    for (location, reason, source), count in break_occurrences(case).items():
        key = (file_of(location), reason, source)
        counts[key] += count
        locations[key] = location
    return counts, locations


def _break_lines(before_case: dict[str, Any], after_case: dict[str, Any]) -> list[str]:
    """Breaks whose signature (file, reason kind) is new or gone; breaks of a kept signature whose count moved."""
    (old, old_at), (new, new_at) = _breaks_by_code(before_case), _breaks_by_code(after_case)
    old_kinds = {(file, reason_kind(reason)) for file, reason, _ in old}
    new_kinds = {(file, reason_kind(reason)) for file, reason, _ in new}
    added, gone, moved = [], [], []
    for key in [*new, *(key for key in old if key not in new)]:
        file, reason, source = key
        kind, location = (file, reason_kind(reason)), new_at.get(key) or old_at[key]
        if kind not in old_kinds:
            added.append(_break_line("new", location, reason, source, f"x{new[key]}"))
        elif kind not in new_kinds:
            gone.append(_break_line("gone", location, reason, source, f"x{old[key]}"))
        elif old[key] != new[key]:
            moved.append(_break_line("kept", location, reason, source, f"x{old[key]} -> x{new[key]}"))
    return _capped(added) + _capped(gone) + _capped(moved)


def _frames(frames: collections.Counter) -> str:
    if len(frames) == 1:
        return f"in {next(iter(frames))}"
    shown = "; ".join(sorted(frames)[:3]) + ("; …" if len(frames) > 3 else "")  # a frame may hold a comma
    return f"in {len(frames)} frames: {shown}"


def _guard_lines(before_case: dict[str, Any], after_case: dict[str, Any]) -> list[str]:
    """Guards that fail only in one run, and guards failing in both whose count moved; unexpected first."""
    old, new = _guard_groups(before_case), _guard_groups(after_case)
    lines = []
    for key in sorted(old.keys() | new.keys()):  # False (unexpected) sorts first
        kind = f"{'expected' if key[0] else 'unexpected'} recompile guard"
        before, after = old.get(key, collections.Counter()), new.get(key, collections.Counter())
        if not before:
            lines.append(f"new {kind} x{after.total()} {_frames(after)}: {key[1]}")
        elif not after:
            lines.append(f"gone {kind} x{before.total()} {_frames(before)}: {key[1]}")
        elif before.total() != after.total():
            lines.append(f"kept {kind} x{before.total()} -> x{after.total()} {_frames(after)}: {key[1]}")
    return _capped(lines)


def _message_lines(before_case: dict[str, Any], after_case: dict[str, Any]) -> list[str]:
    """The gate's own message of each side when the status changed (why it failed, or was a known failure)."""
    if before_case.get("status") == after_case.get("status"):
        return []
    pairs = (("before", before_case), ("after", after_case))
    return [
        f"    {side}: {_shorten(_first_line(case.get('message')), MESSAGE_WIDTH)}"
        for side, case in pairs
        if case.get("message")
    ]


def evidence(before_case: dict[str, Any], after_case: dict[str, Any]) -> list[str]:
    """What changed from one audited run of a case to another, one item per line (sources indented)."""
    before, after = signature_of(before_case), signature_of(after_case)
    counts = _count_lines(before, after)
    lines = counts[:1] + _message_lines(before_case, after_case) + counts[1:] + _break_lines(before_case, after_case)
    if after.graph_breaks is not None and before.graph_breaks is not None:
        lines += _guard_lines(before_case, after_case)
    return lines
