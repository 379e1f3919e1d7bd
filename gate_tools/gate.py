"""The compile gate, run locally: what a change to PEFT selects, run on head, and on base only where the verdict
needs it, then the diff.

    peft-compile-gate --base peft==0.21.2 --head ~/src/peft --out out/gate -- -k "llama-tiny and lora"
    scripts/gate ...    # the same from a checkout, nothing installed

First both PEFT SPECs are fetched without their dependencies (anything pip installs: ``peft==0.21.2``, a local
path, ``git+https://github.com/huggingface/peft@<ref>``), and the selection is computed from their source
(``--select change``: the cases that ran a function whose executed code differs,
compile_audit.selection.change_selection).
A change that selects no case ends there, with exit 0 and the reason, before any virtualenv is built.

Head then runs the selection in a fresh virtualenv with torch (``--torch``, default: the torch version of the
Python running this script), this gate's dependencies with transformers pinned to the version the budgets were
recorded with and the pins of tests/install_pins.txt (``--unpinned`` lifts both), and head's PEFT. When head's
installed versions are the budgets' own, a case head passes cannot have regressed (the budgets judged it), so base
runs only the cases head failed; on other versions base runs the whole selection. Base gets the same torch and pins.
Both sides run a snapshot of this checkout taken at the start, with their own inductor cache, and write into OUT:
``base.json``/``head.json`` (compile reports), ``base.log``/``head.log`` (pytest), ``*-install.log`` (pip),
``*-environment.txt`` (pip freeze), ``selection.md``, ``head-matrix.md`` and ``diff.md`` (python -m
compile_audit.artifacts.diff). Nothing is installed into the calling Python and nothing is written into the
checkout.

Exit status: 0 when nothing regressed, 1 when head regressed, 2 for the gate's own failure (bad arguments, an install
failure, an unusable report, a report in which no case ran to a verdict: the GPU tier without CUDA), with the reason
on one line of stderr. Cases that fail on both sides alike are no regression, at setup included: the verdict is
given on what could be compared, and diff.md names what could not (those cases, the ones skipped on head, the
selected ones with no record).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from compile_audit.artifacts.diff import NotJudged, fails, lonely_lines, not_judged_lines, not_judged_summary
from compile_audit.artifacts.records import CaseRecord
from compile_audit.artifacts.report import ReportCases, read_cases
from compile_audit.selection import builds_file
from compile_audit.selection.change_selection import Selection, select_between
from compile_audit.selection.footprints_file import Footprints, FootprintsError
from compile_audit.selection.footprints_file import load as load_footprints
from gate_tools import checkout, why
from gate_tools.venv import ScratchVenv

EXIT_OK, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2
PROG = "peft-compile-gate"  # scripts/gate passes its own name
REPO = checkout.find()  # None: not run from a checkout (an error once the arguments are parsed)
ARCHIVES = (".whl", ".tar.gz", ".zip")
SELECTIONS = ("change", "default", "full")
PYTEST_EXIT = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}
# What the failed head cases are rerun with, for their logs: every break and every failed guard.
RERUN_TORCH_LOGS = "graph_breaks,recompiles_verbose"
# Never copied into the snapshot: version control and caches anywhere, build and run output at the top (and
# any virtualenv, see snapshot_checkout).
SNAPSHOT_SKIP = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".benchmarks"}
SNAPSHOT_SKIP_TOP = {"build", "out"}


class GateError(Exception):
    """Whatever stops the gate before a verdict: exit 2 with this one-line reason."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the usage too: the reason must stay one line
        raise GateError(f"{message} (see {self.prog} --help)")


@dataclasses.dataclass(frozen=True)
class Options:
    base: str
    head: str
    out: Path
    torch: str
    torch_index_url: str | None
    torch_pre: bool
    work_dir: Path | None
    rerun_failed: bool
    chart: bool
    select: str
    footprints: Path
    shard: tuple[int, int] | None  # (K, N): this run is shard K of N of the selection (pytest-split)
    jobs: int  # pytest processes per side (pytest-xdist), each one thread
    unpinned: bool  # transformers as pip resolves it, not as the budgets were recorded
    pytest_args: tuple[str, ...]
    audit_selection: int = 0  # cases outside the selection run too: a verdict that changes there is a miss
    audit_seed: int = 0


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        usage=f"{prog} --base SPEC --head SPEC --out DIR [options] [-- PYTEST_ARGS...]",
        description="Run the same pytest selection on PEFT base and head in fresh virtualenvs and diff the reports. "
        "Exit 0: nothing regressed; 1: head regressed; 2: anything else.",
    )
    parser.add_argument("--base", required=True, metavar="SPEC", help="PEFT base: a pin, a local path or a git URL")
    parser.add_argument("--head", required=True, metavar="SPEC", help="PEFT head, the same kinds as --base")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="where reports, logs and diff go")
    parser.add_argument("--torch", metavar="SPEC", help="torch for both sides (default: this Python's version)")
    parser.add_argument(
        "--torch-index-url",
        metavar="URL",
        default=os.environ.get("GATE_TORCH_INDEX_URL") or None,
        help="package index for torch only, e.g. https://download.pytorch.org/whl/cpu (env: GATE_TORCH_INDEX_URL)",
    )
    parser.add_argument("--torch-pre", action="store_true", help="allow torch pre-releases (the nightly)")
    parser.add_argument(
        "--audit-selection",
        type=int,
        default=0,
        metavar="N",
        help="also run N recorded cases the change did not select (a seeded sample); one whose verdict head changed"
        " fails the gate with 'selection missed'",
    )
    parser.add_argument("--audit-seed", type=int, default=0, metavar="S", help="the sample's seed (default 0)")
    parser.add_argument("--work-dir", type=Path, metavar="DIR", help="keep the venvs and caches here (must be empty)")
    parser.add_argument(
        "--rerun-failed", action="store_true", help=f"rerun head's failed cases with TORCH_LOGS={RERUN_TORCH_LOGS}"
    )
    parser.add_argument(
        "--chart", action="store_true", help="mermaid charts in diff.md (python -m compile_audit.artifacts.diff)"
    )
    parser.add_argument(
        "--select",
        choices=SELECTIONS,
        default="change",
        help="change (default): every case that ran a PEFT function whose executed code differs between base and"
        " head (tests/footprints.json); default: the default run; full: the full matrix",
    )
    parser.add_argument(
        "--footprints",
        type=Path,
        metavar="PATH",
        help="the footprints file --select change reads (default: tests/footprints.json)",
    )
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="run shard K of N of the selection on both sides (pytest-split, balanced by tests/durations.json);"
        " merge the shards' base.json and head.json with python -m compile_audit.artifacts.merge, then diff",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="pytest processes per side (pytest-xdist; each runs one thread; default: this machine's cores)",
    )
    parser.add_argument(
        "--unpinned",
        action="store_true",
        help="install the newest transformers (and dependencies) pip allows instead of the budgets' recorded one and"
        " tests/install_pins.txt (base then runs the whole selection: the budgets cannot judge head alone on other"
        " versions)",
    )
    return parser


