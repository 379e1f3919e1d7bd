"""The compatibility matrix: one compile report as markdown, a table per model, a row per method.

    python -m compile_audit.artifacts.matrix REPORT.json [--output docs/compile-matrix.md]

Each cell is ``graph breaks / recompiles`` of one case with its status marker; the same report always
renders the same text (sorted, no clock), so the committed file only changes when results do.
Exit status 2 when the report cannot be used.
"""

from __future__ import annotations

import argparse
import collections
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from compile_audit.artifacts.records import CaseRecord
from compile_audit.artifacts.report import ReportCases, read_cases

# "passed" splits in two: clean (no break, only expected recompiles) or within a budget that allows some.
MARKERS = {"clean": "✅", "passed": "☑️", "failed": "⚠️", "error": "❌", "skipped": "⏭", "xfailed": "🚧"}
SUMMARY_COLUMNS = ("clean", "passed", "failed", "error", "skipped", "xfailed")
UNKNOWN_MARKER = "❓"
NOT_A_CASE = "–"
FOOTNOTE_WIDTH = 200
CELL_FIELDS = ("model", "method", "scenario")
LEGEND = [
    "Each cell is one case (method × scenario on that model): `graph breaks / recompiles` of its compiled run.",
    "",
    "- ✅ clean: no graph break, no unexpected recompile (only the expected train/eval switch)",
    "- ☑️ within budget: passes only because its graph breaks or unexpected recompiles are budgeted (see its note"
    " or causes in `tests/compile_budgets.toml`)",
    "- ⚠️ failed: over its budget (or another check of the case failed)",
    "- ❌ error: the case crashed; the error is in the footnote (counts shown when the audit got that far)",
    "- ⏭ skipped: not run here; the reason is in the footnote",
    "- 🚧 known failure: PEFT cannot pass this case today (`known_failure` in the budgets file; see footnote)",
    "- `(N unexp.)`: N of the recompiles were unexpected (not caused by the train/eval switch)",
    "- `recompile limit`: Dynamo gave up on a frame and ran it eagerly from then on",
    "- `N DDP splits`: graphs Dynamo's DDPOptimizer cut at DDP's gradient bucket boundaries (not graph breaks)",
    "- `1.63×`: compiled step time speedup over eager (GPU tier only)",
    f"- {NOT_A_CASE}: no such case (the method does not support the scenario or this model)",
]


def status_of(case: CaseRecord) -> str:
    """The case's status, with "passed" split into "clean" and "passed" (within a budget above zero)."""
    return "clean" if case.clean else case.status


def load_cases(path: str | Path) -> ReportCases:
    """The report; ValueError naming the file when a case lacks what a cell needs (the matrix lays cases out by
    model, method and scenario)."""
    report = read_cases(path)
    for index, case in enumerate(report.cases):
        missing = [key for key in CELL_FIELDS if getattr(case, key) is None]
        if missing:
            raise ValueError(f"{path}: case #{index} has no {', '.join(missing)}")
    return report


def section_of(case: CaseRecord) -> tuple[str, str]:
    """(tier, title) of the table a case goes in: one per model and device/backend."""
    device, backend = case.device or "cpu", case.backend or "?"
    return (case.tier or device, f"{case.model} · {device} / {backend}")


