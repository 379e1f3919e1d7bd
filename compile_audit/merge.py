"""One report from the reports of a selection's shards (``pytest --splits N --group K``, one per machine).

The shards must have run on the same versions and be disjoint; the merged report is the report one run of the
whole selection writes, so the diff and the matrix read it unchanged::

    python -m compile_audit.merge out/shard-*.json --output out/report.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from compile_audit.report import build_report, read_cases, write_report


def merge_reports(paths: list[str | Path]) -> dict[str, Any]:
    """ValueError naming the files when shards disagree on versions or share a case."""
    if not paths:
        raise ValueError("no shard reports given")
    shards = [read_cases(path) for path in paths]
    first = shards[0]
    owner: dict[str, Path] = {}
    for shard in shards:
        if shard.versions != first.versions:
            differing = sorted(
                name
                for name in set(shard.versions) | set(first.versions)
                if shard.versions.get(name) != first.versions.get(name)
            )
            details = ", ".join(f"{n}: {first.versions.get(n)} vs {shard.versions.get(n)}" for n in differing)
            raise ValueError(f"{first.path} and {shard.path} ran on different versions ({details})")
        for case_id in shard.by_id:
            if case_id in owner:
                raise ValueError(f"case {case_id!r} is in both {owner[case_id]} and {shard.path}: shards overlap")
            owner[case_id] = shard.path
    return build_report([case for shard in shards for case in shard.cases], first.versions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compile_audit.merge", description="Merge the compile reports of a selection's shards."
    )
    parser.add_argument("reports", nargs="+", help="shard reports (pytest --compile-report)")
    parser.add_argument("--output", required=True, metavar="FILE", help="the merged report")
    args = parser.parse_args(argv)
    try:
        report = merge_reports(args.reports)
    except ValueError as error:
        print(f"compile_audit.merge: {error}", file=sys.stderr)
        return 2
    write_report(args.output, report)
    print(f"merged {len(args.reports)} report(s), {len(report['cases'])} cases -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
