"""The scratch venv of one bisect run: created once, changed one package per step, one case run per step.

Every command runs with the scratch venv's own interpreter (``VENV/bin/python -m pip``, ``-m pytest``) and the
environment of ``gate_tools.venv``: without the caller's ``VIRTUAL_ENV``, ``PYTHONPATH``, ``PYTHONHOME``, user site
or pip target/prefix/user settings, so nothing is installed into, or imported from, the calling environment, and
with compile caches of each step's own (``WORKDIR/caches/NN``). The venv starts as a copy of the caller's gate stack
(torch, transformers, peft, pytest, pytest-benchmark, scikit-learn when present) at the caller's versions, with
every other package the caller has as a constraint, so that only the bisected package differs from the caller's
run. Each step's pip and pytest output goes to ``WORKDIR/logs``, each report to ``WORKDIR/reports``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from compile_audit.artifacts.report import read_cases
from compile_audit.case_ids import CaseId
from gate_tools.bisect.driver import Measurement
from gate_tools.venv import ScratchVenv

GATE_PACKAGES = ("torch", "transformers", "peft", "pytest", "pytest-benchmark")
OPTIONAL_PACKAGES = ("scikit-learn",)  # AdaMSS needs it; the venv gets it when the caller has it
DEFAULT_TIMEOUT = 1800.0
IMPORT_CHECK = (
    "import json, peft, torch, transformers; "
    "print(json.dumps({m.__name__: m.__version__ for m in (torch, transformers, peft)}))"
)
ERROR_WIDTH = 200
_EXCEPTION = re.compile(r"^(E\s+)?[\w.]*(Error|Exception)\b")  # pytest prefixes its error lines with "E   "
_CASE_ID = re.compile(r"^[\w.-]+/[\w.-]+/[\w.-]+(@(cpu|cuda)-\w+)?$")


class LabError(Exception):
    """The scratch venv cannot be set up; the message is one line."""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def caller_versions(names: Iterable[str]) -> dict[str, str]:
    """The installed version of each name in the calling environment (read only); missing ones left out."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def caller_pins(exclude: Iterable[str]) -> list[str]:
    """``name==version`` for every index-installed package of the calling environment, except exclude."""
    skipped = {normalize(name) for name in (*exclude, "pip")}
    pins = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name or normalize(name) in skipped or dist.read_text("direct_url.json") is not None:
            continue  # editable, local-path and VCS installs cannot be reinstalled from an index
        pins.add(f"{normalize(name)}=={dist.version}")
    return sorted(pins)


def same_release(installed: str, wanted: str) -> bool:
    """2.13.0+cpu is the release 2.13.0."""
    return installed.split("+", 1)[0] == wanted.split("+", 1)[0]


def valid_case_id(case_id: str) -> bool:
    return bool(_CASE_ID.match(case_id))


def case_selection(case_id: str) -> list[str]:
    """pytest options that run exactly this case: ``-k "[model/method/scenario]"`` and its tier's options."""
    identity = CaseId.parse(case_id)
    if identity.on_default_tier:
        return ["--full-matrix", "-k", f"[{identity.path}]"]
    tier = ["--cpu-backend", identity.backend] if identity.device == "cpu" else ["-m", "gpu"]
    return ["--full-matrix", *tier, "-k", f"[{identity.path}"]  # -k takes no "@": the prefix, the tier the rest


