"""Builds compared over PEFT's history, for the replay (``compile_audit.selection.history_replay --builds-compared``):
for chosen commits, the cases the selection reaches only while building are fingerprinted on the commit's parent and
on the commit, each side's PEFT imported from its own source tree, as the gate would on that pull request.

    python -m gate_tools.replay_builds --repo PEFT_CLONE --replay out/replay.json --costliest 5 \\
        --output out/builds-compared.json

Writes ``{commit: {"same": [...], "differ": {case: why}, "seconds": {"base": s, "head": s}}}`` (gzipped where the
name ends in ``.gz``), adding to the file each commit as it is done (a run can be stopped and resumed). A commit the
file holds gets only the cases it does not hold yet (those a larger zoo's footprints add), and runs may share one
file. A side whose PEFT does not import with the installed libraries fingerprints nothing: its cases count as
differing. Exit status: 0, or 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from compile_audit.files import exclusive
from compile_audit.selection import builds_file
from compile_audit.selection.footprints_file import FootprintsError, load
from compile_audit.selection.history_replay import Git, commit_selection, read_compared, write_compared
from gate_tools import checkout

ROOT = checkout.find() or Path()


def export(git: Git, commit: str, source_dir: str, into: Path) -> Path:
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(git.repo), "archive", commit, source_dir], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / source_dir


def fingerprint(source: Path, cases: list[str], work: Path, name: str) -> tuple[dict, float]:
    """Each case built with PEFT from ``source`` (a ``src`` folder), in this checkout's test suite."""
    listing, output, log = work / f"{name}-cases.txt", work / f"{name}-builds.json", work / f"{name}.log"
    listing.write_text("".join(f"{case}\n" for case in cases), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(ROOT)])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", f"--build-fingerprints={output}"]
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        status = subprocess.run([*cmd, f"--cases={listing}"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = round(time.perf_counter() - started, 1)
    if status.returncode != 0 or not output.exists():
        return {}, seconds
    return builds_file.read(output), seconds


def compared_cases(path: Path, commit: str) -> set[str]:
    """The commit's cases the file already holds, the same or not."""
    entry = read_compared(path).get(commit, {}) if path.exists() else {}
    return {*entry.get("same", ()), *entry.get("differ", {})}


def add(path: Path, commit: str, same: list[str], differ: dict[str, str], seconds: dict[str, float]) -> None:
    """The commit's newly compared cases added to the file, re-read under a lock: runs may share one file."""
    with exclusive(path):
        compared = read_compared(path) if path.exists() else {}
        entry = compared.setdefault(commit, {"same": [], "differ": {}, "seconds": {}})
        entry["same"] = sorted({*entry["same"], *same})
        entry["differ"] = {**entry["differ"], **differ}
        entry["seconds"] = {side: round(entry["seconds"].get(side, 0.0) + spent, 1) for side, spent in seconds.items()}
        write_compared(path, compared)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gate_tools.replay_builds", description=__doc__.split("\n")[0])
    parser.add_argument("--repo", required=True, type=Path, help="a clone of PEFT's git repository")
    parser.add_argument("--replay", required=True, type=Path, help="the replay's --json output")
    parser.add_argument("--costliest", type=int, default=5, help="how many commits, costliest first, that build-only")
    parser.add_argument("--commit", action="append", default=[], help="these commits instead (a prefix will do)")
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--footprints", type=Path, default=ROOT / "tests" / "footprints.json")
    parser.add_argument("--source-dir", default="src")
    args = parser.parse_args(argv)
    try:
        footprints = load(args.footprints)
        commits = json.loads(args.replay.read_text(encoding="utf-8"))["commits"]
    except (OSError, KeyError, json.JSONDecodeError, FootprintsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    chosen = sorted((c for c in commits if c.get("build_only")), key=lambda c: -c["cpu_seconds"])[: args.costliest]
    if args.commit:
        chosen = [c for c in commits if any(c["commit"].startswith(prefix) for prefix in args.commit)]
    git = Git(args.repo)
    try:
        for commit in (c["commit"] for c in chosen):
            parent, selection, absent = commit_selection(git, footprints, commit, args.source_dir)
            known = compared_cases(args.output, commit)
            cases = [case for case in selection.build_only if case not in absent and case not in known]
            if parent is None or not cases:
                continue
            with tempfile.TemporaryDirectory() as folder:
                work = Path(folder)
                sides = {}
                for name, tree in (("base", parent), ("head", commit)):
                    (work / name).mkdir()
                    sides[name] = fingerprint(export(git, tree, args.source_dir, work / name), cases, work, name)
            same, differ = builds_file.compare(
                cases, sides["base"][0], sides["head"][0], selection.tables_gaining, selection.names_rebound
            )
            seconds = {name: found[1] for name, found in sides.items()}
            add(args.output, commit, same, differ, seconds)
            print(f"{commit[:10]}: {len(cases)} case(s) build-only, {len(same)} built the same; seconds {seconds}")
    finally:
        git.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
