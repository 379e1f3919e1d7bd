"""The selection replayed over a package's real history: for each of the last commits that touch its Python files,
what the committed footprints and durations would have run, and at what cost.

    python -m compile_audit.selection.history_replay --repo ~/src/peft --last 400 --json out/replay.json

Each commit is compared with its first parent, both read from git (no checkout). The cost of a selection is the sum
of its cases' durations (``tests/durations.json``, one side of the gate); the full matrix costs every case's.

The cases a commit reaches only through code they ran while building their model are compared by build first, as
the gate does: that costs a fingerprint run per side (``tests/build_costs.json``: pytest's start-up and each case's
build). The replay cannot build a commit's sources by itself, so those cases count as run, unless
``--builds-compared FILE`` says which of them built the same on both sides of that commit
(``{commit: {"same": [case, ...]}}``).

The footprints are today's, so they hold cases of methods that came after an old commit. A case that ran code in a
folder neither side of the commit has (a method's subpackage that did not exist yet) cannot be built on either side:
it costs nothing there (``Replayed.absent`` counts them).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compile_audit.case_ids import CaseId
from compile_audit.files import write_bytes_atomic, write_text_atomic
from compile_audit.selection.change_selection import (
    ModuleCache,
    Selection,
    Source,
    compare_sources,
    outside_of,
    select,
)
from compile_audit.selection.footprints_file import Footprints, FootprintsError, load


class Git:
    """Reads trees and blobs of one repository through a single ``git cat-file --batch`` process."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._batch = subprocess.Popen(
            ["git", "-C", str(repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def run(self, *args: str) -> str:
        done = subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise FootprintsError(f"{self.repo}: git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def blob(self, sha: str) -> str:
        assert self._batch.stdin and self._batch.stdout
        self._batch.stdin.write(f"{sha}\n".encode())
        self._batch.stdin.flush()
        size = int(self._batch.stdout.readline().split()[2])
        data = self._batch.stdout.read(size + 1)[:-1]
        return data.decode("utf-8", errors="replace")

    def python_files(self, commit: str, source_dir: str) -> dict[str, Source]:
        """The ``.py`` files under ``source_dir`` at ``commit``, by package-relative path."""
        files = {}
        for line in self.run("ls-tree", "-r", commit, "--", f"{source_dir}/").splitlines():
            meta, path = line.split("\t", 1)
            _, kind, sha = meta.split()
            if kind == "blob" and path.endswith(".py"):
                files[path.removeprefix(f"{source_dir}/")] = Source(sha, lambda sha=sha: self.blob(sha))
        return files

    def close(self) -> None:
        if self._batch.stdin:
            self._batch.stdin.close()
        self._batch.wait()


def case_durations(path: Path) -> dict[str, float]:
    """Seconds per case id, from pytest-split's durations (``tests/x.py::test_y[<case id>]``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise FootprintsError(f"{path}: unreadable durations file: {error}") from None
    durations = {}
    for node, seconds in data.items():
        if node.endswith("]") and "[" in node:
            case = node[node.index("[") + 1 : -1]
            durations[case] = durations.get(case, 0.0) + float(seconds)
    return durations


@dataclasses.dataclass(frozen=True)
class Replayed:
    commit: str
    subject: str
    cases: int
    full_matrix: bool
    new_methods: int
    cpu_seconds: float
    executes_differently: bool  # some executed code changed
    reasons: tuple[str, ...]
    build_only: int = 0  # cases reached only through code they ran while building: their builds are compared first
    builds_same: int = 0  # of those, the ones known to build the same on both sides (not run)
    absent: int = 0  # selected cases of code neither side has (a later method's): they cannot run, and cost nothing


@dataclasses.dataclass(frozen=True)
class BuildCosts:
    """What comparing builds costs one side: a fingerprint run's start-up, and each case's build."""

    overhead_seconds: float = 0.0
    per_case_seconds: float = 0.0

    def of(self, cases: int) -> float:
        return self.overhead_seconds + cases * self.per_case_seconds if cases else 0.0


def build_costs(path: Path) -> BuildCosts:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return BuildCosts(float(data["overhead_seconds"]), float(data["per_case_seconds"]))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise FootprintsError(f"{path}: unreadable build costs (overhead_seconds, per_case_seconds): {error}") from None


def read_compared(path: Path) -> dict[str, Any]:
    """A builds-compared file (``gate_tools.replay_builds``), gzipped where its name ends in ``.gz``: its case lists
    are long and alike, and the docs keep one per measured replay."""
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def write_compared(path: Path, compared: Mapping[str, Any]) -> None:
    text = json.dumps(compared, indent=1, sort_keys=True) + "\n"
    data = gzip.compress(text.encode("utf-8"), mtime=0) if path.suffix == ".gz" else text.encode("utf-8")
    write_bytes_atomic(path, data)


def builds_compared(path: Path | None) -> dict[str, frozenset[str]]:
    """Per commit, the cases known to build the same on both sides (``--builds-compared``)."""
    if path is None:
        return {}
    try:
        data = read_compared(path)
        return {commit: frozenset(entry.get("same", ())) for commit, entry in data.items()}
    except (OSError, json.JSONDecodeError, gzip.BadGzipFile, AttributeError, TypeError) as error:
        raise FootprintsError(
            f"{path}: unreadable build comparisons ({{commit: {{'same': [...]}}}}): {error}"
        ) from None


def cost(
    selection: Selection,
    footprints: Footprints,
    durations: Mapping[str, float],
    builds: BuildCosts = BuildCosts(),
    same: frozenset[str] = frozenset(),
    new_method_cases: Sequence[str] | None = None,
    absent: frozenset[str] = frozenset(),
) -> tuple[int, float]:
    """Cases and CPU-seconds of one side: the selected cases' durations, and for each method the change adds, the
    cases a new method gets (``new_method_cases``), priced as the matrix's methods' cases of those ids on average.
    The cases reached only while building cost their fingerprints, and run unless ``same`` says they built the
    same. The ``absent`` cases (of code neither side has) cost nothing."""
    median = statistics.median(durations.values()) if durations else 0.0
    cases = footprints.cases if selection.everything else selection.cases
    cases = [case for case in cases if case not in same and case not in absent]
    per_method = method_costs(footprints, durations, new_method_cases)
    count = len(cases) + selection.new_methods * round(per_method[0])
    seconds = sum(durations.get(case, median) for case in cases) + selection.new_methods * per_method[1]
    building = [case for case in selection.build_only if case not in absent]
    return count, round(seconds + builds.of(len(building)), 1)


def method_costs(
    footprints: Footprints, durations: Mapping[str, float], templates: Sequence[str] | None = None
) -> tuple[float, float]:
    """The mean number of cases and CPU-seconds of one method over the matrix the footprints hold: its cases of the
    ids in ``templates`` (``{method}`` in place of its name), or all of its cases where None."""
    median = statistics.median(durations.values()) if durations else 0.0
    by_method: dict[str, list[str]] = {}
    for case in footprints.cases:
        by_method.setdefault(CaseId.parse(case).method, []).append(case)
    if templates is not None:
        recorded = set(footprints.cases)
        by_method = {
            method: [case for t in templates if (case := t.replace("{method}", method)) in recorded]
            for method in by_method
        }
    if not by_method:
        return 0.0, 0.0
    return (
        statistics.fmean(len(cases) for cases in by_method.values()),
        statistics.fmean(sum(durations.get(case, median) for case in cases) for cases in by_method.values()),
    )


def new_method_cases(path: Path) -> list[str]:
    """The ids of a new method's cases, ``{method}`` in place of its name (tests/new_method_cases.json)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        cases = data["cases"]
        if not isinstance(cases, list) or not all(isinstance(c, str) and "{method}" in c for c in cases):
            raise TypeError("every entry must be a case id with {method} in place of the method's name")
        return cases
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise FootprintsError(f"{path}: unreadable new method's cases ('cases': [...]): {error}") from None


def commit_selection(
    git: Git, footprints: Footprints, commit: str, source_dir: str, cache: ModuleCache | None = None
) -> tuple[str | None, Selection, frozenset[str]]:
    """A commit's first parent (None for a root commit), what the change from it selects, and the recorded cases
    that ran code in a folder neither side has (they cannot run there)."""
    parents = git.run("rev-list", "--parents", "-n", "1", commit).split()[1:]
    base = git.python_files(parents[0], source_dir) if parents else {}
    head = git.python_files(commit, source_dir)
    changes, unparsable, readers = compare_sources(base, head, cache or ModuleCache())
    packages = {path.partition("/")[0] for path in (*base, *head)}
    outside = outside_of(footprints, packages.pop()) if len(packages) == 1 else None
    selection = select(footprints, changes, readers, unparsable, outside)
    return (parents[0] if parents else None), selection, absent_cases(footprints, {*base, *head})


def absent_cases(footprints: Footprints, paths: set[str]) -> frozenset[str]:
    """The cases that ran a function in a folder none of ``paths`` is in."""
    folders = {path.rpartition("/")[0] for path in paths}
    missing = {key.partition("::")[0].rpartition("/")[0] for key in footprints.runs} - folders
    return frozenset().union(*(footprints.ran_any(f"{folder}/") for folder in missing))


def replay(
    git: Git,
    footprints: Footprints,
    durations: Mapping[str, float],
    last: int,
    source_dir: str,
    builds: BuildCosts = BuildCosts(),
    compared: Mapping[str, frozenset[str]] | None = None,
    new_cases: Sequence[str] | None = None,
) -> list[Replayed]:
    log = git.run("log", f"-{last}", "--format=%H%x09%s", "--", f"{source_dir}/*.py")
    cache = ModuleCache()
    results = []
    for line in log.splitlines():
        commit, subject = line.split("\t", 1)
        _, selection, absent = commit_selection(git, footprints, commit, source_dir, cache)
        same = (compared or {}).get(commit, frozenset()) & frozenset(selection.build_only)
        count, seconds = cost(selection, footprints, durations, builds, same, new_cases, absent)
        results.append(
            Replayed(
                commit,
                subject,
                count,
                selection.everything,
                selection.new_methods,
                seconds,
                bool(selection.changed_files),
                selection.reasons,
                len(selection.build_only),
                len(same),
                len(absent & (set(footprints.cases) if selection.everything else set(selection.cases))),
            )
        )
    return results


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else 0.0


def summary(results: Sequence[Replayed], full_matrix_seconds: float) -> list[str]:
    seconds = [r.cpu_seconds for r in results]
    total = len(results) or 1
    full = sum(r.full_matrix for r in results)
    half = sum(r.cpu_seconds >= full_matrix_seconds / 2 for r in results)
    still = [r for r in results if not r.executes_differently]
    adding = [r for r in results if r.new_methods]
    building = [r for r in results if r.build_only]
    return [
        f"{len(results)} commits; CPU-seconds per side: median {statistics.median(seconds or [0]):.0f}, p90"
        f" {_percentile(seconds, 0.9):.0f}, mean {statistics.fmean(seconds or [0]):.0f} (the full matrix:"
        f" {full_matrix_seconds:.0f})",
        f"full matrix: {full} of {len(results)} commits ({full / total:.0%}); half of its CPU-seconds or more:"
        f" {half} ({half / total:.0%})",
        f"adding a method: {len(adding)} commits, whose new cases run (priced as the same cases of the matrix's"
        " methods on average)",
        f"no case at all: {sum(r.cases == 0 for r in results)} commits; of them, {len(still)} change no executed code"
        f" ({sum(r.cases > 0 for r in still)} of those select a case)",
        f"of code neither side has (a later method's): {sum(r.absent for r in results)} selected cases over"
        f" {sum(bool(r.absent) for r in results)} commits, which cannot run there and cost nothing",
        f"reached only while building: {len(building)} commits, {sum(r.build_only for r in building)} cases (each"
        f" side fingerprints them); known to build the same: {sum(r.builds_same for r in building)} cases, not run;"
        " the others count as run",
        f"cases per commit: median {statistics.median([r.cases for r in results] or [0]):.0f}, p90"
        f" {_percentile([r.cases for r in results], 0.9):.0f}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compile_audit.selection.history_replay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--repo", required=True, type=Path, help="a clone of the package's git repository")
    parser.add_argument("--last", type=int, default=400, help="how many commits touching the package (default 400)")
    parser.add_argument("--json", type=Path, help="write the commits' selections here")
    parser.add_argument("--footprints", type=Path, default=Path("tests/footprints.json"))
    parser.add_argument("--durations", type=Path, default=Path("tests/durations.json"))
    parser.add_argument("--source-dir", default="src", help="the folder of the package in the repository")
    parser.add_argument("--build-costs", type=Path, default=Path("tests/build_costs.json"))
    parser.add_argument(
        "--new-method-cases",
        type=Path,
        default=Path("tests/new_method_cases.json"),
        help="the ids of the cases a new method gets, priced as the matrix's methods' on average",
    )
    parser.add_argument(
        "--builds-compared", type=Path, help="per commit, the cases that built the same on both sides (JSON)"
    )
    args = parser.parse_args(argv)
    try:
        return _replay(args)
    except FootprintsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _replay(args: argparse.Namespace) -> int:
    footprints = load(args.footprints)
    durations = case_durations(args.durations)
    builds, compared = build_costs(args.build_costs), builds_compared(args.builds_compared)
    git = Git(args.repo)
    try:
        results = replay(
            git,
            footprints,
            durations,
            args.last,
            args.source_dir,
            builds,
            compared,
            new_method_cases(args.new_method_cases),
        )
    finally:
        git.close()
    full_seconds = cost(Selection(True, (), ()), footprints, durations)[1]
    for line in summary(results, full_seconds):
        print(line)
    if args.json:
        data = {"commits": [dataclasses.asdict(r) for r in results]}
        write_text_atomic(args.json, json.dumps(data, indent=1) + "\n")
        print(f"{args.json}: {len(results)} commits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