class Footnotes:
    """Numbered footnotes, one per distinct text, in order of first use."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def ref(self, text: str) -> str:
        lines = text.strip().splitlines()
        line = lines[0] if lines else "(no message)"
        line = line if len(line) <= FOOTNOTE_WIDTH else line[: FOOTNOTE_WIDTH - 1] + "…"
        number = self.numbers.setdefault(line, len(self.numbers) + 1)
        return f"[^{number}]"

    def lines(self) -> list[str]:
        return [f"[^{number}]: {text}" for text, number in self.numbers.items()]


def cell(case: CaseRecord, footnotes: Footnotes) -> str:
    status = case.status
    marker = MARKERS.get(status_of(case), UNKNOWN_MARKER)
    if status == "skipped" or (status == "error" and not case.audited):
        return marker + footnotes.ref(case.message or status)
    if status == "xfailed":
        marker += footnotes.ref(case.message or status)
    text = f"{marker} {case.graph_breaks.count} / {case.recompiles.count}"
    if case.recompiles.unexpected:
        text += f" ({case.recompiles.unexpected} unexp.)"
    if case.ddp_splits.count:
        text += f" · {case.ddp_splits.count} DDP splits"
    if case.recompiles.limit_hits:
        text += " recompile limit"
    speedup = case.benchmarks.get("speedup")
    if isinstance(speedup, (int, float)) and not isinstance(speedup, bool):
        text += f" · {speedup:.2f}×"
    if status == "error":
        text += footnotes.ref(case.message or "error")
    return text


def _table(cases: list[CaseRecord], footnotes: Footnotes) -> list[str]:
    scenarios = sorted({c.scenario for c in cases})
    by_method: dict[str, dict[str, CaseRecord]] = collections.defaultdict(dict)
    for case in cases:
        by_method[case.method][case.scenario] = case
    lines = ["| method | " + " | ".join(scenarios) + " |", "| --- |" + " --- |" * len(scenarios)]
    for method in sorted(by_method):
        cells = [cell(by_method[method][s], footnotes) if s in by_method[method] else NOT_A_CASE for s in scenarios]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def _tally(cases: list[CaseRecord]) -> collections.Counter:
    return collections.Counter(status_of(c) for c in cases)


def regenerate_command(report_path: str, output: str | None, cases: Sequence[CaseRecord]) -> str:
    pytest_args = ["pytest"]
    if cases and all(c.tier == "cuda" for c in cases):
        pytest_args += ["-m", "gpu"]
    cpu_backends = {c.backend or "" for c in cases if c.tier == "cpu"}
    if cpu_backends and cpu_backends != {"eager"}:
        pytest_args += ["--cpu-backend", sorted(cpu_backends)[0]]
    matrix_args = ["python", "-m", "compile_audit.artifacts.matrix", report_path] + (
        ["--output", output] if output else []
    )
    return f"{shlex.join([*pytest_args, '--compile-report', report_path])} && {shlex.join(matrix_args)}"


def render(report: ReportCases, report_path: str, output: str | None = None, regenerate: str | None = None) -> str:
    cases = report.cases
    described = ", ".join(f"{name} {version}" for name, version in report.versions.items())
    created = "?" if report.created is None else report.created
    lines = [
        "# torch.compile compatibility matrix",
        "",
        f"Generated from `{report_path}` (run of {created}) with {described or 'unknown versions'}.",
        f"Regenerate: `{regenerate or regenerate_command(report_path, output, cases)}`",
        "",
        *LEGEND,
    ]
    sections: dict[tuple[str, str], list[CaseRecord]] = collections.defaultdict(list)
    for case in cases:
        sections[section_of(case)].append(case)
    order = sorted(sections)
    lines += [
        "",
        "## Summary",
        "",
        "| model | cases | " + " | ".join(MARKERS[c] for c in SUMMARY_COLUMNS) + " |",
        "| --- | --- |" + " --- |" * len(SUMMARY_COLUMNS),
    ]
    for key in order:
        tally = _tally(sections[key])
        counts = " | ".join(str(tally[status]) for status in SUMMARY_COLUMNS)
        lines.append(f"| {key[1]} | {len(sections[key])} | {counts} |")
    footnotes = Footnotes()
    for key in order:
        lines += ["", f"## {key[1]}", ""]
        section = sections[key]
        reasons = {c.message or "" for c in section}
        if all(c.status == "skipped" for c in section) and len(reasons) == 1:
            # A whole tier not run on this machine (no CUDA, say) reads better as one line than a table of ⏭.
            every = "The case was" if len(section) == 1 else f"All {len(section)} cases were"
            lines.append(f"{every} skipped{footnotes.ref(reasons.pop() or 'skipped')}.")
        else:
            lines += _table(section, footnotes)
    if footnotes.numbers:
        lines += ["", *footnotes.lines()]
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compile_audit.artifacts.matrix",
        description="Render a compile report as a markdown compatibility matrix.",
    )
    parser.add_argument("report", help="report written by pytest --compile-report")
    parser.add_argument("--output", metavar="FILE", help="write the markdown to FILE (e.g. docs/compile-matrix.md)")
    parser.add_argument(
        "--regenerate", metavar="COMMAND", help="the command that regenerates the file (default: the pytest run)"
    )
    args = parser.parse_args(argv)
    try:
        report = load_cases(args.report)
    except ValueError as error:
        print(f"compile_audit.artifacts.matrix: {error}", file=sys.stderr)
        return 2
    text = render(report, args.report, args.output, args.regenerate)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