def error_line(output: str) -> str:
    """The line that says what went wrong: pip's first ERROR line, else the last exception, else the last line."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    pip_errors = [line for line in lines if line.startswith("ERROR:")]
    exceptions = [re.sub(r"^E\s+", "", line) for line in lines if _EXCEPTION.match(line)]
    line = pip_errors[0] if pip_errors else (exceptions or lines or ["no output"])[-1]
    return line if len(line) <= ERROR_WIDTH else line[: ERROR_WIDTH - 1] + "…"


def _slug(text: str) -> str:
    return re.sub(r"[^\w.-]+", "-", text).strip("-")[:60]


class Lab:
    def __init__(
        self,
        workdir: Path,
        gate_root: Path,
        case_id: str,
        pip_options: Iterable[str] = (),
        timeout: float = DEFAULT_TIMEOUT,
        say: Callable[[str], None] = lambda line: None,
        run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.workdir, self.gate_root, self.case_id = workdir, gate_root, case_id
        self.pip_options, self.timeout, self.say, self._run = list(pip_options), timeout, say, run
        self.venv = workdir / "venv"
        self.python = self.venv / "bin" / "python"
        self.environ = environ
        self.logs, self.reports = workdir / "logs", workdir / "reports"
        self.steps = 0
        self.commands = 0  # numbers the log files: a step may run pip more than once

    @property
    def scratch(self) -> ScratchVenv:
        # Compile caches per step: one candidate's compiled artifacts never serve another.
        return ScratchVenv(self.venv, caches=self.workdir / "caches" / f"{self.steps:02d}")

    @property
    def env(self) -> dict[str, str]:
        # No __pycache__ written into the gate checkout, which the case runs from.
        return self.scratch.env(self.environ, PYTHONDONTWRITEBYTECODE="1")

    # ------------------------------------------------------------------------- commands

    def call(self, argv: list[str], log_name: str, timeout: float | None = None) -> tuple[int, str, str]:
        """Run one command, its output into logs/: (exit status, stdout, last error line); 124: timed out."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.commands += 1
        log = self.logs / f"{self.steps:02d}-{self.commands:03d}-{log_name}.log"
        try:
            done = self._run(
                argv, cwd=self.gate_root, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            log.write_text(f"$ {' '.join(argv)}\ntimed out after {timeout:g} s\n", encoding="utf-8")
            return 124, "", f"timed out after {timeout:g} s"
        log.write_text(f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}", encoding="utf-8")
        error = "" if done.returncode == 0 else error_line(done.stdout + "\n" + done.stderr)
        return done.returncode, done.stdout, error

    def pip_install(self, requirements: list[str], constraints: Iterable[str] = (), *options: str) -> str | None:
        """Install into the scratch venv only; None when it worked, else the line of pip's output naming the error."""
        argv = [str(self.python), "-m", "pip", "install", "--disable-pip-version-check", *options, *self.pip_options]
        constraints = list(constraints)
        if constraints:
            path = self.workdir / f"constraints-{self.steps:02d}.txt"
            path.write_text("\n".join(constraints) + "\n", encoding="utf-8")
            argv += ["--constraint", str(path)]
        status, _, error = self.call([*argv, *requirements], "install")
        return None if status == 0 else error

    # ------------------------------------------------------------------------- set-up

    def create(self, requirements: list[str], pins: list[str]) -> None:
        """The venv with requirements installed, pinned to the caller's versions where they allow; LabError."""
        status, _, error = self.call(self.scratch.create_command(), "venv")
        if status != 0:
            raise LabError(f"cannot create the scratch venv {self.venv}: {error}")
        self.say(f"installing the gate's stack into {self.venv}: {' '.join(requirements)}")
        error = self.pip_install(requirements, pins)
        if error and pins:
            self.say(f"the caller's other versions do not install together ({error}); letting pip choose them")
            error = self.pip_install(requirements)
        if error:
            raise LabError(f"cannot install {' '.join(requirements)} into the scratch venv: {error}")

    # ------------------------------------------------------------------------- one step

    def installed_versions(self) -> dict[str, str] | str:
        """torch, transformers and peft as the scratch venv imports them, or why importing failed."""
        status, output, error = self.call([str(self.python), "-c", IMPORT_CHECK], "import")
        if status != 0:
            return error
        try:
            return json.loads(output.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return f"unexpected output of the import check: {output.strip()[:120]!r}"

    def run_case(self, label: str) -> Measurement:
        self.reports.mkdir(parents=True, exist_ok=True)
        report_path = self.reports / f"{self.steps:02d}-{_slug(label)}.json"
        argv = [str(self.python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--compile-report", str(report_path)]
        status, _, error = self.call([*argv, *case_selection(self.case_id)], "pytest", timeout=self.timeout)
        if not report_path.exists():
            return Measurement.failed(f"pytest wrote no report (exit status {status}: {error})")
        try:
            report = read_cases(report_path)
        except ValueError as problem:
            return Measurement.failed(str(problem), report_path)
        return Measurement.of_case(report.by_id.get(self.case_id), report_path)

    def measure(
        self,
        label: str,
        install: list[str],
        constraints: Iterable[str] = (),
        options: Iterable[str] = (),
        expect: tuple[str, str] | None = None,
    ) -> Measurement:
        """Install one candidate (pip arguments), check that it imports (as expect's version), run the case."""
        self.steps += 1
        self.say(f"{label}: installing")
        error = self.pip_install(install, constraints, *options)
        if error:
            return Measurement.failed(f"install failed: {error}")
        versions = self.installed_versions()
        if isinstance(versions, str):
            return Measurement.failed(f"import failed: {versions}")
        if expect and not same_release(versions.get(expect[0], "?"), expect[1]):
            return Measurement.failed(f"{expect[0]} {versions.get(expect[0])} imports, not the {expect[1]} installed")
        self.say(f"{label}: running {self.case_id} with " + ", ".join(f"{k} {v}" for k, v in versions.items()))
        return self.run_case(label)
