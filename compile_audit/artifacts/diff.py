"""What changed between two compile reports (base, head), worst first, as markdown.

    python -m compile_audit.artifacts.diff BASE.json HEAD.json [--timing-threshold PCT] [--memory-threshold PCT]
                                 [--chart] [--output FILE]

Exit status: 0 when nothing regressed, 1 when something did, 2 when a report cannot be used.

A case regressed when, from base to head, it has more graph breaks, more recompiles or more
unexpected recompiles; its status got worse (passed -> failed -> error), or it is no longer audited
(now skipped); or its compiled step time or memory grew beyond the threshold. Counts are compared
only when both runs audited the case: a skipped or crashed case has no meaningful counts.

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
from pathlib import Path
from typing import Any

from compile_audit.artifacts.report import audited, count, read_cases, recompile_limit_hits, section
from compile_audit.normalize import normalize
from compile_audit.rules.versions import gated_of

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
CHART_LIMIT = 30
ROOT_CASES_SHOWN = 12
REASON_WIDTH = 160

# An underscore between two letters or digits is literal (module_dropout); any other one may be emphasis.
_MARKDOWN_SPECIAL = re.compile(r"[\\`*<>\[\]|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


# The order in which changes are listed and, for sorting cases, weighed: a worse status first, then ...
METRICS = (
    "status",
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
class ReportDiff:
    base_versions: dict[str, Any]
    head_versions: dict[str, Any]
    base: dict[str, dict[str, Any]]  # cases by id
    head: dict[str, dict[str, Any]]
    changed: list[CaseDiff]
    only_base: list[tuple[dict[str, Any], bool]]  # (case, counts as a regression)
    only_head: list[tuple[dict[str, Any], bool]]
    work: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (case id, its compile-work change)
    gated: tuple[str, ...] = ()  # the libraries either report was gated on

    @property
    def regressed(self) -> bool:
        return any(d.regressed for d in self.changed) or any(r for _, r in self.only_base + self.only_head)

    @property
    def empty(self) -> bool:
        return not (self.changed or self.only_base or self.only_head or self.work)


# ----------------------------------------------------------------------------- reading


class NothingAudited(ValueError):
    """A report in which no case was audited: comparing it would pass having checked nothing."""


def load_cases(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]], tuple[str, ...]]:
    """The report's versions, its cases by id and the libraries it was gated on; ValueError naming the file when
    unusable."""
    cases = read_cases(path)
    if not cases.audited_count:
        statuses = collections.Counter(case["status"] for case in cases.cases)
        seen = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "no case at all"
        raise NothingAudited(f"{path}: no case was audited ({seen}): nothing to compare")
    return cases.versions, cases.by_id, gated_of(cases.report)


def _why(case: dict[str, Any]) -> str:
    """Why a case got worse, from its record: the exception it raised, or the verdict's headline and its first
    problem not held by a known failure; else the first line of its message (pytest's, for an error in a fixture)."""
    if case.get("raised"):
        return f"{case['raised']}: {case.get('error') or ''}".rstrip(": ")
    problems = [p for p in case.get("problems") or [] if isinstance(p, dict) and not p.get("held")]
    headline = case.get("headline")
    if headline and problems and problems[0].get("summary"):
        return f"{headline} — {problems[0]['summary']}"
    return headline or _first_line(case.get("message"))


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


def _roots(case: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The case's roots by identity (compile_audit.rules.roots): where Dynamo stopped, with their consequences."""
    return {str(root.get("identity")): root for root in section(case, "graph_breaks").get("roots") or []}


def _recompiles(case: dict[str, Any]) -> tuple[collections.Counter, dict[tuple, dict[str, Any]]]:
    counts: collections.Counter = collections.Counter()
    examples: dict[tuple, dict[str, Any]] = {}
    for event in section(case, "recompiles").get("events") or []:
        if event.get("consequence"):  # listed under its root
            continue
        key = (
            bool(event.get("expected")),
            normalize(str(event.get("frame", ""))),
            normalize(str(event.get("reason", ""))),
        )
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


def _new_roots(base: dict[str, Any], head: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Roots head has beyond base, in head's order: ("new" or "+N hits", the root)."""
    base_roots = _roots(base)
    found = []
    for identity, root in _roots(head).items():
        before = base_roots.get(identity)
        if before is None:
            found.append(("new", root))
        elif int(root.get("hits", 1)) > int(before.get("hits", 1)):
            found.append((f"+{int(root['hits']) - int(before.get('hits', 1))} hits of", root))
    return found


def _consequence_text(root: dict[str, Any]) -> str:
    consequences = root.get("consequences") or {}
    parts = [
        f"{len(consequences.get(kind) or [])} {label}"
        for kind, label in (
            ("eager_frames", "enclosing frame(s) run eagerly"),
            ("nested_breaks", "frame(s) compiled on their own that broke"),
            ("recompiles", "recompile(s)"),
            ("limit_hits", "recompile-limit hit(s)"),
        )
        if consequences.get(kind)
    ]
    return f"; so {', '.join(parts)}" if parts else ""


def root_line(root: dict[str, Any]) -> str:
    """A root in markdown: where, in which phases and how often, why, its source line, reached from where."""
    hits = int(root.get("hits", 1))
    times = f", x{hits}" if hits > 1 else ""
    source = f" — {code(root['source'])}" if str(root.get("source") or "").strip() else ""
    via = f" (reached from {code(root['via'])})" if root.get("via") else ""
    phases = ", ".join(root.get("phases") or []) or "?"
    reason = plain(_first_line(root.get("reason")))
    return f"{code(root.get('location', '?'))} ({phases}{times}): {reason}{source}{via}"


def _break_lines(new_roots: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [f"{how} root at {root_line(root)}{_consequence_text(root)}" for how, root in new_roots]


def _new_recompile_lines(base: dict[str, Any], head: dict[str, Any]) -> list[str]:
    base_counts, _ = _recompiles(base)
    head_counts, examples = _recompiles(head)
    extra = head_counts - base_counts
    lines = []
    for key in sorted(extra, key=lambda k: k[0]):  # unexpected ones first
        event = examples[key]
        kind = "expected" if key[0] else "unexpected"
        times = f" x{extra[key]}" if extra[key] > 1 else ""
        where = f"in {event.get('phase', '?')} of {code(event.get('frame', '?'))}"
        lines.append(f"new {kind} recompile{times} {where}: {code(_first_line(event.get('reason')))}")
    return lines


def _signatures(case: dict[str, Any], name: str) -> set[str] | None:
    """The case's signatures; None for a report written before signatures existed."""
    values = section(case, name).get("signatures")
    return {v for v in values if isinstance(v, str)} if isinstance(values, list) else None


def _signature_change(base: dict[str, Any], head: dict[str, Any], details: list[str]) -> Change | None:
    """New break or unexpected-recompile signatures: a regression even when every count is unchanged."""
    new = []
    for name, what in (("graph_breaks", "graph break"), ("recompiles", "unexpected recompile")):
        old, now = _signatures(base, name), _signatures(head, name)
        if old is None or now is None:
            continue
        for signature in sorted(now - old):
            new.append(signature)
            details.append(f"new {what} signature {code(signature)}")
    if not new:
        return None
    return Change("signatures", f"{len(new)} new signature(s)", len(new))


def _limit_change(base: dict[str, Any], head: dict[str, Any], details: list[str]) -> Change | None:
    """Frames on which Dynamo gave up (recompile limit) in head and not in base (a base report written before
    hits were recorded has nothing to compare with)."""
    if "limit_hits" not in section(base, "recompiles"):
        return None
    base_frames = {normalize(str(hit.get("frame", ""))) for hit in recompile_limit_hits(base)}
    new = [hit for hit in recompile_limit_hits(head) if normalize(str(hit.get("frame", ""))) not in base_frames]
    for hit in new:
        details.append(
            f"new recompile-limit hit in {hit.get('phase', '?')} of {code(hit.get('frame', '?'))}"
            f" ({hit.get('limit', '?')}): runs eagerly from then on"
        )
    if not new:
        return None
    return Change("recompile limit", f"recompile limit hit on {len(new)} new frame(s)", len(new))


def compare_case(
    base: dict[str, Any], head: dict[str, Any], timing_threshold: float, memory_threshold: float
) -> CaseDiff | None:
    changes: list[Change | None] = []
    details: list[str] = []
    status_delta = _status_delta(base["status"], head["status"])
    if status_delta:
        changes.append(Change("status", f"status {base['status']} -> {head['status']}", status_delta))
    if status_delta > 0 and (why := _why(head)):  # why it got worse: the error raised, or the first problem
        details.append(f"{head['status']}: {plain(_first_line(why))}")
    if audited(base) and audited(head):
        breaks = _count_change(
            "graph breaks (roots)", count(base, "graph_breaks", "count"), count(head, "graph_breaks", "count")
        )
        unexpected = _count_change(
            "unexpected recompiles", count(base, "recompiles", "unexpected"), count(head, "recompiles", "unexpected")
        )
        recompiles = _count_change("recompiles", count(base, "recompiles", "count"), count(head, "recompiles", "count"))
        new_roots = _new_roots(base, head)
        first_new = next((root for how, root in new_roots if how == "new"), None)
        if breaks and breaks.delta > 0 and first_new:
            where, reason = code(first_new.get("location", "?")), plain(_first_line(first_new.get("reason")))
            breaks.text += f", first at {where}: {reason}"
        details += _break_lines(new_roots)
        if (unexpected and unexpected.delta > 0) or (recompiles and recompiles.delta > 0):
            details += _new_recompile_lines(base, head)
        changes += [_limit_change(base, head, details), _signature_change(base, head, details)]
        splits = _count_change("ddp splits", count(base, "ddp_splits", "count"), count(head, "ddp_splits", "count"))
        changes += [breaks, unexpected, recompiles, splits]
    base_bench, head_bench = section(base, "benchmarks"), section(head, "benchmarks")
    step = base_bench.get(STEP_TIME_KEY), head_bench.get(STEP_TIME_KEY)
    changes.append(_percent_change("compiled step", "compiled step", *step, timing_threshold))
    for key in sorted(k for k in base_bench.keys() & head_bench.keys() if k.endswith(MEMORY_SUFFIX)):
        changes.append(_percent_change("memory", key, base_bench[key], head_bench[key], memory_threshold))
    kept = [c for c in changes if c is not None]
    return CaseDiff(head["id"], kept, details) if kept else None


WORK = (
    ("frames_compiled", "frames"),
    ("graphs_compiled", "graphs"),
    ("operations_captured", "operations"),
    ("guards", "guards"),
)


def _work(case: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Compile work per phase (frames, graphs, operations, guards), from the phases of a report that records them."""
    phases = {}
    for phase in case.get("phases") if isinstance(case.get("phases"), list) else []:
        if isinstance(phase, dict) and "name" in phase:
            phases[str(phase["name"])] = {key: phase[key] for key, _ in WORK if isinstance(phase.get(key), int)}
    return phases


def compare_work(base: dict[str, Any], head: dict[str, Any]) -> str | None:
    """What Dynamo compiled, when it changed: totals and the phases that moved. Listed, never a regression by
    itself (README: the breaks and recompiles are the gate; work is what they cost)."""
    if not (audited(base) and audited(head)):
        return None
    old, new = _work(base), _work(head)
    parts = []
    for key, label in WORK:
        before = sum(p.get(key, 0) for p in old.values() if key in p)
        after = sum(p.get(key, 0) for p in new.values() if key in p)
        if not any(key in p for p in old.values()) or not any(key in p for p in new.values()) or before == after:
            continue
        moved = [
            f"{name} {old[name][key]} -> {new[name][key]}"
            for name in new
            if name in old and key in old[name] and key in new[name] and old[name][key] != new[name][key]
        ]
        parts.append(f"{label} {before} -> {after} ({after - before:+d}{'; ' + ', '.join(moved) if moved else ''})")
    return "; ".join(parts) or None


def compare(
    base_path: str | Path,
    head_path: str | Path,
    timing_threshold: float = DEFAULT_TIMING_THRESHOLD,
    memory_threshold: float = DEFAULT_MEMORY_THRESHOLD,
) -> ReportDiff:
    """Every case that changed, worst first, and the cases only one report has; ValueError on bad input."""
    base_versions, base, base_gated = load_cases(base_path)
    head_versions, head, head_gated = load_cases(head_path)
    changed = [
        diff
        for case_id in sorted(base.keys() & head.keys())
        if (diff := compare_case(base[case_id], head[case_id], timing_threshold, memory_threshold))
    ]
    changed.sort(key=CaseDiff.sort_key)
    only_base = [(base[i], base[i]["status"] != "skipped") for i in sorted(base.keys() - head.keys())]
    only_head = [(head[i], head[i]["status"] in ("failed", "error")) for i in sorted(head.keys() - base.keys())]
    work = [
        (case_id, text)
        for case_id in sorted(base.keys() & head.keys())
        if (text := compare_work(base[case_id], head[case_id]))
    ]
    gated = tuple(dict.fromkeys([*base_gated, *head_gated]))
    return ReportDiff(base_versions, head_versions, base, head, changed, only_base, only_head, work, gated)


# ----------------------------------------------------------------------------- rendering


def versions_line(base: dict[str, Any], head: dict[str, Any], libraries: tuple[str, ...]) -> str:
    """The gated libraries' versions on each side."""

    def describe(versions: dict[str, Any]) -> str:
        return ", ".join(f"{name} {versions.get(name, '?')}" for name in libraries)

    differing = [name for name in libraries if base.get(name) != head.get(name)]
    note = f" (differs: {', '.join(differing)})" if differing else " (same versions)"
    return f"**base** {describe(base)} → **head** {describe(head)}{note}"


def _case_lines(diff: CaseDiff) -> list[str]:
    changes = "; ".join(change.text for change in diff.changes)
    return [f"- **{diff.case_id}**: {changes}", *(f"  - {detail}" for detail in diff.details)]


def _lonely_lines(title: str, cases: list[tuple[dict[str, Any], bool]], why: str) -> list[str]:
    lines = ["", f"### {title} ({len(cases)})", ""]
    for case, regressed in cases:
        counts = ""
        if audited(case):
            breaks, recompiles = count(case, "graph_breaks", "count"), count(case, "recompiles", "count")
            counts = f", graph breaks {breaks}, recompiles {recompiles}"
            counts += f" ({count(case, 'recompiles', 'unexpected')} unexpected)"
        flag = f" — **regression**: {why}" if regressed else ""
        lines.append(f"- **{case['id']}**: {case['status']}{counts}{flag}")
    return lines


def chart_lines(result: ReportDiff, section: str, key: str) -> list[str]:
    """A mermaid bar chart of one count: bars for head, a line for base, for the cases where it changed.

    Bars for both would overlap (xychart draws series of one kind on top of each other), hence the line.
    """
    base, head = result.base, result.head
    ids = [
        d.case_id
        for d in result.changed
        if count(base[d.case_id], section, key) != count(head[d.case_id], section, key)
    ]
    ids = [i for i in ids if audited(base[i]) and audited(head[i])][:CHART_LIMIT]
    if not ids:
        return []
    old = [count(base[i], section, key) for i in ids]
    new = [count(head[i], section, key) for i in ids]
    label = section.replace("_", " ") if key == "count" else f"{key} {section.replace('_', ' ')}"
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


def new_roots_across(result: ReportDiff, regressions: list[CaseDiff]) -> list[tuple[dict[str, Any], list[str]]]:
    """Each root new in head, once, with the worse cases that have it, most cases first."""
    cases: dict[str, list[str]] = {}
    roots: dict[str, dict[str, Any]] = {}
    for diff in regressions:
        base, head = result.base[diff.case_id], result.head[diff.case_id]
        for how, root in _new_roots(base, head):
            if how == "new":
                roots.setdefault(str(root.get("identity")), root)
                cases.setdefault(str(root.get("identity")), []).append(diff.case_id)
    return sorted(((roots[i], ids) for i, ids in cases.items()), key=lambda item: (-len(item[1]), item[0]["location"]))


def _roots_section(result: ReportDiff, regressions: list[CaseDiff]) -> list[str]:
    found = new_roots_across(result, regressions)
    if not found:
        return []
    lines = ["", f"### New roots ({len(found)}): where Dynamo now stops, the places to fix", ""]
    for root, case_ids in found:
        shown = ", ".join(case_ids[:ROOT_CASES_SHOWN])
        more = f" and {len(case_ids) - ROOT_CASES_SHOWN} more" if len(case_ids) > ROOT_CASES_SHOWN else ""
        lines.append(f"- {root_line(root)}")
        lines.append(f"  - identity {code(root.get('identity'))}; in {len(case_ids)} worse case(s): {shown}{more}")
    return lines


def render(result: ReportDiff, chart: bool = False) -> str:
    lines = [
        "## torch.compile gate: base vs head",
        "",
        versions_line(result.base_versions, result.head_versions, result.gated),
        "",
    ]
    if result.empty:
        return "\n".join([*lines, "no changes", ""])
    regressions = [d for d in result.changed if d.regressed]
    improvements = [d for d in result.changed if not d.regressed]
    verdict = "**regressed**" if result.regressed else "no regression"
    lines.append(
        f"{verdict}: {len(regressions)} case(s) worse, {len(improvements)} better, "
        f"{len(result.only_base)} only in base, {len(result.only_head)} only in head"
    )
    lines += _roots_section(result, regressions)
    for title, diffs in (("Regressions", regressions), ("Improvements", improvements)):
        if diffs:
            lines += ["", f"### {title} ({len(diffs)})", ""]
            for diff in diffs:
                lines += _case_lines(diff)
    if result.only_base:
        lines += _lonely_lines("Only in base", result.only_base, "audited in base, missing from head")
    if result.only_head:
        lines += _lonely_lines("Only in head", result.only_head, "new case outside its budget")
    if result.work:
        lines += ["", f"### Compile work ({len(result.work)})", ""]
        lines += [f"- **{case_id}**: {text}" for case_id, text in result.work]
    if chart:
        lines += chart_lines(result, "graph_breaks", "count")
        lines += chart_lines(result, "recompiles", "unexpected")
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
    parser.add_argument("--output", metavar="FILE", help="write the markdown to FILE instead of stdout")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = compare(args.base, args.head, args.timing_threshold, args.memory_threshold)
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
