"""The coverage figure: the installed PEFT's layer forwards (bench_models.layer_forwards), the cases whose footprint
holds each (tests/footprints.json), and those no case runs, with their reasons (tests/coverage_gaps.toml). It joins
the zoo and the engine, which never import each other, so it lives with the tests (docs/coverage.md).

    python -m tests.tools.coverage             # the table and the figure
    python -m tests.tools.coverage --markdown  # the tables of docs/coverage.md
    python -m tests.tools.coverage --check     # exit 1 naming each unlisted forward and each stale gaps entry
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_models.layer_forwards import installed_layer_forwards, peft
from compile_audit.selection import coverage, footprints_file

TESTS = Path(__file__).resolve().parents[1]
FOOTPRINTS = TESTS / "footprints.json"
GAPS = TESTS / "coverage_gaps.toml"


def version_mismatch(footprints: footprints_file.Footprints) -> str | None:
    """Why the footprints do not describe the installed peft (they are recorded per version), or None."""
    recorded = footprints.versions.get("peft")
    if recorded == peft.__version__:
        return None
    return f"tests/footprints.json was recorded with peft {recorded}, peft {peft.__version__} is installed"


def coverage_rows(
    footprints_path: Path = FOOTPRINTS, gaps_path: Path = GAPS
) -> tuple[list[coverage.Row], coverage.Gaps, footprints_file.Footprints, dict[str, str]]:
    """The rows of the installed PEFT's layer forwards, the gaps, the footprints, and the modules not inspected."""
    footprints, gaps = footprints_file.load(footprints_path), coverage.load_gaps(gaps_path)
    forwards = installed_layer_forwards()
    return coverage.rows(forwards.keys, footprints, gaps), gaps, footprints, forwards.not_inspected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.coverage", description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the tables for docs/coverage.md")
    parser.add_argument("--check", action="store_true", help="exit 1 on an unlisted forward or a stale gaps entry")
    parser.add_argument("--footprints", type=Path, default=FOOTPRINTS)
    parser.add_argument("--gaps", type=Path, default=GAPS)
    args = parser.parse_args(argv)
    rows, gaps, footprints, not_inspected = coverage_rows(args.footprints, args.gaps)
    for module, error in sorted(not_inspected.items()):
        print(f"note: not inspected: {module}: {error}", file=sys.stderr)
    mismatch = version_mismatch(footprints)
    if mismatch:
        print(f"note: {mismatch}: the figure is of that version's cases", file=sys.stderr)
    print(coverage.markdown(rows) if args.markdown else coverage.text(rows))
    print(f"\ncoverage: {coverage.figure(rows)} (peft {peft.__version__})")
    if not args.check:
        return 0
    found = coverage.problems(rows, gaps)
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
