"""What changed between two compile reports (base, head), worst first, as markdown.

    python -m compile_audit.artifacts.diff BASE.json HEAD.json [--timing-threshold PCT] [--memory-threshold PCT]
                                 [--chart] [--selected FILE] [--output FILE]

Exit status: 0 when nothing regressed, 1 when something did, 2 when a report cannot be used (unreadable, or no
case in it ran to a verdict: every one skipped).

A case regressed when, from base to head, it has more graph breaks, more recompiles or more
unexpected recompiles; its status got worse (passed -> failed -> error), or it is no longer audited
(now skipped); or its compiled step time or memory grew beyond the threshold. Counts are compared
only when both runs audited the case: a skipped or crashed case has no meaningful counts. A case that fails on both
sides regressed when head fails differently (another exception, or a problem base did not have); one that fails
alike is not this change's regression, and is listed as not judged, with the cases skipped on head and those the run
selected (``--selected``) that neither report holds.

Cases in only one report: both runs use the same gate checkout, so the case list differs only when a
run was cut short or the zoo depends on the PEFT version. A case that was audited in base and is
missing from head regressed (the gate can no longer vouch for it); one that was only skipped in base
did not. A case new in head regressed when it fails or errors (it starts outside its budget).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from compile_audit.artifacts.records import CaseRecord, RecompileEvent, Root
from compile_audit.artifacts.report import ReportCases, read_cases
from compile_audit.normalize import normalize, without_paths

STEP_TIME_KEY = "compiled_step_ms"
MEMORY_SUFFIX = "_bytes"  # every benchmarks entry ending in it is a memory figure (reserved_max_bytes, ...)
# Compiled step-time medians on one GPU move a few percent from run to run (clocks, allocator state,
# neighbours on a shared machine): 10% keeps that noise out while a real slowdown (a new graph break
# in the hot path costs far more) still shows. Peak memory of a fixed model and batch is nearly
# deterministic, so 5% already means something changed. CPU-tier reports carry no timings at all.
DEFAULT_TIMING_THRESHOLD = 10.0
DEFAULT_MEMORY_THRESHOLD = 5.0
MAX_THRESHOLD = 1000.0
# passed < skipped < xfailed < failed < error; entering "skipped" from any audited status is treated as worse.
# Entering a known failure ("xfailed", the budgets file's known_failure) is worse, and so is leaving one for
# "failed": a known failure holds only what it names, so a failed one has a new problem.
STATUS_RANK = {"passed": 0, "skipped": 1, "xfailed": 2, "failed": 3, "error": 4}
FAILED_RANK = STATUS_RANK["failed"]  # this rank and above (a status this diff does not know included) is a failure
# A case that raised one of these could not import a library: the environment's failure where both sides share it.
IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")
# The problems of a verdict that its counts and signatures decide (docs/report-schema.md): compare_case compares those
# directly, so two failures are told apart by the others (a check, the recompile limit, the steady state, ...).
COUNTED_PROBLEMS = frozenset({"over budget", "new root", "new signature", "tighten"})
CHART_LIMIT = 30
ROOT_CASES_SHOWN = 12
REASON_WIDTH = 160

# An underscore between two letters or digits is literal (module_dropout); any other one may be emphasis.
_MARKDOWN_SPECIAL = re.compile(r"[\\`*<>\[\]|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


# The order in which changes are listed and, for sorting cases, weighed: a worse status first, then ...
METRICS = (
    "status",
    "failure",
    "recompile limit",
    "signatures",
    "graph breaks (roots)",
    "unexpected recompiles",
    "recompiles",
    "ddp splits",
    "compiled step",
    "memory",
)


@dataclasses.dataclass
class Change:
    metric: str  # one of METRICS
    text: str  # "graph breaks 0 -> 3 (+3)"
    delta: float  # > 0 worse, < 0 better (a count, a rank or a percentage)


@dataclasses.dataclass
class CaseDiff:
    case_id: str
    changes: list[Change]
    details: list[str] = dataclasses.field(default_factory=list)  # sub-bullets: new breaks, new recompiles

    @property
    def regressed(self) -> bool:
        return any(change.delta > 0 for change in self.changes)

    def sort_key(self) -> tuple:
        """Worst first: regressions by their increases, metric by metric, then improvements by their decreases."""
        sign = 1 if self.regressed else -1
        size = {metric: 0.0 for metric in METRICS}
        for change in self.changes:
            size[change.metric] = max(size[change.metric], sign * change.delta)
        return (0 if self.regressed else 1, *(-size[metric] for metric in METRICS), self.case_id)


@dataclasses.dataclass
class NotJudged:
    """The cases that judged nothing of the change, each named: a clean verdict says how much it judged."""

    fail_alike: list[tuple[CaseRecord, CaseRecord]] = dataclasses.field(default_factory=list)  # (base, head)
    skipped: list[CaseRecord] = dataclasses.field(default_factory=list)  # skipped on head, not audited on base
    no_record: list[str] = dataclasses.field(default_factory=list)  # selected, and neither report holds it

    def __bool__(self) -> bool:
        return bool(self.fail_alike or self.skipped or self.no_record)


@dataclasses.dataclass
class ReportDiff:
    base_versions: Mapping[str, str]
    head_versions: Mapping[str, str]
    base: dict[str, CaseRecord]  # cases by id
    head: dict[str, CaseRecord]
    changed: list[CaseDiff]
    only_base: list[tuple[CaseRecord, bool]]  # (case, counts as a regression)
    only_head: list[tuple[CaseRecord, bool]]
    work: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (case id, its compile-work change)
    gated: tuple[str, ...] = ()  # the libraries either report was gated on
    not_judged: NotJudged = dataclasses.field(default_factory=NotJudged)

    @property
    def regressed(self) -> bool:
        return any(d.regressed for d in self.changed) or any(r for _, r in self.only_base + self.only_head)

    @property
    def empty(self) -> bool:
        return not (self.changed or self.only_base or self.only_head or self.work)


# ----------------------------------------------------------------------------- reading


class NothingAudited(ValueError):
    """A report in which no case ran to a verdict (every one skipped): comparing it would pass having checked
    nothing. A case that failed, audited or not, is a verdict: both sides failing alike is said, never an error."""


def fails(case: CaseRecord) -> bool:
    return STATUS_RANK.get(case.status, STATUS_RANK["error"]) >= FAILED_RANK


def load_cases(path: str | Path) -> ReportCases:
    """The report, with at least one case audited or failed; ValueError naming the file when unusable."""
    cases = read_cases(path)
    if not cases.audited_count and not any(fails(case) for case in cases.cases):
        statuses = collections.Counter(case.status for case in cases.cases)
        seen = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "no case at all"
        raise NothingAudited(f"{path}: no case was audited ({seen}): nothing to compare")
    return cases


def _why(case: CaseRecord) -> str:
    """Why a case got worse, from its record: its first problem (first_problem), after the verdict's headline where
    the verdict has one."""
    first = first_problem(case)
    return f"{case.headline} — {first}" if case.headline and not case.raised and first != case.headline else first


def first_problem(case: CaseRecord) -> str:
    """A failing case's first problem in one line: the exception it raised, else its verdict's first problem not held
    by a known failure, else its headline or the first line of its message (pytest's, for a failure at setup)."""
    if case.raised:
        return f"{case.raised}: {case.error or ''}".rstrip(": ")
    problems = [p for p in case.problems if not p.held]
    if problems and problems[0].summary:
        return problems[0].summary
    return case.headline or _first_line(case.message)


def _comparable(text: str | None) -> str:
    """A message as two runs compare it: no paths, line numbers, ids or addresses."""
    return normalize(without_paths(_first_line(text, width=10_000)))


def _problem_kinds(case: CaseRecord) -> set[tuple[str, tuple[str, ...]]]:
    """The verdict's problems not held by a known failure, by kind and what they name (the check, the frames); those
    its counts decide are left to the counts."""
    return {(p.kind, p.names) for p in case.problems if not p.held and p.kind not in COUNTED_PROBLEMS}


def fails_alike(base: CaseRecord, head: CaseRecord) -> bool:
    """Head fails as base did, both failing: the same exception (type, and message without run-specific details),
    else no problem base's verdict did not have (counts and roots are compared apart), else the same first line."""
    if base.raised or head.raised:
        return (base.raised, _comparable(base.error)) == (head.raised, _comparable(head.error))
    if base.problems or head.problems:
        return _problem_kinds(head) <= _problem_kinds(base)
    return _comparable(base.headline or base.message) == _comparable(head.headline or head.message)


_IMPORTED_MODULE = re.compile(r"(?:No module named|from) '([\w.]+)'")


def missing_dependency(case: CaseRecord) -> str | None:
    """The library a case could not import (the top-level package its ImportError names), for the summary."""
    if case.raised not in IMPORT_ERRORS:
        return None
    found = _IMPORTED_MODULE.search(case.error or "")
    return found[1].split(".")[0] if found else None


def _first_line(text: Any, width: int = REASON_WIDTH) -> str:
    lines = str(text or "").strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def code(text: Any) -> str:
    """A markdown code span that survives backticks in the text."""
    text = str(text).strip()
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def plain(text: str) -> str:
    """Prose from Dynamo (break reasons) as literal markdown: no stray emphasis, links or HTML."""
    return _MARKDOWN_SPECIAL.sub(r"\\\g<0>", text)


def _roots(case: CaseRecord) -> dict[str, Root]:
    """The case's roots by identity (compile_audit.rules.roots): where Dynamo stopped, with their consequences."""
    return {root.identity: root for root in case.graph_breaks.roots}


def _recompiles(case: CaseRecord) -> tuple[collections.Counter, dict[tuple, RecompileEvent]]:
    counts: collections.Counter = collections.Counter()
    examples: dict[tuple, RecompileEvent] = {}
    for event in case.recompiles.events:
        if event.consequence:  # listed under its root
            continue
        key = (event.expected, normalize(event.frame), normalize(event.reason))
        counts[key] += 1
        examples.setdefault(key, event)
    return counts, examples


# ----------------------------------------------------------------------------- comparing


def _count_change(metric: str, old: int, new: int) -> Change | None:
    if old == new:
        return None
    return Change(metric, f"{metric} {old} -> {new} ({new - old:+d})", new - old)


def _status_delta(old: str, new: str) -> int:
    if old == new:
        return 0
    if new == "skipped":  # no longer audited: coverage lost, whatever it was before
        return 1
    return STATUS_RANK.get(new, 4) - STATUS_RANK.get(old, 4)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _percent_change(metric: str, what: str, old: Any, new: Any, threshold: float) -> Change | None:
    """A timing or memory change beyond the threshold (percent of base); smaller ones are noise."""
    if not (_number(old) and _number(new)) or old <= 0:
        return None
    percent = (new - old) / old * 100
    if abs(percent) <= threshold:
        return None
    if metric == "memory":
        text = f"{what} {old / 2**20:.1f} -> {new / 2**20:.1f} MiB ({percent:+.1f}%)"
    else:
        text = f"{what} {old:.1f} -> {new:.1f} ms ({percent:+.1f}%)"
    return Change(metric, text, percent)


def _new_roots(base: CaseRecord, head: CaseRecord) -> list[tuple[str, Root]]:
    """Roots head has beyond base, in head's order: ("new" or "+N hits", the root)."""
    base_roots = _roots(base)
    found = []
    for identity, root in _roots(head).items():
        before = base_roots.get(identity)
        if before is None:
            found.append(("new", root))
        elif root.hits > before.hits:
            found.append((f"+{root.hits - before.hits} hits of", root))
    return found


CONSEQUENCES = (
    ("eager_frames", "enclosing frame(s) run eagerly"),
    ("nested_breaks", "frame(s) compiled on their own that broke"),
    ("recompiles", "recompile(s)"),
    ("limit_hits", "recompile-limit hit(s)"),
)


def _consequence_text(root: Root) -> str:
    listed = [(len(getattr(root.consequences, kind)), label) for kind, label in CONSEQUENCES]
    parts = [f"{n} {label}" for n, label in listed if n]
    return f"; so {', '.join(parts)}" if parts else ""


def root_line(root: Root) -> str:
    """A root in markdown: where, in which phases and how often, why, its source line, reached from where."""
    times = f", x{root.hits}" if root.hits > 1 else ""
    source = f" — {code(root.source)}" if root.source.strip() else ""
    via = f" (reached from {code(root.via)})" if root.via else ""
    phases = ", ".join(root.phases) or "?"
    return f"{code(root.location)} ({phases}{times}): {plain(_first_line(root.reason))}{source}{via}"


def _break_lines(new_roots: list[tuple[str, Root]]) -> list[str]:
    return [f"{how} root at {root_line(root)}{_consequence_text(root)}" for how, root in new_roots]


def _new_recompile_lines(base: CaseRecord, head: CaseRecord) -> list[str]:
    base_counts, _ = _recompiles(base)
    head_counts, examples = _recompiles(head)
    extra = head_counts - base_counts
    lines = []
    for key in sorted(extra, key=lambda k: k[0]):  # unexpected ones first
        event = examples[key]
        kind = "expected" if key[0] else "unexpected"
        times = f" x{extra[key]}" if extra[key] > 1 else ""
        where = f"in {event.phase} of {code(event.frame)}"
        lines.append(f"new {kind} recompile{times} {where}: {code(_first_line(event.reason))}")
    return lines


def _signature_change(base: CaseRecord, head: CaseRecord, details: list[str]) -> Change | None:
    """New break or unexpected-recompile signatures: a regression even when every count is unchanged."""
    new = []
    for side, what in ((lambda c: c.graph_breaks, "graph break"), (lambda c: c.recompiles, "unexpected recompile")):
        old, now = set(side(base).signatures), set(side(head).signatures)
        for signature in sorted(now - old):
            new.append(signature)
            details.append(f"new {what} signature {code(signature)}")
    if not new:
        return None
    return Change("signatures", f"{len(new)} new signature(s)", len(new))


def _limit_change(base: CaseRecord, head: CaseRecord, details: list[str]) -> Change | None:
    """Frames on which Dynamo gave up (recompile limit) in head and not in base."""
    base_frames = {normalize(hit.frame) for hit in base.recompiles.limit_hits}
    new = [hit for hit in head.recompiles.limit_hits if normalize(hit.frame) not in base_frames]
    for hit in new:
        details.append(
            f"new recompile-limit hit in {hit.phase} of {code(hit.frame)} ({hit.limit}): runs eagerly from then on"
        )
    if not new:
        return None
    return Change("recompile limit", f"recompile limit hit on {len(new)} new frame(s)", len(new))


def compare_case(
    base: CaseRecord, head: CaseRecord, timing_threshold: float, memory_threshold: float
) -> CaseDiff | None:
    changes: list[Change | None] = []
    details: list[str] = []
    status_delta = _status_delta(base.status, head.status)
    if status_delta:
        changes.append(Change("status", f"status {base.status} -> {head.status}", status_delta))
    if status_delta > 0 and (why := _why(head)):  # why it got worse: the error raised, or the first problem
        details.append(f"{head.status}: {plain(_first_line(why))}")
    if fails(base) and fails(head) and status_delta <= 0 and not fails_alike(base, head):
        changes.append(Change("failure", "fails on both sides, differently", 1))
        details += [
            f"{side} {case.status}: {plain(_first_line(first_problem(case)))}"
            for side, case in (("head", head), ("base", base))
        ]
    if base.audited and head.audited:
        breaks = _count_change("graph breaks (roots)", base.graph_breaks.count, head.graph_breaks.count)
        unexpected = _count_change("unexpected recompiles", base.recompiles.unexpected, head.recompiles.unexpected)
        recompiles = _count_change("recompiles", base.recompiles.count, head.recompiles.count)
        new_roots = _new_roots(base, head)
        first_new = next((root for how, root in new_roots if how == "new"), None)
        if breaks and breaks.delta > 0 and first_new:
            breaks.text += f", first at {code(first_new.location)}: {plain(_first_line(first_new.reason))}"
        details += _break_lines(new_roots)
        if (unexpected and unexpected.delta > 0) or (recompiles and recompiles.delta > 0):
            details += _new_recompile_lines(base, head)
        changes += [_limit_change(base, head, details), _signature_change(base, head, details)]
        splits = _count_change("ddp splits", base.ddp_splits.count, head.ddp_splits.count)
        changes += [breaks, unexpected, recompiles, splits]
    base_bench, head_bench = base.benchmarks, head.benchmarks
    step = base_bench.get(STEP_TIME_KEY), head_bench.get(STEP_TIME_KEY)
    changes.append(_percent_change("compiled step", "compiled step", *step, timing_threshold))
    for key in sorted(k for k in base_bench.keys() & head_bench.keys() if k.endswith(MEMORY_SUFFIX)):
        changes.append(_percent_change("memory", key, base_bench[key], head_bench[key], memory_threshold))
    kept = [c for c in changes if c is not None]
    return CaseDiff(head.id, kept, details) if kept else None


WORK = (
    ("frames_compiled", "frames"),
    ("graphs_compiled", "graphs"),
    ("operations_captured", "operations"),
    ("guards", "guards"),
)


def _work(case: CaseRecord) -> dict[str, dict[str, int]]:
    """Compile work per phase: frames, graphs, operations, guards."""
    return {phase.name: {key: getattr(phase, key) for key, _ in WORK} for phase in case.phases}


def compare_work(base: CaseRecord, head: CaseRecord) -> str | None:
    """What Dynamo compiled, when it changed: totals and the phases that moved. Listed, never a regression by
    itself (README: the breaks and recompiles are the gate; work is what they cost)."""
    if not (base.audited and head.audited and base.phases and head.phases):
        return None
    old, new = _work(base), _work(head)
    parts = []
    for key, label in WORK:
        before = sum(p[key] for p in old.values())
        after = sum(p[key] for p in new.values())
        if before == after:
            continue
        moved = [
            f"{name} {old[name][key]} -> {new[name][key]}"
            for name in new
            if name in old and old[name][key] != new[name][key]
        ]
        parts.append(f"{label} {before} -> {after} ({after - before:+d}{'; ' + ', '.join(moved) if moved else ''})")
    return "; ".join(parts) or None


def not_judged(
    base: Mapping[str, CaseRecord], head: Mapping[str, CaseRecord], changed: list[CaseDiff], selected: Sequence[str]
) -> NotJudged:
    """What judged nothing of the change: the cases that fail on both sides alike and changed nothing else, those
    skipped on head that did not regress, and those selected that neither side has a record of."""
    listed = {diff.case_id for diff in changed}
    fail_alike = [
        (base[i], head[i])
        for i in sorted(base.keys() & head.keys())
        if i not in listed and fails(base[i]) and fails(head[i])
    ]
    skipped = [head[i] for i in sorted(head) if head[i].status == "skipped" and i not in listed]
    no_record = sorted(set(selected) - base.keys() - head.keys())
    return NotJudged(fail_alike, skipped, no_record)


def compare(
    base_path: str | Path,
    head_path: str | Path,
    timing_threshold: float = DEFAULT_TIMING_THRESHOLD,
    memory_threshold: float = DEFAULT_MEMORY_THRESHOLD,
    selected: Sequence[str] = (),
) -> ReportDiff:
    """Every case that changed, worst first, the cases only one report has, and what judged nothing (``selected``:
    the cases the run selected, to name those neither report holds); ValueError on bad input."""
    base_report, head_report = load_cases(base_path), load_cases(head_path)
    base, head = base_report.by_id, head_report.by_id
    changed = [
        diff
        for case_id in sorted(base.keys() & head.keys())
        if (diff := compare_case(base[case_id], head[case_id], timing_threshold, memory_threshold))
    ]
    changed.sort(key=CaseDiff.sort_key)
    only_base = [(base[i], base[i].status != "skipped") for i in sorted(base.keys() - head.keys())]
    only_head = [
        (head[i], fails(head[i]))
        for i in sorted(head.keys() - base.keys())
        if head[i].status != "skipped"  # listed as not judged
    ]
    work = [
        (case_id, text)
        for case_id in sorted(base.keys() & head.keys())
        if (text := compare_work(base[case_id], head[case_id]))
    ]
    gated = tuple(dict.fromkeys([*base_report.gated, *head_report.gated]))
    return ReportDiff(
        base_report.versions,
        head_report.versions,
        base,
        head,
        changed,
        only_base,
        only_head,
        work,
        gated,
        not_judged(base, head, changed, selected),
    )


# ----------------------------------------------------------------------------- rendering


def versions_line(base: Mapping[str, str], head: Mapping[str, str], libraries: tuple[str, ...]) -> str:
    """The gated libraries' versions on each side."""

    def describe(versions: Mapping[str, str]) -> str:
        return ", ".join(f"{name} {versions.get(name, '?')}" for name in libraries)

    differing = [name for name in libraries if base.get(name) != head.get(name)]
    note = f" (differs: {', '.join(differing)})" if differing else " (same versions)"
    return f"**base** {describe(base)} → **head** {describe(head)}{note}"


def _case_lines(diff: CaseDiff) -> list[str]:
    changes = "; ".join(change.text for change in diff.changes)
    return [f"- **{diff.case_id}**: {changes}", *(f"  - {detail}" for detail in diff.details)]


def lonely_lines(title: str, cases: list[tuple[CaseRecord, bool]], why: str) -> list[str]:
    lines = ["", f"### {title} ({len(cases)})", ""]
    for case, regressed in cases:
        counts = ""
        if case.audited:
            counts = f", graph breaks {case.graph_breaks.count}, recompiles {case.recompiles.count}"
            counts += f" ({case.recompiles.unexpected} unexpected)"
        flag = f" — **regression**: {why}" if regressed else ""
        lines.append(f"- **{case.id}**: {case.status}{counts}{flag}")
        if regressed:  # with no base to compare, what to fix: each root at its line, or the error
            lines += [
                f"  - root {code(root.location)} in {code(root.function)}: {root.reason}"
                for root in case.graph_breaks.roots
            ]
            if case.error:
                lines.append(f"  - raised {code(case.raised or 'an error')}: {case.error}")
    return lines


def chart_lines(result: ReportDiff, label: str, count: Callable[[CaseRecord], int]) -> list[str]:
    """A mermaid bar chart of one count: bars for head, a line for base, for the cases where it changed.

    Bars for both would overlap (xychart draws series of one kind on top of each other), hence the line.
    """
    base, head = result.base, result.head
    ids = [d.case_id for d in result.changed if count(base[d.case_id]) != count(head[d.case_id])]
    ids = [i for i in ids if base[i].audited and head[i].audited][:CHART_LIMIT]
    if not ids:
        return []
    old = [count(base[i]) for i in ids]
    new = [count(head[i]) for i in ids]
    return [
        "",
        "```mermaid",
        "xychart-beta horizontal",
        f'    title "{label}: bars = head, line = base"',
        "    x-axis [" + ", ".join(f'"{i}"' for i in ids) + "]",
        f'    y-axis "{label}" 0 --> {max(old + new) + 1}',
        f"    bar [{', '.join(map(str, new))}]",
        f"    line [{', '.join(map(str, old))}]",
        "```",
    ]


def new_roots_across(result: ReportDiff, regressions: list[CaseDiff]) -> list[tuple[Root, list[str]]]:
    """Each root new in head, once, with the worse cases that have it, most cases first."""
    cases: dict[str, list[str]] = {}
    roots: dict[str, Root] = {}
    for diff in regressions:
        base, head = result.base[diff.case_id], result.head[diff.case_id]
        for how, root in _new_roots(base, head):
            if how == "new":
                roots.setdefault(root.identity, root)
                cases.setdefault(root.identity, []).append(diff.case_id)
    return sorted(((roots[i], ids) for i, ids in cases.items()), key=lambda item: (-len(item[1]), item[0].location))


def _roots_section(result: ReportDiff, regressions: list[CaseDiff]) -> list[str]:
    found = new_roots_across(result, regressions)
    if not found:
        return []
    lines = ["", f"### New roots ({len(found)}): where Dynamo now stops, the places to fix", ""]
    for root, case_ids in found:
        shown = ", ".join(case_ids[:ROOT_CASES_SHOWN])
        more = f" and {len(case_ids) - ROOT_CASES_SHOWN} more" if len(case_ids) > ROOT_CASES_SHOWN else ""
        lines.append(f"- {root_line(root)}")
        lines.append(f"  - identity {code(root.identity)}; in {len(case_ids)} worse case(s): {shown}{more}")
    return lines


def environment_note(fail_alike: list[tuple[CaseRecord, CaseRecord]]) -> str:
    """Of the cases failing alike, those that cannot import a library on either side, by library: the environment's
    failure (a version the PEFT under test does not support, say), not the change's."""
    missing = collections.Counter(library for _, head in fail_alike if (library := missing_dependency(head)))
    return "; ".join(
        f"{n} of them cannot import {code(library)} on either side: the environment's failure, not this change's"
        for library, n in missing.most_common()
    )


def not_judged_summary(cases: NotJudged) -> str:
    """How much judged nothing, in one line: the cases failing on both sides (with the library that does not import
    where that is why), those skipped on head, those that could not run."""
    parts = []
    if cases.fail_alike:
        environment = environment_note(cases.fail_alike)
        parts.append(
            f"{len(cases.fail_alike)} case(s) fail on both sides and judge nothing of this change"
            + (f" ({environment})" if environment else "")
        )
    if cases.skipped:
        parts.append(f"{len(cases.skipped)} skipped on head")
    if cases.no_record:
        parts.append(f"{len(cases.no_record)} could not run (no record)")
    return "; ".join(parts)


def not_judged_lines(cases: NotJudged) -> list[str]:
    """The section after the regressions: each case that judged nothing, with why."""
    if not cases:
        return []
    lines = ["", f"### Not judged ({len(cases.fail_alike) + len(cases.skipped) + len(cases.no_record)})"]
    if cases.fail_alike:
        environment = environment_note(cases.fail_alike)
        lines += [
            "",
            f"Fail on both sides alike ({len(cases.fail_alike)}{'; ' + environment if environment else ''}), so not"
            " this change's regression: head's first problem, and whether base's is the same",
            "",
        ]
        for base, head in cases.fail_alike:
            first, before = first_problem(head), first_problem(base)
            same = "the same" if _comparable(first) == _comparable(before) else code(_first_line(before))
            lines.append(f"- **{head.id}**: {head.status}: {code(_first_line(first))}; base {base.status}: {same}")
    if cases.skipped:
        lines += ["", f"Skipped on head ({len(cases.skipped)})", ""]
        lines += [f"- **{case.id}**: {plain(_first_line(case.message)) or 'no reason given'}" for case in cases.skipped]
    if cases.no_record:
        lines += ["", f"Could not run: selected, with no record on either side ({len(cases.no_record)})", ""]
        lines += [f"- **{case_id}**" for case_id in cases.no_record]
    return lines


def verdict_line(result: ReportDiff) -> str:
    """The first line: the verdict, what did not judge the change when anything did not, and the counts."""
    regressions = sum(d.regressed for d in result.changed)
    counts = (
        f"{regressions} case(s) worse, {len(result.changed) - regressions} better, "
        f"{len(result.only_base)} only in base, {len(result.only_head)} only in head"
    )
    unjudged = not_judged_summary(result.not_judged)
    if result.regressed:
        return f"**regressed**: {counts}" + (f"; not judged: {unjudged}" if unjudged else "")
    if result.empty:
        return "no changes" + (f"; {unjudged}" if unjudged else "")
    return f"no regression; {unjudged} ({counts})" if unjudged else f"no regression: {counts}"


def render(result: ReportDiff, chart: bool = False) -> str:
    lines = [
        "## torch.compile gate: base vs head",
        "",
        verdict_line(result),
        "",
        versions_line(result.base_versions, result.head_versions, result.gated),
    ]
    if result.empty:
        return "\n".join([*lines, *not_judged_lines(result.not_judged), ""])
    regressions = [d for d in result.changed if d.regressed]
    improvements = [d for d in result.changed if not d.regressed]
    lines += _roots_section(result, regressions)
    for title, diffs in (("Regressions", regressions), ("Improvements", improvements)):
        if diffs:
            lines += ["", f"### {title} ({len(diffs)})", ""]
            for diff in diffs:
                lines += _case_lines(diff)
    if result.only_base:
        lines += lonely_lines("Only in base", result.only_base, "audited in base, missing from head")
    if result.only_head:
        lines += lonely_lines("Only in head", result.only_head, "new case outside its budget")
    lines += not_judged_lines(result.not_judged)
    if result.work:
        lines += ["", f"### Compile work ({len(result.work)})", ""]
        lines += [f"- **{case_id}**: {text}" for case_id, text in result.work]
    if chart:
        lines += chart_lines(result, "graph breaks", lambda case: case.graph_breaks.count)
        lines += chart_lines(result, "unexpected recompiles", lambda case: case.recompiles.unexpected)
    return "\n".join([*lines, ""])


# ----------------------------------------------------------------------------- command line


def _threshold(option: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} must be a percentage, got {text!r}") from None
        if not 0 <= value <= MAX_THRESHOLD:  # also rejects nan
            raise argparse.ArgumentTypeError(f"{option} must be between 0 and {MAX_THRESHOLD:g} (percent), got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m compile_audit.artifacts.diff",
        description="Compare two compile reports; exit 1 when head regressed, 2 when a report is unusable.",
    )
    parser.add_argument("base", help="report of the base run (pytest --compile-report)")
    parser.add_argument("head", help="report of the head run")
    parser.add_argument(
        "--timing-threshold",
        type=_threshold("--timing-threshold"),
        default=DEFAULT_TIMING_THRESHOLD,
        metavar="PCT",
        help=f"compiled step time change (percent) below which it is noise (default {DEFAULT_TIMING_THRESHOLD:g})",
    )
    parser.add_argument(
        "--memory-threshold",
        type=_threshold("--memory-threshold"),
        default=DEFAULT_MEMORY_THRESHOLD,
        metavar="PCT",
        help=f"memory change (percent) below which it is noise (default {DEFAULT_MEMORY_THRESHOLD:g})",
    )
    parser.add_argument("--chart", action="store_true", help="add mermaid charts of the changed counts")
    parser.add_argument(
        "--selected",
        metavar="FILE",
        help="the cases the run selected, one per line: those neither report holds are listed as could not run",
    )
    parser.add_argument("--output", metavar="FILE", help="write the markdown to FILE instead of stdout")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        selected = Path(args.selected).read_text(encoding="utf-8").split() if args.selected else []
        result = compare(args.base, args.head, args.timing_threshold, args.memory_threshold, selected)
    except OSError as error:
        print(f"compile_audit.artifacts.diff: --selected: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"compile_audit.artifacts.diff: {error}", file=sys.stderr)
        return 2
    text = render(result, chart=args.chart)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 1 if result.regressed else 0


if __name__ == "__main__":
    sys.exit(main())
