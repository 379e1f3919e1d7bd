"""The coverage figure: the installed PEFT's layer forwards (bench_models.layer_forwards), the cases whose footprint
holds each (tests/footprints.json), and those no case runs, with their reasons (tests/coverage_gaps.toml). It joins
the zoo and the engine, which never import each other, so it lives with the tests (docs/coverage.md).

    python -m tests.tools.coverage             # the table and the figure
    python -m tests.tools.coverage --markdown  # the tables of docs/coverage.md
    python -m tests.tools.coverage --check     # exit 1 naming each unlisted forward and each stale gaps entry
    python -m tests.tools.coverage --replay out/replay.json  # the replayed commits that change a forward no case runs
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
from collections.abc import Iterable
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


_FORWARD_KEY = re.compile(r"^peft/tuners/[^:]+::[\w.<>]*\.(?:forward|_mixed_batch_forward)$")
_FORWARD_REASON = re.compile(r"^(peft/tuners/[^:]+::[\w.<>]*\.(?:forward|_mixed_batch_forward)):")


def installed_stubs(keys: Iterable[str]) -> set[str]:
    """Of the function keys, those the installed PEFT defines as abstract stubs (coverage.stubs)."""
    by_file: dict[str, list[str]] = {}
    for key in keys:
        path, _, qualname = key.partition("::")
        by_file.setdefault(path, []).append(qualname)
    root = Path(peft.__file__).resolve().parent.parent
    found = set()
    for path, qualnames in by_file.items():
        try:
            source = (root / path).read_text(encoding="utf-8")
        except OSError:
            continue
        found |= {f"{path}::{name}" for name in coverage.stubs(source, qualnames)}
    return found


def commits_changing_uncompiled_forwards(
    replay: Path, footprints: footprints_file.Footprints, gaps: coverage.Gaps, stubs: set[str] = frozenset()
) -> list[tuple[str, str, list[str]]]:
    """The replayed commits (``history_replay --json``) whose selection reasons name a ``forward`` or
    ``_mixed_batch_forward`` under ``peft/tuners/`` that the installed PEFT defines, that is not GPU-only, not an
    abstract stub (``installed_stubs``), and that no case compiles: (commit, subject, those forwards). Helpers count."""
    found = []
    for commit in json.loads(replay.read_text(encoding="utf-8"))["commits"]:
        keys = {m.group(1) for reason in commit["reasons"] for m in [_FORWARD_REASON.match(reason)] if m}
        keys = {k for k in keys if k in (footprints.defined or ()) and not gaps.gpu_only_reason(k)}
        keys -= stubs
        uncompiled = sorted(k for k in keys if not coverage.compiled_by(footprints, k))
        if uncompiled:
            found.append((commit["commit"][:9], commit["subject"], uncompiled))
    return found


def every_forward(footprints: footprints_file.Footprints, gaps: coverage.Gaps) -> tuple[int, int]:
    """(compiled by some case, not GPU-only) over every forward/_mixed_batch_forward under peft/tuners/ the
    footprints' inventory defines."""
    keys = [
        k
        for k in footprints.defined or ()
        if k.startswith("peft/tuners/") and k.rpartition(".")[2] in ("forward", "_mixed_batch_forward")
    ]
    runnable = [k for k in keys if not any(fnmatch.fnmatchcase(k, p) for p in gaps.gpu_only)]
    return sum(bool(coverage.compiled_by(footprints, k)) for k in runnable), len(runnable)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.coverage", description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the tables for docs/coverage.md")
    parser.add_argument("--check", action="store_true", help="exit 1 on an unlisted forward or a stale gaps entry")
    parser.add_argument("--footprints", type=Path, default=FOOTPRINTS)
    parser.add_argument("--gaps", type=Path, default=GAPS)
    parser.add_argument(
        "--replay", type=Path, help="a replay's JSON: list its commits that change a forward no case runs"
    )
    args = parser.parse_args(argv)
    rows, gaps, footprints, not_inspected = coverage_rows(args.footprints, args.gaps)
    for module, error in sorted(not_inspected.items()):
        print(f"note: not inspected: {module}: {error}", file=sys.stderr)
    mismatch = version_mismatch(footprints)
    if mismatch:
        print(f"note: {mismatch}: the figure is of that version's cases", file=sys.stderr)
    print(coverage.markdown(rows) if args.markdown else coverage.text(rows))
    print(f"\ncoverage: {coverage.figure(rows)} (peft {peft.__version__})")
    compiled, runnable = every_forward(footprints, gaps)
    print(f"every forward under peft/tuners/: {compiled} of {runnable} not GPU-only compiled by some case")
    if args.replay:
        forwards = [k for k in footprints.defined or () if _FORWARD_KEY.match(k)]
        stubs = installed_stubs(forwards)
        found = commits_changing_uncompiled_forwards(args.replay, footprints, gaps, stubs)
        print(
            f"{len(found)} replayed commit(s) change a forward no case compiles (abstract stubs aside: {len(stubs)}):"
        )
        for commit, subject, keys in found:
            print(f"  {commit} {subject[:60]}: {', '.join(keys)}")
    if not args.check:
        return 0
    found = coverage.problems(rows, gaps)
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
