#!/usr/bin/env python3
"""The full matrix on one machine, as the weekly workflow runs it on several: SHARDS pytest processes side by side
(pytest-split, balanced by tests/durations.json), their reports merged into one, and the compatibility matrix.

    scripts/full_matrix.py                          # every case, nproc shards -> docs/compile-matrix.md
    scripts/full_matrix.py --shards 2 -- --update-budgets
    scripts/full_matrix.py --out out/aot --matrix out/aot/matrix.md -- --cpu-backend aot_eager

Arguments after ``--`` go to every shard's pytest (``--update-budgets`` is safe: each shard adds its own cases to
the budgets file under a lock). Prints each shard's wall time and the total, then each shared allowance of the
budgets file (a cause's ``allows``) that none of the cases it covers met in this run ("tighten: ..."); exits 1 when
a shard failed or an allowance went unmet (the report and the matrix are written anyway), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compile_audit.artifacts.report import read_cases  # noqa: E402 (the checkout's, not an installed copy)
from compile_audit.rules.budgets import BudgetFile  # noqa: E402

DURATIONS = ROOT / "tests" / "durations.json"


def _shard_command(shards: int, group: int, out: Path, durations: Path, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "--full-matrix",
        "-q",
        f"--splits={shards}",
        f"--group={group}",
        f"--durations-path={durations}",
        f"--compile-report={out / f'shard-{group}.json'}",
        *extra,
    ]


def _store_durations(out: Path, shards: int) -> None:
    """pytest-split stores each shard's durations in its own file; their union balances the next run."""
    durations = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    for group in range(1, shards + 1):
        path = out / f"durations-{group}.json"
        if path.exists():
            durations.update(json.loads(path.read_text()))
    DURATIONS.write_text(json.dumps(durations, indent=0, sort_keys=True) + "\n")


def _relative(path: Path) -> str:
    path = path.absolute()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="scripts/full_matrix.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=os.cpu_count() or 1, help="processes side by side")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "full-matrix", help="shard reports and logs")
    parser.add_argument("--matrix", type=Path, default=ROOT / "docs" / "compile-matrix.md", help="the matrix file")
    parser.add_argument(
        "--update-durations",
        action="store_true",
        help="merge this run's durations into " + str(DURATIONS.relative_to(ROOT)),
    )
    args = parser.parse_args(own)
    if args.shards < 1:
        parser.error(f"--shards must be at least 1, got {args.shards}")
    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    started, running = time.monotonic(), {}
    for group in range(1, args.shards + 1):
        durations = DURATIONS
        if args.update_durations:
            # pytest-split reads the split from and stores into one path: each shard gets a copy of the
            # committed durations (so all split alike) and stores only its own tests' (--clean-durations).
            durations = out / f"durations-{group}.json"
            durations.write_text(DURATIONS.read_text() if DURATIONS.exists() else "{}")
        command = _shard_command(args.shards, group, out, durations, extra)
        if args.update_durations:
            command += ["--store-durations", "--clean-durations"]
        log = open(out / f"shard-{group}.log", "w")  # noqa: SIM115 (closed when the shard ends)
        running[group] = (subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log)
    statuses = {}
    while running:
        for group, (process, log) in list(running.items()):
            if process.poll() is not None:
                log.close()
                statuses[group] = process.returncode
                elapsed = time.monotonic() - started
                print(f"shard {group}/{args.shards}: exit {process.returncode} after {elapsed:.0f} s ({log.name})")
                del running[group]
        time.sleep(1)
    print(f"all shards: {time.monotonic() - started:.0f} s wall")
    if args.update_durations:
        _store_durations(out, args.shards)
    reports = [str(out / f"shard-{group}.json") for group in sorted(statuses) if (out / f"shard-{group}.json").exists()]
    merged = out / "report.json"
    regenerate = shlex.join(["scripts/full_matrix.py", *argv])
    for command in (
        ["compile_audit.artifacts.merge", *reports, "--output", str(merged)],
        [
            "compile_audit.artifacts.matrix",
            _relative(merged),
            "--output",
            _relative(args.matrix),
            "--regenerate",
            regenerate,
        ],
    ):
        if subprocess.call([sys.executable, "-m", *command], cwd=ROOT):
            return 2
    print(f"matrix -> {args.matrix}")
    unmet = _unmet_allowances(merged, extra)
    for line in unmet:
        print(f"tighten: {line}")
    return 1 if any(statuses.values()) or len(reports) < args.shards or unmet else 0


def _unmet_allowances(report: Path, extra: list[str]) -> list[str]:
    """The shared allowances of the budgets file the shards judged against that no case of this run met."""
    budgets = None
    for at, arg in enumerate(extra):  # pytest takes --budgets=PATH and --budgets PATH
        if arg.startswith("--budgets="):
            budgets = arg.split("=", 1)[1]
        elif arg == "--budgets" and at + 1 < len(extra):
            budgets = extra[at + 1]
    budget_file = BudgetFile.load(Path(budgets) if budgets else ROOT / "tests" / "compile_budgets.toml")
    audited = {
        case.id: {(held.cause, held.identity) for held in case.allowed_by_causes}
        for case in read_cases(report).cases
        if case.audited
    }
    return budget_file.unmet_allowances(audited)


if __name__ == "__main__":
    sys.exit(main())
