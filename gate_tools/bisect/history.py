"""A PEFT checkout's commits between two refs, and one commit's tree exported into a scratch directory.

Only read-only git commands run against the checkout (rev-parse, merge-base, log, archive): its working
tree, index, HEAD, branches and bisect state are never touched, so it may have uncommitted work.
Merges are linearized in topological order over the ancestry path from good to bad, so the first
changed commit is the first in that order.
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from gate_tools.bisect.driver import Candidate

SUBJECT_WIDTH = 80


class HistoryError(ValueError):
    """The repository or the refs cannot be used; the message is one line."""


def git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except OSError as error:
        raise HistoryError(f"cannot run git: {error}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise HistoryError(f"git {' '.join(args)}: {last}")
    return done.stdout


def check_repository(repo: Path) -> None:
    if not repo.is_dir():
        raise HistoryError(f"--repo {repo}: no such directory")
    try:
        git(repo, "rev-parse", "--git-dir")
    except HistoryError:
        raise HistoryError(f"--repo {repo} is not a git repository") from None


def resolve(repo: Path, ref: str, option: str) -> str:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except HistoryError:
        raise HistoryError(f"{option} {ref!r} is not a commit of {repo}") from None


def _label(sha: str, subject: str) -> str:
    subject = subject if len(subject) <= SUBJECT_WIDTH else subject[: SUBJECT_WIDTH - 1] + "…"
    return f"{sha[:12]} {subject}"


def candidates(repo: Path, good_ref: str, bad_ref: str) -> list[Candidate]:
    """good, every commit on the ancestry path to bad (oldest first), bad; HistoryError when not a range."""
    check_repository(repo)
    good, bad = resolve(repo, good_ref, "--good"), resolve(repo, bad_ref, "--bad")
    if good == bad:
        raise HistoryError(f"--good {good_ref} and --bad {bad_ref} are the same commit ({good[:12]})")
    try:
        git(repo, "merge-base", "--is-ancestor", good, bad)
    except HistoryError:
        raise HistoryError(f"--good {good_ref} is not an ancestor of --bad {bad_ref}") from None
    lines = git(repo, "log", "--reverse", "--topo-order", "--ancestry-path", "--format=%H%x00%s", f"{good}..{bad}")
    path = [line.split("\0", 1) for line in lines.splitlines() if line]
    path.insert(0, [good, git(repo, "log", "-1", "--format=%s", good).strip()])
    return [Candidate(sha, _label(sha, subject)) for sha, subject in path]


def _extract(tar: tarfile.TarFile, destination: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        tar.extractall(destination, filter="data")
    else:  # Python before 3.10.12 / 3.11.4; git archive writes only the commit's own paths
        tar.extractall(destination)


def export(repo: Path, sha: str, destination: Path) -> Path:
    """The tree of one commit written into destination (git archive): the checkout itself is not touched."""
    destination.mkdir(parents=True, exist_ok=False)
    command = ["git", "-C", str(repo), "archive", "--format=tar", sha]
    problem = None
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as archive:
        try:
            with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
                _extract(tar, destination)
        except tarfile.TarError as error:
            problem = str(error)
        stderr = archive.stderr.read().decode(errors="replace").strip()
    if archive.returncode != 0 or problem:
        why = stderr.splitlines()[-1] if stderr else problem or f"exit status {archive.returncode}"
        raise HistoryError(f"git archive {sha[:12]}: {why}")
    return destination