def check_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise GateError(f"--shard: {text!r} is not K/N with 1 <= K <= N (e.g. 2/4)")
    return int(match[1]), int(match[2])


def parse_args(argv: Sequence[str], prog: str = PROG) -> Options:
    argv = list(argv)
    ours, pytest_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = build_parser(prog).parse_args(ours)
    if REPO is None:
        raise GateError(checkout.NOT_FOUND)
    check_pytest_args(pytest_args)
    return Options(
        base=check_peft_spec("base", args.base),
        head=check_peft_spec("head", args.head),
        out=args.out.expanduser().resolve(),
        torch=check_torch_spec(args.torch) if args.torch is not None else default_torch_spec(),
        torch_index_url=args.torch_index_url,
        torch_pre=args.torch_pre,
        work_dir=args.work_dir.expanduser().resolve() if args.work_dir else None,
        rerun_failed=args.rerun_failed,
        chart=args.chart,
        select=args.select,
        footprints=(args.footprints or REPO / "tests" / "footprints.json").expanduser().resolve(),
        shard=check_shard(args.shard),
        jobs=max(1, args.jobs),
        unpinned=args.unpinned,
        pytest_args=tuple(pytest_args),
        audit_selection=max(0, args.audit_selection),
        audit_seed=args.audit_seed,
    )


# ----------------------------------------------------------------------------- specs and arguments


