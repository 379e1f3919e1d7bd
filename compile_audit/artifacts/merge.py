"""One report from the reports of a selection's shards (``pytest --splits N --group K``, one per machine).

The shards must have run on the same versions and be disjoint; the merged report is the report one run of the
whole selection writes, so the diff and the matrix read it unchanged::

    python -m compile_audit.artifacts.merge out/shard-*.json --output out/report.json

A re-run of some of their cases (after a fix, or to confirm recorded known failures) replaces those cases::

    python -m compile_audit.artifacts.merge out/shard-*.json --rerun out/rerun.json --output out/report.json

Every report is read and validated as typed records; the merged one keeps the reports' schema and their cases as
they were written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from compile_audit.artifacts.report import ReportCases, build_report, read_cases, write_report


def merge_reports(paths: list[str | Path], reruns: list[str | Path] = ()) -> dict[str, Any]:
    """ValueError naming the files when shards disagree on versions or schema or share a case, or a re-run holds a
    case no shard has (a new case belongs in a shard)."""
    if not paths:
        raise ValueError("no shard reports given")
    shards = [read_cases(path) for path in paths]
    first = shards[0]
    owner: dict[str, Path] = {}
    for shard in shards:
        _same_run(first, shard)
        for case_id in shard.by_id:
            if case_id in owner:
                raise ValueError(f"case {case_id!r} is in both {owner[case_id]} and {shard.path}: shards overlap")
            owner[case_id] = shard.path
    cases = {case["id"]: case for shard in shards for case in shard.data["cases"]}
    for rerun in map(read_cases, reruns):
        _same_run(first, rerun)
        for case in rerun.data["cases"]:
            if case["id"] not in cases:
                raise ValueError(f"case {case['id']!r} of the re-run {rerun.path} is in no shard report")
            cases[case["id"]] = case
    return build_report(list(cases.values()), dict(first.versions), first.gated, first.schema)


def _same_run(first: ReportCases, other: ReportCases) -> None:
    """The same versions, and the same schema: the merged report keeps the cases as they were written."""
    if other.schema != first.schema:
        raise ValueError(f"{first.path} is a {first.schema} report and {other.path} a {other.schema} one")
    _same_versions(first, other)


def _same_versions(first: ReportCases, other: ReportCases) -> None:
    if other.versions != first.versions:
        differing = sorted(
            name
            for name in set(other.versions) | set(first.versions)
            if other.versions.get(name) != first.versions.get(name)
        )
        details = ", ".join(f"{n}: {first.versions.get(n)} vs {other.versions.get(n)}" for n in differing)
        raise ValueError(f"{first.path} and {other.path} ran on different versions ({details})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compile_audit.artifacts.merge", description="Merge the compile reports of a selection's shards."
    )
    parser.add_argument("reports", nargs="+", help="shard reports (pytest --compile-report)")
    parser.add_argument(
        "--rerun",
        action="append",
        default=[],
        metavar="FILE",
        help="a report of a re-run of some of the shards' cases, which replace theirs (repeatable; later wins)",
    )
    parser.add_argument("--output", required=True, metavar="FILE", help="the merged report")
    args = parser.parse_args(argv)
    try:
        report = merge_reports(args.reports, args.rerun)
    except ValueError as error:
        print(f"compile_audit.artifacts.merge: {error}", file=sys.stderr)
        return 2
    write_report(args.output, report)
    reruns = f" and {len(args.rerun)} re-run(s)" if args.rerun else ""
    print(f"merged {len(args.reports)} report(s){reruns}, {len(report['cases'])} cases -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
