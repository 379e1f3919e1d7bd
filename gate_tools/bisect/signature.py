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


def roots_of(case: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The case's roots by identity (the report's ``graph_breaks.roots``)."""
    roots = _section(case, "graph_breaks").get("roots") or []
    return {str(root["identity"]): root for root in roots if isinstance(root, dict) and root.get("identity")}


def recompile_counts(case: dict[str, Any]) -> collections.Counter:
    """Recompiles per (expected, identity) over every recompile event of the case."""
    counts: collections.Counter = collections.Counter()
    for event in _section(case, "recompiles").get("events") or []:
        identity = str(event.get("signature") or event.get("frame") or "?")
        counts[(bool(event.get("expected")), identity)] += 1
    return counts


def _identities(case: dict[str, Any], name: str) -> frozenset[str]:
    values = _section(case, name).get("signatures")
    return frozenset(str(v) for v in values) if isinstance(values, list) else frozenset()


def signature_of(case: dict[str, Any]) -> Signature:
    """The signature of an audited case (see the module docstring)."""
    breaks = frozenset(roots_of(case)) | _identities(case, "graph_breaks")
    recompile_signatures = _identities(case, "recompiles")
    if case.get("status") == "xfailed":
        return Signature("xfailed", None, None, None, breaks, frozenset(), recompile_signatures)
    recompiles = _section(case, "recompiles")
    return Signature(
        status=str(case.get("status")),
        graph_breaks=_section(case, "graph_breaks").get("count", 0),
        recompiles=recompiles.get("count", 0),
        unexpected_recompiles=recompiles.get("unexpected", 0),
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


def _root_line(how: str, root: dict[str, Any], times: str) -> str:
    where = root.get("location") or root.get("identity")
    text = f"{how} root at {where} ({times}): {_shorten(_first_line(root.get('reason')))}"
    source = str(root.get("source") or "").strip()
    return f"{text}\n      {source}" if source else text


def _hits(root: dict[str, Any]) -> int:
    hits = root.get("hits")
    return hits if isinstance(hits, int) else 1


def _break_lines(before_case: dict[str, Any], after_case: dict[str, Any]) -> list[str]:
    """Roots new or gone by identity, and kept roots whose hits moved."""
    old, new = roots_of(before_case), roots_of(after_case)
    added = [_root_line("new", new[i], f"x{_hits(new[i])}") for i in new if i not in old]
    gone = [_root_line("gone", old[i], f"x{_hits(old[i])}") for i in old if i not in new]
    moved = [
        _root_line("kept", new[i], f"x{_hits(old[i])} -> x{_hits(new[i])}")
        for i in new
        if i in old and _hits(old[i]) != _hits(new[i])
    ]
    return _capped(added) + _capped(gone) + _capped(moved)


def _guard_lines(before_case: dict[str, Any], after_case: dict[str, Any]) -> list[str]:
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


def _message_lines(before_case: dict[str, Any], after_case: dict[str, Any]) -> list[str]:
    """The gate's own message of each side when the status changed (why it failed, or was a known failure)."""
    if before_case.get("status") == after_case.get("status"):
        return []
    pairs = (("before", before_case), ("after", after_case))
    return [
        f"    {side}: {_shorten(_first_line(case.get('headline') or case.get('message')), MESSAGE_WIDTH)}"
        for side, case in pairs
        if case.get("headline") or case.get("message")
    ]


def evidence(before_case: dict[str, Any], after_case: dict[str, Any]) -> list[str]:
    """What changed from one audited run of a case to another, one item per line (sources indented)."""
    before, after = signature_of(before_case), signature_of(after_case)
    counts = _count_lines(before, after)
    lines = counts[:1] + _message_lines(before_case, after_case) + counts[1:] + _break_lines(before_case, after_case)
    if after.graph_breaks is not None and before.graph_breaks is not None:
        lines += _guard_lines(before_case, after_case)
    return lines