def _is_url(spec: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*://", spec, re.IGNORECASE) is not None


def _is_path(spec: str) -> bool:
    # As pip tells them apart: a bare name ("peft") is a requirement even when a directory has that name.
    return spec.startswith(("/", ".", "~")) or os.sep in spec or spec.endswith(ARCHIVES)


def _check_common(what: str, spec: str) -> str:
    spec = spec.strip()
    if not spec:
        raise GateError(f"{what}: empty spec")
    if spec.startswith("-"):
        raise GateError(f"{what}: {spec!r} looks like a pip option, not something to install")
    return spec


def _check_path(what: str, spec: str) -> str:
    path = Path(spec).expanduser().resolve()
    if not path.exists():
        raise GateError(f"{what}: no such file or directory: {spec!r}")
    if path.is_dir() and not any((path / name).is_file() for name in ("pyproject.toml", "setup.py")):
        raise GateError(f"{what}: {spec!r} is a directory without pyproject.toml or setup.py")
    return str(path)


def _is_requirement(spec: str, name: str) -> bool:
    # The name, then the end, extras, a version specifier, a direct URL (name @ url) or a marker (;).
    return re.match(rf"^{name}\s*($|[\[(<>=!~@;])", spec, re.IGNORECASE) is not None


def check_peft_spec(side: str, spec: str) -> str:
    """The spec as pip should get it: a URL as is, a path made absolute, a requirement naming peft."""
    return _check_spec(f"--{side}", spec, "peft")


def check_torch_spec(spec: str) -> str:
    return _check_spec("--torch", spec, "torch")


def _check_spec(what: str, spec: str, name: str) -> str:
    spec = _check_common(what, spec)
    if _is_url(spec) or _is_requirement(spec, name):
        return spec
    if _is_path(spec):
        return _check_path(what, spec)
    raise GateError(f"{what}: {spec!r} is not a {name} requirement, a path or a URL (e.g. '{name}==1.2.3')")


def default_torch_spec() -> str:
    """This Python's torch version, without its local label (+cpu): the index decides the build."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        raise GateError("this Python has no torch to match: pass --torch SPEC (e.g. --torch torch==2.13.0)") from None
    return f"torch=={version.split('+')[0]}"


def check_pytest_args(pytest_args: Sequence[str]) -> None:
    for arg in pytest_args:
        if arg.split("=")[0] in ("--compile-report", "--update-budgets"):
            raise GateError(
                f"pytest args: {arg.split('=')[0]} is not allowed (the gate sets the reports, never budgets)"
            )
        if arg.split("=")[0] in ("--full-matrix", "--with-cases", "--cases", "--splits", "--group", "-n"):
            raise GateError(f"pytest args: {arg.split('=')[0]} is not allowed (the gate chooses: --select, --shard)")


# ----------------------------------------------------------------------------- running commands


class Shell:
    """Runs the commands of the gate; the tests replace it with a fake."""

    def run(self, cmd: Sequence[str], *, log: Path, env: dict[str, str], cwd: Path | None = None) -> int:
        """Run cmd with its output appended to log; return its exit status."""
        with log.open("a", encoding="utf-8") as stream:
            stream.write(f"$ {subprocess.list2cmdline([str(c) for c in cmd])}\n")
            stream.flush()
            return subprocess.run(
                [str(c) for c in cmd], stdout=stream, stderr=subprocess.STDOUT, env=env, cwd=cwd, check=False
            ).returncode

    def capture(self, cmd: Sequence[str], *, env: dict[str, str], cwd: Path | None = None) -> tuple[int, str, str]:
        done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd, check=False)
        return done.returncode, done.stdout, done.stderr


_SAY = threading.Lock()  # --sides-in-parallel: one side's line never cuts into the other's


def say(message: str) -> None:
    with _SAY:
        sys.stdout.write(f"gate: {message}\n")
        sys.stdout.flush()


def shown(path: Path) -> str:
    """A path as the user should read it: relative to the current directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------- one side


@dataclasses.dataclass(frozen=True)
class Side:
    name: str  # "base" or "head"
    spec: str
    out: Path
    work: Path  # this side's venv and caches

    @property
    def scratch(self) -> ScratchVenv:
        # Per side and per run, its compile caches too: compiled artifacts of one PEFT must never serve the other.
        return ScratchVenv(self.work / "venv", caches=self.work)

    @property
    def venv(self) -> Path:
        return self.scratch.path

    @property
    def python(self) -> Path:
        return self.scratch.python

    @property
    def report(self) -> Path:
        return self.out / f"{self.name}.json"

    @property
    def log(self) -> Path:
        return self.out / f"{self.name}.log"

    @property
    def install_log(self) -> Path:
        return self.out / f"{self.name}-install.log"

    def env(self, snapshot: Path) -> dict[str, str]:
        """The caller's environment without its interpreter, pip and cache settings (gate_tools.venv); the side's
        Python imports the snapshot of the checkout."""
        return self.scratch.env(PYTHONPATH=str(snapshot))


def _pip_install(shell: Shell, side: Side, env: dict[str, str], what: str, args: Sequence[str]) -> None:
    # --no-compile: byte-compiling all of torch took most of the install; a run compiles only what it imports.
    cmd = [side.python, "-m", "pip", "install", "--no-compile", *args]
    if shell.run(cmd, log=side.install_log, env=env) != 0:
        raise GateError(f"{side.name}: pip install failed for {what!r} (see {shown(side.install_log)})")


def _installed_version(shell: Shell, side: Side, env: dict[str, str], dist: str) -> str | None:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    status, stdout, _ = shell.capture([side.python, "-c", code], env=env)
    return stdout.strip() if status == 0 and stdout.strip() else None


def install(
    shell: Shell, side: Side, opts: Options, snapshot: Path, torch_spec: str, pins: Sequence[str] = ()
) -> tuple[str, str]:
    """A fresh venv with torch_spec, the gate's dependencies (with ``pins``) and the side's PEFT; returns (torch,
    peft) versions."""
    env = side.env(snapshot)
    say(f"{side.name}: installing {torch_spec}, the gate and {side.spec!r} (log: {shown(side.install_log)})")
    if shell.run(side.scratch.create_command(), log=side.install_log, env=env) != 0:
        raise GateError(f"{side.name}: could not create a virtualenv in {side.venv} (see {shown(side.install_log)})")
    index = ["--index-url", opts.torch_index_url] if opts.torch_index_url else []
    _pip_install(shell, side, env, torch_spec, [*index, *(["--pre"] if opts.torch_pre else []), torch_spec])
    torch_version = _installed_version(shell, side, env, "torch")
    if torch_version is None:
        raise GateError(f"{side.name}: {torch_spec!r} installed no torch (see {shown(side.install_log)})")
    # Nothing installed after torch may replace it: both sides must test the same torch.
    constraints = side.work / "constraints.txt"
    constraints.write_text("".join(f"{pin}\n" for pin in (f"torch=={torch_version}", *pins)), encoding="utf-8")
    _pip_install(shell, side, env, "the gate's dependencies", ["-c", constraints, "-e", f"{snapshot}[test]"])
    _pip_install(shell, side, env, side.spec, ["-c", constraints, side.spec])
    peft_version = _installed_version(shell, side, env, "peft")
    if peft_version is None:
        raise GateError(f"{side.name}: {side.spec!r} installed no 'peft' distribution (see {shown(side.install_log)})")
    _freeze(shell, side, env)
    say(f"{side.name}: torch {torch_version}, peft {peft_version}")
    return torch_version, peft_version


def _freeze(shell: Shell, side: Side, env: dict[str, str]) -> None:
    status, stdout, _ = shell.capture([side.python, "-m", "pip", "freeze"], env=env)
    if status == 0:
        (side.out / f"{side.name}-environment.txt").write_text(stdout, encoding="utf-8")


def _pytest(side: Side) -> list[str | Path]:
    # The side's own pytest cache: --last-failed must see this side's failures, and the snapshot stays shared.
    return [side.python, "-m", "pytest", "-o", f"cache_dir={side.work / 'pytest-cache'}"]


def _pytest_summary(log: Path) -> str:
    """pytest's last line, e.g. '1 failed, 2 passed in 31.02s'."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.exists() else []
    outcome = re.compile(r"\b(passed|failed|skipped|errors?|deselected|xfailed|no tests ran)\b.* in [\d.]+s")
    last = next((line for line in reversed(lines) if outcome.search(line)), "")
    return last.strip("= ") or "no pytest summary line"


NOTHING_COLLECTED = 5
MAX_WORKER_RESTARTS = 8  # each replaced worker imports torch and collects again


def run_suite(
    shell: Shell, side: Side, snapshot: Path, opts: Options, selection: Sequence[str] = (), may_be_empty: bool = False
) -> int:
    """The selection on this side, writing its report; returns pytest's exit status (0 or 1; 5 where the selection
    ``may_be_empty``: only the new cases, and head may have none)."""
    args = [*selection, *opts.pytest_args]
    say(f"{side.name}: pytest {subprocess.list2cmdline(args)} (log: {shown(side.log)})")
    cmd = [*_pytest(side), "--compile-report", side.report, *args]
    status = shell.run(cmd, log=side.log, env=side.env(snapshot), cwd=snapshot)
    summary = _pytest_summary(side.log)
    if status == NOTHING_COLLECTED and may_be_empty:
        return status
    if status not in (0, 1):
        reason = PYTEST_EXIT.get(status, "unknown status")
        raise GateError(f"{side.name}: pytest exited {status} ({reason}): {summary} (see {shown(side.log)})")
    say(f"{side.name}: {summary}")
    return status


_TRACEBACK_FILE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def import_error(shell: Shell, side: Side, snapshot: Path) -> str | None:
    """Why the side's PEFT does not import, in one line with the file and line of PEFT's code it points at (a file
    that does not parse, an import that fails); None when it imports."""
    status, _, stderr = shell.capture([side.python, "-c", "import peft"], env=side.env(snapshot), cwd=snapshot)
    if status == 0:
        return None
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    error = lines[-1].strip() if lines else f"python -c 'import peft' exited {status}"
    places = [m for m in _TRACEBACK_FILE.finditer(stderr) if "/peft/" in m["file"].replace("\\", "/")]
    where = ""
    if places:
        path = places[-1]["file"].replace("\\", "/")
        where = f" at {'peft/' + path.rsplit('/peft/', 1)[1]}:{places[-1]['line']}"
    return f"{error}{where}"


def head_does_not_import(opts: Options, why: str) -> int:
    """The pull request's fault, as any other regression: exit 1, the error in the summary and in diff.md."""
    text = f"# Compile gate\n\n**Head's PEFT does not import**: {why}. No compile case can run on it.\n"
    (opts.out / "diff.md").write_text(text, encoding="utf-8")
    say(f"head regressed: its PEFT does not import: {why} (diff: {shown(opts.out / 'diff.md')})")
    return EXIT_REGRESSION


