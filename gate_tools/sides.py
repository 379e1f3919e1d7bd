"""One side of the gate: its virtualenv, what it installs, the selection run on it with pytest, and its report
(gate_tools.gate runs both sides)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
import tomllib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from compile_audit.artifacts.diff import fails
from compile_audit.artifacts.records import CaseRecord
from compile_audit.artifacts.report import ReportCases, read_cases
from gate_tools.gate_args import RERUN_TORCH_LOGS, GateError, Options
from gate_tools.venv import ScratchVenv

PYTEST_EXIT = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}


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


def pytest_command(side: Side) -> list[str | Path]:
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
    cmd = [*pytest_command(side), "--compile-report", side.report, *args]
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


def rerun_failed(shell: Shell, side: Side, snapshot: Path, opts: Options, selection: Sequence[str] = ()) -> None:
    """Head's failed cases once more with Dynamo's logs and a trace; their outcome changes no verdict."""
    log = side.out / f"{side.name}-failed-cases.log"
    env = {**side.env(snapshot), "TORCH_LOGS": RERUN_TORCH_LOGS, "TORCH_TRACE": str(side.out / "torch-trace")}
    cmd = [*pytest_command(side), "--last-failed", "--last-failed-no-failures", "none", *selection, *opts.pytest_args]
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


def installed_versions(shell: Shell, side: Side, snapshot: Path, names: Sequence[str]) -> dict[str, str]:
    env = side.env(snapshot)
    return {name: version for name in names if (version := _installed_version(shell, side, env, name))}


def pytest_jobs(opts: Options, cases: int | None) -> list[str]:
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
