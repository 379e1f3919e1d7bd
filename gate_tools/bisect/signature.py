"""A case's signature: what bisect compares between two runs of one case, and the evidence of a change.

The signature of an audited case is
  - its status (passed, failed, error, xfailed);
  - its counts: graph breaks (roots), recompiles, unexpected recompiles;
  - its roots and its recompiles by identity: the identities the budgets record and the diff compares
    (``compile_audit.rules.roots``, ``Recompile.signature``, written into the report), so that what fails the gate is a
    change to bisect too, a renamed function included; a recompile also by whether it was expected.
A known failure (xfailed) is compared on its status and roots only: its counts and guards vary from run to run (the
diff ignores them too). A candidate is bad when its signature differs in any of these from the good one's, in either
direction: a release that removed breaks is a change too.

A case that is not in the report, or is in it without an audit (skipped, or crashed before compiling),
says nothing about compile behaviour: that candidate is untestable and skipped.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from compile_audit.artifacts.records import CaseRecord, Root

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


def untestable_reason(case: CaseRecord | None) -> str | None:
    """Why this run says nothing about the case's compile behaviour, or None when it was audited."""
    if case is None:
        return "the case did not run (not in the report)"
    if not case.audited:
        message = _shorten(_first_line(case.message)) or "no message"
        return f"the case was not audited ({case.status}: {message})"
    return None


def roots_of(case: CaseRecord) -> dict[str, Root]:
    """The case's roots by identity (the report's ``graph_breaks.roots``)."""
    return {root.identity: root for root in case.graph_breaks.roots if root.identity}


def recompile_counts(case: CaseRecord) -> collections.Counter:
    """Recompiles per (expected, identity) over every recompile event of the case."""
    return collections.Counter((event.expected, event.signature) for event in case.recompiles.events)


def signature_of(case: CaseRecord) -> Signature:
    """The signature of an audited case (see the module docstring)."""
    breaks = frozenset(roots_of(case)) | frozenset(case.graph_breaks.signatures)
    recompile_signatures = frozenset(case.recompiles.signatures)
    if case.status == "xfailed":
        return Signature("xfailed", None, None, None, breaks, frozenset(), recompile_signatures)
    return Signature(
        status=case.status,
        graph_breaks=case.graph_breaks.count,
        recompiles=case.recompiles.count,
        unexpected_recompiles=case.recompiles.unexpected,
        breaks=breaks,
        guards=frozenset(recompile_counts(case)),
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


def _root_line(how: str, root: Root, times: str) -> str:
    text = f"{how} root at {root.location or root.identity} ({times}): {_shorten(_first_line(root.reason))}"
    source = root.source.strip()
    return f"{text}\n      {source}" if source else text


def _break_lines(before_case: CaseRecord, after_case: CaseRecord) -> list[str]:
    """Roots new or gone by identity, and kept roots whose hits moved."""
    old, new = roots_of(before_case), roots_of(after_case)
    added = [_root_line("new", new[i], f"x{new[i].hits}") for i in new if i not in old]
    gone = [_root_line("gone", old[i], f"x{old[i].hits}") for i in old if i not in new]
    moved = [
        _root_line("kept", new[i], f"x{old[i].hits} -> x{new[i].hits}")
        for i in new
        if i in old and old[i].hits != new[i].hits
    ]
    return _capped(added) + _capped(gone) + _capped(moved)


def _guard_lines(before_case: CaseRecord, after_case: CaseRecord) -> list[str]:
    """Recompiles that happen only in one run, and those in both whose count moved; unexpected first."""
    old, new = recompile_counts(before_case), recompile_counts(after_case)
    lines = []
    for key in sorted(old.keys() | new.keys()):  # False (unexpected) sorts first
        kind = f"{'expected' if key[0] else 'unexpected'} recompile"
        before, after = old.get(key, 0), new.get(key, 0)
        if not before:
            lines.append(f"new {kind} x{after}: {_shorten(key[1])}")
        elif not after:
            lines.append(f"gone {kind} x{before}: {_shorten(key[1])}")
        elif before != after:
            lines.append(f"kept {kind} x{before} -> x{after}: {_shorten(key[1])}")
    return _capped(lines)


def _message_lines(before_case: CaseRecord, after_case: CaseRecord) -> list[str]:
    """The gate's own message of each side when the status changed (why it failed, or was a known failure)."""
    if before_case.status == after_case.status:
        return []
    pairs = (("before", before_case), ("after", after_case))
    return [
        f"    {side}: {_shorten(_first_line(case.headline or case.message), MESSAGE_WIDTH)}"
        for side, case in pairs
        if case.headline or case.message
    ]


def evidence(before_case: CaseRecord, after_case: CaseRecord) -> list[str]:
    """What changed from one audited run of a case to another, one item per line (sources indented)."""
    before, after = signature_of(before_case), signature_of(after_case)
    counts = _count_lines(before, after)
    lines = counts[:1] + _message_lines(before_case, after_case) + counts[1:] + _break_lines(before_case, after_case)
    if after.graph_breaks is not None and before.graph_breaks is not None:
        lines += _guard_lines(before_case, after_case)
    return lines