def rerun_failed(shell: Shell, side: Side, snapshot: Path, opts: Options, selection: Sequence[str] = ()) -> None:
    """Head's failed cases once more with Dynamo's logs and a trace; their outcome changes no verdict."""
    log = side.out / f"{side.name}-failed-cases.log"
    env = {**side.env(snapshot), "TORCH_LOGS": RERUN_TORCH_LOGS, "TORCH_TRACE": str(side.out / "torch-trace")}
    cmd = [*_pytest(side), "--last-failed", "--last-failed-no-failures", "none", *selection, *opts.pytest_args]
    say(f"{side.name}: rerunning the failed cases with TORCH_LOGS={RERUN_TORCH_LOGS} (log: {shown(log)})")
    status = shell.run(cmd, log=log, env=env, cwd=snapshot)
    if status not in (0, 1, 5):
        say(f"{side.name}: note: the rerun of failed cases exited {status} (see {shown(log)})")


def read_report(side: Side) -> ReportCases:
    """The side's report; GateError when pytest wrote none or it cannot be used."""
    if not side.report.exists():
        raise GateError(f"{side.name}: pytest wrote no report {shown(side.report)} (see {shown(side.log)})")
    try:
        return read_cases(shown(side.report))
    except ValueError as error:
        raise GateError(f"{side.name}: unusable report: {error}") from None


def check_report(side: Side, shard: bool = False) -> int:
    """Fail unless the side's report is usable and at least one case ran to a verdict, audited or failed (a shard
    may hold none: the merged report is checked); returns how many it audited. Cases that all fail, at setup say,
    are a verdict: base may fail them alike."""
    report = read_report(side)
    # The report's own definition (a known failure was audited too: what it names held, and nothing else was found).
    if not report.audited_count and not any(fails(case) for case in report.cases) and not shard:
        raise GateError(f"{side.name}: nothing audited: {_unaudited(report.cases)} (see {shown(side.log)})")
    return report.audited_count


def _unaudited(cases: Sequence[CaseRecord]) -> str:
    if not cases:
        return "the report has no case"
    statuses = Counter(case.status for case in cases)
    counts = ", ".join(f"{n} {status}" for status, n in statuses.most_common())
    first = next((case.message for case in cases if case.message), None)
    reason = f"; first reason: {' '.join(first.split())}" if first else ""
    return f"none of its {len(cases)} case(s) ran to an audit ({counts}){reason}"


# ----------------------------------------------------------------------------- both sides


def snapshot_checkout(dest: Path, skip: Sequence[Path]) -> Path:
    """Copy this checkout to dest: both sides run the same gate code, and the checkout gets no writes."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        here = Path(directory)
        return {
            name
            for name in names
            if name in SNAPSHOT_SKIP
            or (here == REPO and name in SNAPSHOT_SKIP_TOP)
            or name.endswith(".egg-info")
            or (here / name / "pyvenv.cfg").exists()  # any virtualenv
            or (here / name).resolve() in skip
        }

    shutil.copytree(REPO, dest, ignore=ignore, symlinks=True)
    return dest


def _clear_outputs(out: Path) -> None:
    """Remove what an earlier run left in out: a stale report must never stand in for a missing one."""
    for side in ("base", "head"):
        for suffix in (".json", ".log", "-install.log", "-environment.txt", "-failed-cases.log", "-matrix.md"):
            (out / f"{side}{suffix}").unlink(missing_ok=True)
    for name in (
        "diff.md",
        "selection.md",
        "selected-cases.txt",
        "selected-unrecorded-on-head.txt",
        "base-cases.txt",
        "head-compared.json",
        why.SELECTION,
        why.BUILDS,
        NOT_JUDGED,
    ):
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / "torch-trace", ignore_errors=True)


def run_diff(
    shell: Shell, base: Side, head: Side, snapshot: Path, opts: Options, head_report: Path, selected: Path | None = None
) -> int:
    """The diff, into diff.md (printed); ``selected``: the list of the cases pytest ran, for the diff to name those
    with no record on either side."""
    out = opts.out / "diff.md"
    cmd = [head.python, "-m", "compile_audit.artifacts.diff", base.report, head_report, "--output", out]
    cmd += ["--selected", selected] if selected is not None else []
    status, _, stderr = shell.capture(
        [*cmd, *(["--chart"] if opts.chart else [])], env=head.env(snapshot), cwd=snapshot
    )
    if status not in (EXIT_OK, EXIT_REGRESSION):
        detail = " ".join((stderr.strip().splitlines() or ["no message"])[-1].split())
        raise GateError(f"diff: python -m compile_audit.artifacts.diff exited {status}: {detail}")
    if out.exists():
        sys.stdout.write(out.read_text(encoding="utf-8"))
    return status


def write_matrix(shell: Shell, head: Side, snapshot: Path) -> None:
    """Head's compatibility matrix, for the step summary; a missing matrix is worth a note, not a verdict."""
    out = head.out / "head-matrix.md"
    cmd = [head.python, "-m", "compile_audit.artifacts.matrix", head.report, "--output", out]
    status, _, stderr = shell.capture(cmd, env=head.env(snapshot), cwd=snapshot)
    if status != 0:
        say(f"note: no compatibility matrix: {(stderr.strip().splitlines() or ['no message'])[-1]}")


def fetch_source(shell: Shell, side: Side) -> Path:
    """The side's PEFT package, without its dependencies (seconds): the selection reads its source before anything
    heavy is installed, and a SPEC pip cannot install fails here, with pip's reason, whatever --select."""
    target = side.work / "source"
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", target, side.spec]
    say(f"{side.name}: fetching {side.spec!r} without dependencies (log: {shown(side.install_log)})")
    if shell.run(cmd, log=side.install_log, env=dict(os.environ), cwd=side.work) != 0:
        output = side.install_log.read_text(encoding="utf-8", errors="replace") if side.install_log.exists() else ""
        reason = pip_reason(output)
        raise GateError(f"{side.name}: pip cannot install {side.spec!r}: {reason} (see {shown(side.install_log)})")
    package = target / "peft"
    if not (package / "__init__.py").is_file():
        raise GateError(f"{side.name}: {side.spec!r} installed no 'peft' package (see {shown(side.install_log)})")
    return package


def pip_reason(output: str, limit: int = 600) -> str:
    """pip's reason in one line: its ``ERROR:`` lines (else its last line), the versions an index has cut to the
    newest few ("Could not find a version that satisfies ... (from versions: ...)")."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [_newest_versions(line) for line in lines if line.startswith("ERROR:")]
    reason = "; ".join(dict.fromkeys(errors)) or (lines or ["no output"])[-1]
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."


def _newest_versions(line: str, keep: int = 5) -> str:
    match = re.search(r"\(from versions: ([^)]*)\)", line)
    versions = match[1].split(", ") if match else []
    if len(versions) <= keep:
        return line
    return line.replace(match[0], f"(from versions: ..., {', '.join(versions[-keep:])})")


@dataclasses.dataclass(frozen=True)
class Chosen:
    """What both sides may run: pytest arguments, and how many cases (None: not known before the run)."""

    args: list[str]
    cases: int | None
    lines: list[str]
    listed: tuple[str, ...] = ()  # the cases the listing (--cases=FILE) holds
    build_only: tuple[str, ...] = ()  # of those, the ones to compare builds of before running them
    tables_gaining: tuple[str, ...] = ()  # the tables the change adds keys to (Selection.tables_gaining)
    names_rebound: tuple[str, ...] = ()  # module-level names the change binds anew (Selection.names_rebound)
    unjudged: tuple[str, ...] = ()  # the changes no recorded case runs (Selection.unjudged)


def choose_selection(opts: Options, sources: tuple[Path, Path] | None) -> Chosen:
    """The pytest arguments of the selection, with what it chose and why in OUT/selection.md."""
    if opts.select == "default":
        chosen = Chosen([], None, ["--select default: the default run"])
    elif opts.select == "full":
        chosen = Chosen(["--full-matrix"], None, ["--select full: the full matrix"])
    else:
        assert sources is not None
        chosen = _selection_by_change(opts, *sources)
    if opts.shard is not None and chosen.cases != 0:
        group, splits = opts.shard
        durations = REPO / "tests" / "durations.json"
        chosen.args.extend(["--splits", str(splits), "--group", str(group), "--durations-path", str(durations)])
        chosen.lines.append(f"shard {group} of {splits} of that selection (pytest-split, by tests/durations.json)")
    if chosen.unjudged:
        chosen.lines.append(f"not judged: {len(chosen.unjudged)} change(s) that no recorded case runs ({NOT_JUDGED})")
    for line in chosen.lines:
        say(f"selection: {line}")
    (opts.out / "selection.md").write_text("".join(f"- {line}\n" for line in chosen.lines), encoding="utf-8")
    if chosen.unjudged:
        text = "".join(f"- {reason.strip()}\n" for reason in chosen.unjudged)
        heading = f"## Not judged: changed code no compile case runs ({len(chosen.unjudged)})"
        (opts.out / NOT_JUDGED).write_text(f"\n{heading}\n\n{text}", encoding="utf-8")
    return chosen


NOT_JUDGED = "not-judged.md"  # the changes no case runs, appended to diff.md whatever the verdict


def note_unjudged(opts: Options, status: int) -> int:
    """diff.md ends with the changed code no case runs: a green verdict says what it could not see."""
    listing = opts.out / NOT_JUDGED
    if status in (EXIT_OK, EXIT_REGRESSION) and listing.is_file():
        with (opts.out / "diff.md").open("a", encoding="utf-8") as diff:
            diff.write(listing.read_text(encoding="utf-8"))
        say(f"not judged: the changed code no compile case runs is listed at the end of {shown(opts.out / 'diff.md')}")
    return status


def _selection_by_change(opts: Options, base_source: Path, head_source: Path) -> Chosen:
    footprints, selection = _select(opts, base_source, head_source)
    why.write_selection(opts.out, selection)
    return dataclasses.replace(_chosen_by_change(opts, footprints, selection), unjudged=selection.unjudged)


def _select(opts: Options, base_source: Path, head_source: Path) -> tuple[Footprints, Selection]:
    if not opts.footprints.is_file():
        raise GateError(f"--select change: no footprints file {opts.footprints} (or choose --select default|full)")
    try:
        footprints = load_footprints(opts.footprints)
        selection: Selection = select_between(footprints, base_source, head_source)
    except FootprintsError as error:
        raise GateError(f"--select change: {error}") from None
    recorded = getattr(footprints, "versions", {}).get("peft")
    base_version = _source_version(base_source)
    if recorded and base_version and recorded != base_version:
        say(f"selection: note: the footprints were recorded on peft {recorded}, base is {base_version}")
    return footprints, selection


def _chosen_by_change(opts: Options, footprints: Footprints, selection: Selection) -> Chosen:
    if selection.nothing_executes_differently:
        return Chosen(
            [],
            0,
            [
                "no executed PEFT code differs between base and head (docstrings, comments, formatting"
                " and annotations do not count): no compile case to run"
            ],
        )
    lines = [
        f"{len(selection.changed_files)} PEFT file(s) differ in executed code:",
        *(f"  {reason}{_rule_of(selection, reason)}" for reason in selection.reasons),
    ]
    if selection.everything:
        return Chosen(["--full-matrix"], None, [*lines, "so the full matrix runs"])
    new = ["--new-cases"] if selection.new_cases else []
    also_new = ", and the new cases (those of a method base lacks: --new-cases)" if new else ""
    if not selection.cases:
        if new:
            return Chosen(new, None, [*lines, "so only the new cases run (those of a method base lacks: --new-cases)"])
        return Chosen([], 0, [*lines, "so no recorded case ran the changed code: no compile case to run"])
    audit = audit_sample(opts, footprints, selection)
    cases = opts.out / "selected-cases.txt"
    cases.write_text("".join(f"{case}\n" for case in (*selection.cases, *audit)), encoding="utf-8")
    summary = f"so {len(selection.cases)} case(s) run ({shown(cases)}){also_new}"
    if audit:
        summary += f", and {len(audit)} it did not select, to audit the selection ({shown(opts.out / AUDIT_CASES)})"
    total = len(selection.cases) + len(audit)
    if selection.build_only:
        summary += (
            f"; {len(selection.build_only)} of them ran the changed code only while building their model: their"
            " builds are compared first"
        )
    listed = (*selection.cases, *audit)
    return Chosen(
        [f"--cases={cases}", *new],
        None if new else total,
        [*lines, summary],
        listed,
        selection.build_only,
        selection.tables_gaining,
        selection.names_rebound,
    )


def _rule_of(selection: Selection, reason: str) -> str:
    """`` [rule ID]``: the selection rule that gave this reason (blank where the selection names none)."""
    rules = {decision.reason: decision.rule for decision in selection.decisions}
    return f" [rule {rules[reason]}]" if reason in rules else ""


def compare_builds(shell: Shell, sides: tuple[Side, Side], snapshot: Path, opts: Options, chosen: Chosen) -> Chosen:
    """Both sides build the cases the change reaches only while building, up to their first compile
    (``pytest --build-fingerprints``); those whose builds are equal leave the selection, the others stay, each with
    why (selection.md). A side that cannot fingerprint leaves every case in."""
    listing = opts.out / "build-cases.txt"
    listing.write_text("".join(f"{case}\n" for case in chosen.build_only), encoding="utf-8")
    found = []
    for side in sides:
        path = opts.out / f"{side.name}-builds.json"
        log = opts.out / f"{side.name}-builds.log"
        say(f"{side.name}: fingerprinting {len(chosen.build_only)} build(s) (log: {shown(log)})")
        cmd = [*_pytest(side), f"--build-fingerprints={path}", f"--cases={listing}", *opts.pytest_args]
        status = shell.run(cmd, log=log, env=side.env(snapshot), cwd=snapshot)
        try:
            found.append(builds_file.read(path) if status == 0 else {})
        except ValueError:
            found.append({})
    same, run = builds_file.compare(chosen.build_only, *found, chosen.tables_gaining, chosen.names_rebound)
    why.write_builds(opts.out, same, run)
    gained = [case for case in same if not builds_file.same_build(found[0].get(case), found[1].get(case))]
    lines = [f"builds compared for {len(chosen.build_only)} case(s): {len(same)} built the same (not run)"]
    if gained:
        lines[0] += (
            f", {len(gained)} of them but for what the change adds (keys of"
            f" {', '.join(chosen.tables_gaining) or 'no table'}, names base did not bind or the change binds anew),"
            " whose readers the selection selects on its own"
        )
    lines += [f"  runs: {case}: {why}" for case, why in sorted(run.items())[:20]]
    lines += [f"  ... {len(run) - 20} more (see {shown(opts.out / 'build-cases.txt')})"] if len(run) > 20 else []
    for line in lines:
        say(f"selection: {line}")
    with (opts.out / "selection.md").open("a", encoding="utf-8") as selection_md:
        selection_md.write("".join(f"- {line}\n" for line in lines))
    if not same:
        return chosen
    kept = tuple(case for case in chosen.listed if case not in set(same))
    cases = opts.out / "selected-cases.txt"
    cases.write_text("".join(f"{case}\n" for case in kept), encoding="utf-8")
    args = [arg for arg in chosen.args if not arg.startswith("--cases=")]
    args = [f"--cases={cases}", *args] if kept else args
    count = None if "--new-cases" in args else len(kept)
    return Chosen(args, count, [*chosen.lines, *lines], kept, ())


AUDIT_CASES = "audit-cases.txt"


def audit_sample(opts: Options, footprints: Footprints, selection: Selection) -> list[str]:
    """``--audit-selection N``: N recorded cases the selection left out, drawn with ``--audit-seed``."""
    if not opts.audit_selection:
        return []
    left_out = sorted(set(footprints.cases) - set(selection.cases))
    sample = sorted(random.Random(opts.audit_seed).sample(left_out, min(opts.audit_selection, len(left_out))))
    (opts.out / AUDIT_CASES).write_text("".join(f"{case}\n" for case in sample), encoding="utf-8")
    return sample


def selection_misses(opts: Options, base: Side | None, head: Side) -> list[str]:
    """The audited cases (outside the selection) whose verdict head changed: head failed where base did not."""
    listing = opts.out / AUDIT_CASES
    if not listing.exists():
        return []
    audited = set(listing.read_text(encoding="utf-8").split())
    failed = {case for case in failed_cases(head) if case in audited}
    if not failed or base is None or not base.report.exists():
        return sorted(failed) if base is None else []
    on_base = {case.id: case.status for case in read_report(base).cases}
    return sorted(case for case in failed if on_base.get(case) not in ("failed", "error"))


def _source_version(package: Path) -> str | None:
    """The version pip installed beside a fetched package (its dist-info), without importing it."""
    for info in package.parent.glob(f"{package.name}-*.dist-info"):
        return info.name.removesuffix(".dist-info").split("-", 1)[1]
    return None


def _same_torch(spec: str, installed: str) -> str:
    """What head installs: exactly base's torch (the same file, or the version base got, local label included)."""
    return spec if _is_url(spec) or _is_path(spec) else f"torch=={installed}"


def _work_dir(opts: Options) -> tuple[Path, bool]:
    """The directory for venvs and caches, and whether the gate removes it at the end."""
    if opts.work_dir is None:
        return Path(tempfile.mkdtemp(prefix="compile-gate-")), True
    if opts.work_dir.exists() and any(opts.work_dir.iterdir()):
        raise GateError(f"--work-dir {opts.work_dir} is not empty (the venvs must be fresh)")
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    return opts.work_dir, False


def recorded_versions(snapshot: Path) -> dict[str, str]:
    """The versions the CPU budgets were recorded with (tests/compile_budgets.toml, [versions.cpu])."""
    path = snapshot / "tests" / "compile_budgets.toml"
    try:
        versions = tomllib.loads(path.read_text(encoding="utf-8")).get("versions", {}).get("cpu", {})
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise GateError(f"{path}: unreadable budgets file: {error}") from None
    return {name: str(version) for name, version in versions.items()}


def install_pins(snapshot: Path) -> list[str]:
    """The dependency pins of tests/install_pins.txt (pip requirements, one a line, ``#`` comments)."""
    path = snapshot / "tests" / "install_pins.txt"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise GateError(f"{path}: unreadable pins file: {error}") from None
    return [pin for line in lines if (pin := line.split("#")[0].strip())]


def _installed(shell: Shell, side: Side, snapshot: Path, names: Sequence[str]) -> dict[str, str]:
    env = side.env(snapshot)
    return {name: version for name in names if (version := _installed_version(shell, side, env, name))}


def _pytest_jobs(opts: Options, cases: int | None) -> list[str]:
    """On xdist workers, one at least: a case whose process dies then costs its worker, not the side's run
    (compile_gate.crashes names it). After MAX_WORKER_RESTARTS crashes the side stops: a change that kills every case
    is a regression by then, and the diff names the selected cases left without a record. Not the GPU tier on one
    worker: pytest-benchmark, off under xdist, times the steps the diff compares there."""
    jobs = min(opts.jobs, cases) if cases else opts.jobs
    if jobs == 1 and _gpu_tier(opts.pytest_args):
        return []
    return ["-n", str(jobs), f"--max-worker-restart={MAX_WORKER_RESTARTS}"]


def _gpu_tier(pytest_args: Sequence[str]) -> bool:
    args = list(pytest_args)
    return any(arg == "-m" and i + 1 < len(args) and args[i + 1] == "gpu" for i, arg in enumerate(args))


def failed_cases(side: Side) -> list[str]:
    return sorted(case.id for case in read_report(side).cases if case.status in ("failed", "error"))


def new_cases(side: Side) -> list[str]:
    """The cases of a method the registry does not know (the zoo's ``derived`` field): base may lack the method."""
    return sorted(case["id"] for case in read_report(side).data["cases"] if case.get("derived"))


def new_cases_failed(opts: Options, head: Side, failed: Sequence[str]) -> int:
    """Head's verdict where only new cases failed: base has none of them to compare, so diff.md lists each with its
    roots at their lines, as the diff does for a case only head has."""
    records = {case.id: case for case in read_report(head).cases}
    lines = lonely_lines(
        "New cases that fail", [(records[case], True) for case in failed], "new case outside its budget"
    )
    text = "# Compile gate\n\nHead regressed: new cases, of a method base lacks, fail.\n" + "\n".join(lines) + "\n"
    (opts.out / "diff.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    say(f"head regressed (diff: {shown(opts.out / 'diff.md')})")
    return EXIT_REGRESSION


def write_compared_head(head: Side, base_cases: Sequence[str]) -> Path:
    """Head's report cut to the cases base ran, as it was written: the diff compares like with like. Head's skipped
    cases stay, for the diff to name as not judged."""
    report = read_report(head)
    wanted = set(base_cases) | {case.id for case in report.cases if case.status == "skipped"}
    data = {**report.data, "cases": [case for case in report.data["cases"] if case["id"] in wanted]}
    path = head.out / "head-compared.json"
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def unrecorded_on_head(opts: Options, head: Side, selected: Path) -> Path:
    """The selected cases head's whole report does not hold: where base ran only head's failures, the diff sees head's
    report cut to those, and the cases head passed (judged by the budgets alone) must not read as never run."""
    recorded = {case.id for case in read_report(head).cases}
    path = opts.out / "selected-unrecorded-on-head.txt"
    cases = [case for case in selected.read_text(encoding="utf-8").split() if case not in recorded]
    path.write_text("".join(f"{case}\n" for case in cases), encoding="utf-8")
    return path


def _no_run(opts: Options, why: str, not_judged: NotJudged | None = None) -> int:
    """Exit 0 without a diff, saying why, and what head alone did not judge."""
    not_judged = not_judged or NotJudged()
    why += f"; {not_judged_summary(not_judged)}" if not_judged else ""
    listed = "".join(f"{line}\n" for line in not_judged_lines(not_judged))
    (opts.out / "diff.md").write_text(f"# Compile gate\n\nNothing regressed: {why}.\n{listed}", encoding="utf-8")
    say(f"no regression: {why} (diff: {shown(opts.out / 'diff.md')})")
    return EXIT_OK


def selected_exactly(opts: Options, chosen: Chosen) -> tuple[str, ...]:
    """The cases pytest runs where the gate knows them: its own list (--cases), with no shard and no pytest args of
    the caller's, which may deselect some; () where it cannot know. One that no report holds could not run."""
    if opts.shard is not None or opts.pytest_args or not any(arg.startswith("--cases=") for arg in chosen.args):
        return ()
    return chosen.listed


def not_judged_on_head(head: Side, selected: Sequence[str]) -> NotJudged:
    """Where head alone decides (it passed everything else): the cases it skipped, and the selected ones it has no
    record of."""
    cases = read_report(head).by_id
    skipped = [case for case_id, case in sorted(cases.items()) if case.status == "skipped"]
    return NotJudged(skipped=skipped, no_record=sorted(set(selected) - cases.keys()))


def gate(opts: Options, shell: Shell, work: Path) -> int:
    opts.out.mkdir(parents=True, exist_ok=True)
    _clear_outputs(opts.out)
    snapshot = snapshot_checkout(work / "gate", skip=[opts.out, work])
    base = Side("base", opts.base, opts.out, work / "base")
    head = Side("head", opts.head, opts.out, work / "head")
    for side in (base, head):
        side.work.mkdir(parents=True)
    # Whatever --select: the fetch is the check of both SPECs, seconds before anything heavy.
    sources = (fetch_source(shell, base), fetch_source(shell, head))
    chosen = choose_selection(opts, sources)
    if chosen.cases == 0:
        return _no_run(opts, "the change selects no compile case (selection.md)")
    recorded = recorded_versions(snapshot)
    pins = [] if opts.unpinned or "transformers" not in recorded else [f"transformers=={recorded['transformers']}"]
    pins += [] if opts.unpinned else install_pins(snapshot)
    torch_version, _ = install(shell, head, opts, snapshot, opts.torch, pins)
    base_installed = False
    if chosen.build_only:
        install(shell, base, opts, snapshot, _same_torch(opts.torch, torch_version), pins)
        base_installed = True
        chosen = compare_builds(shell, (base, head), snapshot, opts, chosen)
        if chosen.cases == 0:
            return _no_run(opts, "every case the change selected built the same model on both sides (selection.md)")
    jobs = _pytest_jobs(opts, chosen.cases)
    only_new = chosen.args == ["--new-cases"]
    try:
        head_status = run_suite(shell, head, snapshot, opts, [*chosen.args, *jobs], may_be_empty=only_new)
    except GateError:
        why = import_error(shell, head, snapshot)
        if why is not None:
            return head_does_not_import(opts, why)
        raise
    if head_status == NOTHING_COLLECTED:
        return _no_run(opts, "no recorded case ran the changed code, and head adds no method the registry lacks")
    audited = check_report(head, shard=opts.shard is not None)
    say(f"head: {audited} case(s) audited")
    if head_status == 1 and opts.rerun_failed:
        rerun_failed(shell, head, snapshot, opts, chosen.args)
    write_matrix(shell, head, snapshot)
    added = new_cases(head)
    if added:
        say(
            f"head: {len(added)} new case(s), of a method base lacks, judged on head alone: {', '.join(added[:6])}"
            + (", ..." if len(added) > 6 else "")
        )
    installed = _installed(shell, head, snapshot, ["torch", "transformers"])
    on_recorded = all(installed.get(name) == recorded.get(name) for name in ("torch", "transformers"))
    failed = failed_cases(head)  # one read of head's report
    failed_new = [case for case in failed if case in added]
    if on_recorded:
        failing = [case for case in failed if case not in added]
        if failed_new and not failing:
            say(f"base: not run: only new cases failed ({len(failed_new)}), and base has none of them")
            return new_cases_failed(opts, head, failed_new)
        if not failing:
            return _no_run(
                opts,
                f"head passed all {audited} audited case(s) against the budgets, on the versions they"
                " were recorded with (base not needed)",
                not_judged_on_head(head, selected_exactly(opts, chosen)),
            )
        listing = opts.out / "base-cases.txt"
        listing.write_text("".join(f"{case}\n" for case in failing), encoding="utf-8")
        say(
            f"base: only the {len(failing)} case(s) head failed ({shown(listing)}): a failure on base too is no"
            " regression"
        )
        base_args = [f"--cases={listing}", *_pytest_jobs(opts, len(failing))]
    else:
        differ = ", ".join(f"{n} {installed.get(n)} (recorded {recorded.get(n)})" for n in ("torch", "transformers"))
        say(f"base: the whole selection: installed versions are not the budgets' own ({differ})")
        failing, base_args = None, [*chosen.args, *jobs]
    if not base_installed:
        install(shell, base, opts, snapshot, _same_torch(opts.torch, torch_version), pins)
    run_suite(shell, base, snapshot, opts, base_args)
    say(f"base: {check_report(base, shard=True)} case(s) audited")
    # Head's new cases that failed are compared too: base lacks them, so the diff lists them as only head's.
    compared = write_compared_head(head, [*failing, *failed_new]) if failing is not None else head.report
    selected = opts.out / "selected-cases.txt" if selected_exactly(opts, chosen) else None  # chosen.listed
    if selected is not None and failing is not None:
        selected = unrecorded_on_head(opts, head, selected)
    status = run_diff(shell, base, head, snapshot, opts, compared, selected)
    missed = selection_misses(opts, base, head)
    if missed:
        text = "".join(
            f"- selection missed: **{case}** changed its verdict, and the change did not select it\n" for case in missed
        )
        with (opts.out / "diff.md").open("a", encoding="utf-8") as diff:
            diff.write(f"\n## Selection missed ({len(missed)})\n\n{text}")
        say(f"selection missed {len(missed)} case(s) whose verdict changed: {', '.join(missed)}")
        status = EXIT_REGRESSION
    verdict = "head regressed" if status == EXIT_REGRESSION else "no regression"
    say(f"{verdict} (diff: {shown(opts.out / 'diff.md')})")
    return status


def main(argv: Sequence[str] | None = None, shell: Shell | None = None, prog: str = PROG) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg == "--why" or arg.startswith("--why=") for arg in argv):
        return why.main(argv, prog)
    try:
        opts = parse_args(argv, prog)
        work, temporary = _work_dir(opts)
        try:
            return note_unjudged(opts, gate(opts, shell or Shell(), work))
        finally:
            if temporary:
                shutil.rmtree(work, ignore_errors=True)
    except GateError as error:
        print(f"gate: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("gate: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except Exception as error:  # exit 1 means a regression and nothing else
        print(f"gate: {type(error).__name__}: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
