"""The gate (gate_tools.gate) without building anything: its arguments, and every exit path with a fake shell.

The fake shell stands in for pip, pytest and the diff: it records each command and answers as told, so each
test shows one verdict or one exit-2 reason. tests/tools/test_gate_end_to_end.py runs the real thing.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from compile_audit.artifacts import diff
from compile_audit.artifacts.report import read_cases
from compile_audit.selection import builds_file
from compile_audit.selection.change_selection import Selection
from compile_audit.selection.footprints_file import Footprints
from gate_tools import gate, gate_args, gate_selection, sides

pytestmark = pytest.mark.selftest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gate"

AUDITED = {"id": "llama-tiny/lora/train-eval-train", "status": "passed", "audited": True}
FAILED = {**AUDITED, "status": "failed"}
SKIPPED = {
    "id": "llama-tiny/lora/train-eval-train@cuda-inductor",
    "status": "skipped",
    "audited": False,
    "message": "GPU tier: CUDA is not available on this machine",
}
ONE_CASE = Selection(
    False,
    ("llama-tiny/lora/train-eval-train",),
    ("peft/tuners/lora/layer.py::Linear.forward: changed: run by 1 case(s)",),
    ("peft/tuners/lora/layer.py",),
)


def report(*cases: dict) -> dict:
    return {"schema": "compile-audit-report/2", "versions": {}, "cases": list(cases)}


class FakeShell:
    """Answers the gate's commands: pip and venv succeed unless a pip spec is in `failing_installs`; pytest
    writes `reports[side]` (None: writes nothing) and exits `pytest_status[side]`; the diff exits `diff_status`.
    `selection` is what the change selects (compile_audit.selection.change_selection)."""

    def __init__(self, *, diff_status: int = 0, diff_stderr: str = "", cuda: bool = False, torch: str = "2.13.0+cpu"):
        self.commands: list[tuple[list[str], dict[str, str]]] = []
        self.failing_installs: set[str] = set()
        self.reports: dict[str, dict | str | None] = {"base": report(FAILED), "head": report(AUDITED)}
        self.pytest_status = {"base": 0, "head": 0}
        self.diff_status, self.diff_stderr = diff_status, diff_stderr
        self.cuda, self.torch, self.transformers = cuda, torch, "5.24.0"
        self.selection = ONE_CASE
        self.footprints = Footprints((), {})
        self.import_errors: dict[str, str] = {}  # side -> the traceback of `import peft` there
        self.fingerprints: dict[str, dict] = {"base": {}, "head": {}}  # side -> case id -> its build fingerprint
        self.sources: dict[str, dict[str, str]] = {"base": {}, "head": {}}  # side -> file in peft/ -> its text

    @staticmethod
    def side(cmd: list[str]) -> str:
        if "--target" in cmd:
            return Path(cmd[cmd.index("--target") + 1]).parent.name  # <work>/<side>/source
        return Path(cmd[0]).parents[2].name  # <work>/<side>/venv/bin/python

    def run(self, cmd, *, log: Path, env: dict[str, str], cwd: Path | None = None) -> int:
        cmd = [str(c) for c in cmd]
        self.commands.append((cmd, env))
        log.touch()
        if "--target" in cmd:
            if cmd[-1] in self.failing_installs:
                log.write_text("Collecting peft\nERROR: No matching distribution found for " + cmd[-1] + "\n")
                return 1
            package = Path(cmd[cmd.index("--target") + 1]) / "peft"
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").touch()
            for relative, text in self.sources[self.side(cmd)].items():
                (package / relative).parent.mkdir(parents=True, exist_ok=True)
                (package / relative).write_text(text, encoding="utf-8")
            return 0
        if cmd[1:3] == ["-m", "pip"]:
            return 1 if cmd[-1] in self.failing_installs else 0
        if cmd[1:3] == ["-m", "pytest"]:
            return self._pytest(cmd)
        return 0

    def _pytest(self, cmd: list[str]) -> int:
        side = self.side(cmd)
        fingerprints = [arg.partition("=")[2] for arg in cmd if arg.startswith("--build-fingerprints=")]
        if fingerprints:
            Path(fingerprints[0]).write_text(builds_file.to_json(self.fingerprints[side]), encoding="utf-8")
            return 0
        if "--compile-report" in cmd:
            path = Path(cmd[cmd.index("--compile-report") + 1])
            content = self.reports[side]
            if content is not None:
                path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
        return self.pytest_status[side]

    def capture(self, cmd, *, env: dict[str, str], cwd: Path | None = None) -> tuple[int, str, str]:
        cmd = [str(c) for c in cmd]
        self.commands.append((cmd, env))
        if cmd[1:3] == ["-c", "import peft"]:
            error = self.import_errors.get(self.side(cmd), "")
            return (1 if error else 0), "", error
        if cmd[1] == "-c" and "cuda" in cmd[2]:
            return 0, f"{self.cuda}\n", ""
        if cmd[1] == "-c":
            versions = {"'torch'": self.torch, "'transformers'": self.transformers}
            return 0, next((v for k, v in versions.items() if k in cmd[2]), "0.21.2") + "\n", ""
        if "compile_audit.artifacts.diff" in cmd:
            Path(cmd[cmd.index("--output") + 1]).write_text("## diff\n- planted\n", encoding="utf-8")
            return self.diff_status, "", self.diff_stderr
        return 0, "", ""

    def ran(self, *words: str) -> list[list[str]]:
        return [cmd for cmd, _ in self.commands if all(w in cmd for w in words)]

    def pytest_runs(self, side: str | None = None) -> list[list[str]]:
        runs = [cmd for cmd, _ in self.commands if cmd[1:3] == ["-m", "pytest"]]
        return [cmd for cmd in runs if side is None or self.side(cmd) == side]


@pytest.fixture
def run_gate(tmp_path, capsys, monkeypatch):
    """main() with a fake shell; returns (status, stdout, stderr lines)."""

    def run(shell: FakeShell, *extra: str, base: str = "peft==0.21.2", head: str = "peft==0.21.2"):
        monkeypatch.setattr(gate_selection, "select_between", lambda footprints, base, head: shell.selection)
        monkeypatch.setattr(gate_selection, "load_footprints", lambda path: shell.footprints)
        argv = ["--base", base, "--head", head, "--out", str(tmp_path / "out"), "--torch", "torch==2.13.0"]
        footprints = tmp_path / "footprints.json"
        footprints.write_text("{}", encoding="utf-8")
        argv += ["--work-dir", str(tmp_path / "work"), "--footprints", str(footprints), "--jobs", "1", *extra]
        status = gate.main(argv, shell=shell)
        captured = capsys.readouterr()
        return status, captured.out, captured.err.splitlines()

    return run


def head_fails(shell: FakeShell) -> FakeShell:
    shell.reports["head"] = report(FAILED)
    shell.pytest_status["head"] = 1
    return shell


# ----------------------------------------------------------------------------- arguments


def test_the_checkout_script_runs_the_gate():
    done = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, check=False, cwd="/")
    assert done.returncode == 0 and done.stdout.startswith("usage: scripts/gate --base SPEC"), done


def test_an_argument_error_names_the_program_it_was_run_as(capsys):
    assert gate.main(["--bogus"], shell=FakeShell(), prog="scripts/gate") == 2
    assert "(see scripts/gate --help)" in capsys.readouterr().err
    assert gate.main(["--bogus"], shell=FakeShell()) == 2
    assert "(see peft-compile-gate --help)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--base", "peft==0.21.2", "--head", "peft"], "the following arguments are required: --out"),
        (["--base", "torch==2.13.0", "--head", "peft", "--out", "o"], "--base: 'torch==2.13.0' is not a peft"),
        (["--base", "peftx==1", "--head", "peft", "--out", "o"], "--base: 'peftx==1' is not a peft requirement"),
        (["--base", "peft", "--head=--index-url=http://x", "--out", "o"], "--head: '--index-url=http://x' looks like"),
        (["--base", "peft", "--head", "  ", "--out", "o"], "--head: empty spec"),
        (["--base", "./no/such/peft", "--head", "peft", "--out", "o"], "--base: no such file or directory"),
        (["--base", "peft", "--head", "peft", "--out", "o", "--torch", "numpy"], "--torch: 'numpy' is not a torch"),
        (["--base", "peft", "--head", "peft", "--out", "o", "--", "--update-budgets"], "--update-budgets is not"),
        (["--base", "peft", "--head", "peft", "--out", "o", "--", "--compile-report=x.json"], "--compile-report is"),
        (["--base", "peft", "--head", "peft", "--out", "o", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, reason, capsys):
    assert gate.main(argv, shell=FakeShell()) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("gate: ") and reason in lines[0], lines[0]


def test_a_directory_without_a_project_is_refused(tmp_path, capsys):
    assert gate.main(["--base", str(tmp_path), "--head", "peft", "--out", "o"], shell=FakeShell()) == 2
    assert "is a directory without pyproject.toml or setup.py" in capsys.readouterr().err


@pytest.mark.parametrize(
    "spec",
    [
        "peft==0.21.2",
        "peft",
        "PEFT>=0.18,<1",
        "peft[dev]==0.21.2",
        "peft @ git+https://github.com/huggingface/peft@v0.21.2",
        "git+https://github.com/huggingface/peft@0a1b2c3d",
        "https://example.org/peft-0.21.2.tar.gz",
    ],
)
def test_peft_specs_pip_installs_are_accepted_unchanged(spec):
    assert gate_args.check_peft_spec("base", spec) == spec


def test_a_local_peft_path_is_made_absolute(tmp_path, monkeypatch):
    (tmp_path / "peft").mkdir()
    (tmp_path / "peft" / "pyproject.toml").write_text("", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert gate_args.check_peft_spec("head", "./peft") == str(tmp_path / "peft")


def test_default_torch_is_the_callers_version_without_its_local_label(monkeypatch):
    monkeypatch.setattr(gate_args.importlib.metadata, "version", lambda name: "2.13.0+cpu")
    assert gate_args.default_torch_spec() == "torch==2.13.0"


def test_no_torch_in_the_caller_and_no_torch_option_is_an_error(monkeypatch):
    def missing(name):
        raise gate_args.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(gate_args.importlib.metadata, "version", missing)
    with pytest.raises(gate_args.GateError, match="this Python has no torch to match: pass --torch"):
        gate_args.default_torch_spec()


def test_pytest_args_are_everything_after_the_double_dash():
    opts = gate_args.parse_args(
        ["--base", "peft", "--head", "peft", "--out", "o", "--torch", "torch", "--", "-k", "a --b"]
    )
    assert opts.pytest_args == ("-k", "a --b")


# ----------------------------------------------------------------------------- verdicts and exit-2 paths


def test_head_passing_on_the_budgets_versions_exits_0_without_base(run_gate):
    shell = FakeShell()
    status, out, err = run_gate(shell)
    assert (status, err) == (0, [])
    assert "head passed all 1 audited case(s) against the budgets" in out
    assert shell.pytest_runs("base") == [] and len(shell.ran("--target")) == 2  # base's source fetched, no more
    assert not [cmd for cmd in shell.ran("pip", "install") if "--target" not in cmd and shell.side(cmd) == "base"]


def test_base_runs_only_the_cases_head_failed_and_the_diff_judges(run_gate, tmp_path):
    shell = head_fails(FakeShell(diff_status=1))
    status, out, err = run_gate(shell)
    assert (status, err) == (1, [])
    assert "- planted" in out and "gate: head regressed" in out
    [base_run] = shell.pytest_runs("base")
    listing = tmp_path / "out" / "base-cases.txt"
    assert f"--cases={listing}" in base_run and listing.read_text().split() == [FAILED["id"]]
    [diff] = shell.ran("compile_audit.artifacts.diff")
    assert diff[diff.index("--output") - 1].endswith("head-compared.json")


def test_a_failure_on_base_too_is_no_regression(run_gate):
    status, out, _ = run_gate(head_fails(FakeShell(diff_status=0)))
    assert status == 0 and "gate: no regression" in out


def test_on_other_versions_than_the_budgets_base_runs_the_whole_selection(run_gate, tmp_path):
    shell = FakeShell()
    shell.transformers = "5.25.0"
    shell.reports["base"] = report(AUDITED)
    status, out, _ = run_gate(shell, "--unpinned")
    assert status == 0
    assert "installed versions are not the budgets' own (torch 2.13.0+cpu (recorded 2.13.0+cpu), transformers" in out
    [base_run] = shell.pytest_runs("base")
    assert f"--cases={tmp_path / 'out' / 'selected-cases.txt'}" in base_run
    assert (tmp_path / "work" / "head" / "constraints.txt").read_text().split() == ["torch==2.13.0+cpu"]  # no pin


def test_transformers_and_the_install_pins_are_pinned_unless_unpinned(run_gate, tmp_path):
    run_gate(FakeShell())
    constraints = (tmp_path / "work" / "head" / "constraints.txt").read_text().split()
    assert constraints[:2] == ["torch==2.13.0+cpu", "transformers==5.24.0"]
    assert "torchao==0.17.0" in constraints[2:]  # tests/install_pins.txt


def test_install_pins_are_requirements_without_comments(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "install_pins.txt").write_text("# why\n\nfoo==1.0  # because\nbar>=2\n")
    assert sides.install_pins(tmp_path) == ["foo==1.0", "bar>=2"]
    assert sides.install_pins(tmp_path / "nowhere") == []


def test_a_change_to_no_executed_code_runs_nothing_and_exits_0(run_gate, tmp_path):
    shell = FakeShell()
    shell.selection = Selection(False, (), ())
    status, out, err = run_gate(shell)
    assert (status, err) == (0, [])
    assert "no executed PEFT code differs" in out and "the change selects no compile case" in out
    assert shell.pytest_runs() == [] and not shell.ran("venv")  # no virtualenv built
    assert "Nothing regressed" in (tmp_path / "out" / "diff.md").read_text()


def test_a_change_no_recorded_case_ran_runs_nothing(run_gate):
    shell = FakeShell()
    shell.selection = Selection(
        False, (), ("peft/x.py::f: changed, run by no recorded case ...: none",), ("peft/x.py",)
    )
    status, out, _ = run_gate(shell)
    assert status == 0 and "no recorded case ran the changed code" in out and shell.pytest_runs() == []


@pytest.mark.parametrize("select", ["change", "default", "full"])
def test_a_spec_pip_cannot_install_fails_before_anything_heavy_with_pips_reason(run_gate, tmp_path, select):
    """Whatever --select: the default and the full matrix need no source, and still check both SPECs first."""
    shell = FakeShell()
    shell.failing_installs.add("peft==0.0.0.nonexistent")
    status, _, err = run_gate(shell, "--select", select, base="peft==0.0.0.nonexistent")
    assert status == 2
    assert err == [
        "gate: base: pip cannot install 'peft==0.0.0.nonexistent': ERROR: No matching distribution found for"
        f" peft==0.0.0.nonexistent (see {tmp_path / 'out' / 'base-install.log'})"
    ]
    assert not shell.ran("venv") and shell.pytest_runs() == []


# What pip 26 printed for a version an index lacks, and for a requirement it cannot parse (a backslash joins a line
# cut here for its length).
PIP_NO_VERSION = """$ python -m pip install --no-deps --no-compile --target /w/base/source peft==99.0.0
Looking in indexes: https://pypi.org/simple
WARNING: Location 'file:///opt/pypi-more/simple/peft/' is ignored: it is neither a file nor a directory.
ERROR: Could not find a version that satisfies the requirement peft==99.0.0 (from versions: 0.0.1, 0.0.2, 0.1.0, \
0.2.0, 0.3.0, 0.17.1, 0.18.0rc0, 0.18.0, 0.18.1, 0.19.0, 0.19.1, 0.20.0, 0.21.0, 0.21.1, 0.21.2)
ERROR: No matching distribution found for peft==99.0.0
"""
PIP_INVALID = """ERROR: Invalid requirement: 'peft==0.0.0.x': Expected comma (within version specifier), \
semicolon (after version specifier) or end
    peft==0.0.0.x
        ~~~~~~~^
"""


def test_pips_reason_is_its_error_lines_with_the_newest_versions_an_index_has():
    assert sides.pip_reason(PIP_NO_VERSION) == (
        "ERROR: Could not find a version that satisfies the requirement peft==99.0.0 (from versions: ..., 0.19.1,"
        " 0.20.0, 0.21.0, 0.21.1, 0.21.2); ERROR: No matching distribution found for peft==99.0.0"
    )
    assert sides.pip_reason(PIP_INVALID) == (
        "ERROR: Invalid requirement: 'peft==0.0.0.x': Expected comma (within version specifier), semicolon (after"
        " version specifier) or end"
    )
    assert sides.pip_reason("$ python -m pip install peft\n/usr/bin/python3: No module named pip\n") == (
        "/usr/bin/python3: No module named pip"
    )
    assert sides.pip_reason("") == "no output"
    assert len(sides.pip_reason("ERROR: " + "x" * 2000)) == 600


def test_an_install_failure_exits_2_naming_the_spec_and_its_log(run_gate, tmp_path):
    shell = FakeShell()
    shell.failing_installs.add("torch==2.13.0")
    status, _, err = run_gate(shell)
    assert status == 2
    log = tmp_path / "out" / "head-install.log"
    assert err == [f"gate: head: pip install failed for 'torch==2.13.0' (see {log})"]
    assert shell.pytest_runs() == []


def test_nothing_audited_exits_2_with_the_reason(run_gate, tmp_path):
    shell = FakeShell()
    shell.reports["head"] = report(SKIPPED)
    status, _, err = run_gate(shell)
    assert status == 2
    assert len(err) == 1
    assert err[0].startswith("gate: head: nothing audited: none of its 1 case(s) ran to an audit (1 skipped)")
    assert "first reason: GPU tier: CUDA is not available on this machine" in err[0]
    assert not shell.ran("compile_audit.artifacts.diff")


def test_a_known_failure_counts_as_audited(run_gate):
    shell = FakeShell()
    shell.reports["head"] = report({**AUDITED, "status": "xfailed"})
    status, out, _ = run_gate(shell)
    assert status == 0 and "head passed all 1 audited case(s)" in out


def test_an_empty_report_is_nothing_audited(run_gate):
    shell = FakeShell()
    shell.reports["head"] = report()
    status, _, err = run_gate(shell)
    assert status == 2
    assert err[0].startswith("gate: head: nothing audited: the report has no case")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "gate: head: pytest wrote no report"),
        ("{not json", "/out/head.json: cannot read the report"),
        ('{"cases": 3}', "/out/head.json: not a compile report this checkout reads (schema None"),
        ('{"schema": "compile-audit-report/3", "cases": 3}', "/out/head.json: 'cases' is not a list"),
        (json.dumps(report({**AUDITED, "audited": "yes"})), f"head.json: case {AUDITED['id']!r}: audited: expected"),
    ],
)
def test_an_unusable_report_exits_2(run_gate, content, reason):
    shell = FakeShell()
    shell.reports["head"] = content
    status, _, err = run_gate(shell)
    assert status == 2 and len(err) == 1 and reason in err[0], err
    assert content is None or err[0].startswith("gate: head: unusable report: ")


def test_a_stale_report_from_an_earlier_run_is_not_used(run_gate, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "head.json").write_text(json.dumps(report(AUDITED)), encoding="utf-8")
    shell = FakeShell()
    shell.reports["head"] = None
    status, _, err = run_gate(shell)
    assert status == 2 and "head: pytest wrote no report" in err[0]


@pytest.mark.parametrize(("pytest_status", "reason"), [(4, "usage error"), (5, "no tests collected"), (2, "interrupt")])
def test_pytest_ending_other_than_pass_or_fail_exits_2(run_gate, pytest_status, reason):
    shell = head_fails(FakeShell())
    shell.pytest_status["base"] = pytest_status
    status, _, err = run_gate(shell)
    assert status == 2
    assert err[0].startswith(f"gate: base: pytest exited {pytest_status} ({reason}")


INDENTATION = """Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/w/head/venv/lib/python3.11/site-packages/peft/__init__.py", line 17, in <module>
    from .tuners import LoraConfig
  File "/w/head/venv/lib/python3.11/site-packages/peft/tuners/lora/layer.py", line 246
    torch._dynamo.graph_break()
IndentationError: unexpected indent
"""


def test_a_head_that_does_not_import_is_a_regression_naming_the_error_and_its_line(run_gate, tmp_path):
    shell = FakeShell()
    shell.pytest_status["head"] = 4  # pytest's usage error: the conftest could not import peft
    shell.import_errors["head"] = INDENTATION
    status, out, err = run_gate(shell)
    assert status == 1 and err == [], (out, err)
    expected = "IndentationError: unexpected indent at peft/tuners/lora/layer.py:246"
    assert f"head regressed: its PEFT does not import: {expected}" in out
    assert expected in (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert not shell.pytest_runs("base")


def test_pytest_failing_to_start_on_a_head_that_imports_is_still_exit_2(run_gate):
    shell = FakeShell()
    shell.pytest_status["head"] = 4
    status, _, err = run_gate(shell)
    assert status == 2 and err[0].startswith("gate: head: pytest exited 4 (usage error")


def test_the_gpu_tier_without_cuda_exits_2_naming_the_skip(run_gate):
    """No -m parser: a side whose GPU cases all skipped audited nothing, and check_report says why."""
    shell = FakeShell(cuda=False)
    shell.reports = {"base": report(SKIPPED), "head": report(SKIPPED)}
    status, _, err = run_gate(shell, "--select", "default", "--", "-m", "gpu")
    assert status == 2
    assert "head: nothing audited" in err[0] and "CUDA is not available" in err[0]


def test_the_gpu_tier_with_cuda_runs(run_gate):
    shell = head_fails(FakeShell(cuda=True))
    status, _, _ = run_gate(shell, "--select", "default", "--", "-m", "gpu")
    assert status == 0
    assert [cmd[-2:] for cmd in shell.pytest_runs()] == [["-m", "gpu"]] * 2


def test_a_diff_that_cannot_read_the_reports_exits_2(run_gate):
    shell = head_fails(
        FakeShell(diff_status=2, diff_stderr="compile_audit.artifacts.diff: head.json: no case audited\n")
    )
    status, _, err = run_gate(shell)
    assert status == 2
    assert err == [
        "gate: diff: python -m compile_audit.artifacts.diff exited 2:"
        " compile_audit.artifacts.diff: head.json: no case audited"
    ]


def test_an_unexpected_failure_exits_2_never_1(run_gate, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(gate, "snapshot_checkout", broken)
    status, _, err = run_gate(FakeShell())
    assert (status, err) == (2, ["gate: OSError: disk full"])


def test_a_work_dir_that_is_not_empty_is_refused(run_gate, tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "old").touch()
    status, _, err = run_gate(FakeShell())
    assert status == 2 and "is not empty (the venvs must be fresh)" in err[0]


# ----------------------------------------------------------------------------- what each side gets


def test_base_installs_exactly_the_torch_head_got(run_gate):
    shell = head_fails(FakeShell(torch="2.13.0+cpu"))
    run_gate(shell)
    torch_installs = [cmd[-1] for cmd in shell.ran("pip", "install") if cmd[-1].startswith("torch")]
    assert torch_installs == ["torch==2.13.0", "torch==2.13.0+cpu"]
    assert all("-c" in cmd for cmd in shell.ran("pip", "install", "peft==0.21.2") if "--target" not in cmd)


def test_each_side_has_its_own_venv_and_inductor_cache_and_none_of_the_callers_python_path(run_gate, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/caller/site")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/caller/inductor")
    shell = head_fails(FakeShell())
    run_gate(shell)
    envs = {shell.side(cmd): env for cmd, env in shell.commands if cmd[1:3] == ["-m", "pytest"]}
    assert envs["base"]["TORCHINDUCTOR_CACHE_DIR"] != envs["head"]["TORCHINDUCTOR_CACHE_DIR"]
    for side, env in envs.items():
        assert env["TORCHINDUCTOR_CACHE_DIR"].endswith(f"/work/{side}/inductor-cache")
        assert env["VIRTUAL_ENV"].endswith(f"/work/{side}/venv")
        assert env["PYTHONPATH"].endswith("/work/gate")  # the snapshot, nothing of the caller's


def test_the_rerun_of_failed_cases_happens_only_on_request_and_only_when_head_failed(run_gate, tmp_path):
    shell = head_fails(FakeShell(diff_status=1))
    run_gate(shell, "--rerun-failed", "--", "-x")
    reruns = [(cmd, env) for cmd, env in shell.commands if "--last-failed" in cmd]
    assert len(reruns) == 1
    cmd, env = reruns[0]
    assert shell.side(cmd) == "head" and cmd[-1] == "-x" and "--compile-report" not in cmd
    assert env["TORCH_LOGS"] == "graph_breaks,recompiles_verbose"
    assert env["TORCH_TRACE"] == str(tmp_path / "out" / "torch-trace")


def test_no_rerun_when_head_passed(run_gate, tmp_path):
    shell = FakeShell(diff_status=0)
    run_gate(shell, "--rerun-failed")
    assert not [cmd for cmd, _ in shell.commands if "--last-failed" in cmd]


def test_head_runs_on_as_many_processes_as_jobs_but_no_more_than_cases(run_gate):
    shell = FakeShell()
    shell.selection = dataclasses.replace(ONE_CASE, cases=("a/b/c", "d/e/f"))
    run_gate(shell, "--jobs", "4")
    [head_run] = shell.pytest_runs("head")
    assert head_run[head_run.index("-n") + 1] == "2"  # two selected cases


def test_the_snapshot_leaves_out_venvs_version_control_caches_and_the_output(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    kept = ("pyproject.toml", "gate_tools/gate.py", "tests/out/kept.txt")
    for path in (*kept, ".git/HEAD", ".ci-venv/pyvenv.cfg", "tests/__pycache__/x.pyc", "out/r.json", "x.egg-info/P"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).touch()
    (repo / "reports" / "gate").mkdir(parents=True)
    monkeypatch.setattr(gate, "REPO", repo)
    copy = gate.snapshot_checkout(tmp_path / "copy", skip=[repo / "reports" / "gate"])
    found = sorted(str(p.relative_to(copy)) for p in copy.rglob("*"))
    assert found == ["gate_tools", "gate_tools/gate.py", "pyproject.toml", "reports", "tests", "tests/out", *kept[2:]]


# ----------------------------------------------------------------------------- selection by change


def test_a_change_runs_exactly_its_cases_and_says_why(run_gate, tmp_path):
    shell = FakeShell()
    shell.selection = Selection(
        False,
        ("llama-tiny/ia3/merge-unmerge", "opt-tiny/ia3/save-load"),
        ("peft/tuners/ia3/layer.py::Linear.merge: changed: run by 2 case(s)",),
        ("peft/tuners/ia3/layer.py",),
    )
    status, out, _ = run_gate(shell)
    assert status == 0
    listed = tmp_path / "out" / "selected-cases.txt"
    assert listed.read_text().split() == ["llama-tiny/ia3/merge-unmerge", "opt-tiny/ia3/save-load"]
    [head_run] = shell.pytest_runs("head")
    assert f"--cases={listed}" in head_run and "--full-matrix" not in head_run
    assert "peft/tuners/ia3/layer.py::Linear.merge: changed: run by 2 case(s)" in out
    assert "so 2 case(s) run" in (tmp_path / "out" / "selection.md").read_text()


BUILT = ("llama-tiny/lora/save-load", "opt-tiny/lora/save-load")
BUILD_CHANGE = Selection(
    False,
    ("llama-tiny/lora/merge-unmerge", *BUILT),
    ("peft/peft_model.py::PeftModel.__init__: changed: run by 3 case(s) (2 of them only while building their model)",),
    ("peft/peft_model.py",),
    build_only=BUILT,
)


def _fingerprint(digest: str) -> dict:
    return {"digest": digest, "modules": [{"type": "M", "modules": {".": digest}}], "package_values": {}}


def test_cases_reached_only_while_building_run_only_where_the_builds_differ(run_gate, tmp_path):
    shell = FakeShell()
    shell.selection = BUILD_CHANGE
    shell.fingerprints["base"] = {BUILT[0]: _fingerprint("a"), BUILT[1]: _fingerprint("b")}
    shell.fingerprints["head"] = {BUILT[0]: _fingerprint("a"), BUILT[1]: _fingerprint("c")}
    status, _, _ = run_gate(shell)
    assert status == 0
    for side in ("base", "head"):  # each side fingerprinted once, before head's run
        assert len(shell.ran(f"--build-fingerprints={tmp_path / 'out' / f'{side}-builds.json'}")) == 1
    listed = tmp_path / "out" / "selected-cases.txt"
    assert listed.read_text().split() == ["llama-tiny/lora/merge-unmerge", "opt-tiny/lora/save-load"]
    [head_run] = [cmd for cmd in shell.pytest_runs("head") if "--compile-report" in cmd]
    assert f"--cases={listed}" in head_run
    selection_md = (tmp_path / "out" / "selection.md").read_text()
    assert "builds compared for 2 case(s): 1 built the same (not run)" in selection_md
    assert "runs: opt-tiny/lora/save-load: built differently: M '.' differs" in selection_md


def test_when_every_selected_case_builds_the_same_nothing_runs(run_gate, tmp_path):
    shell = FakeShell()
    shell.selection = dataclasses.replace(BUILD_CHANGE, cases=BUILT)
    shell.fingerprints["base"] = shell.fingerprints["head"] = {case: _fingerprint("a") for case in BUILT}
    status, _, _ = run_gate(shell)
    assert status == 0
    assert not [cmd for cmd in shell.pytest_runs() if "--compile-report" in cmd]
    assert "built the same model on both sides" in (tmp_path / "out" / "diff.md").read_text()


def test_builds_that_differ_only_by_the_keys_the_change_adds_do_not_run(run_gate, tmp_path):
    """A new method's registration adds a key to PEFT's tables on head: builds equal but for that key are the same
    (the selection runs the code going over the table), and selection.md says so."""
    shell = FakeShell()
    shell.selection = dataclasses.replace(BUILD_CHANGE, cases=BUILT, tables_gaining=("MAPPING",))
    for side, entries in (("base", {"'lora'": "1"}), ("head", {"'lora'": "1", "'newm'": "2"})):
        shell.fingerprints[side] = {
            case: {
                **_fingerprint("a"),
                "digest": side,  # the tables differ, the modules do not
                "package_values": {"peft.mapping.MAPPING": side},
                "package_entries": {"peft.mapping.MAPPING": entries},
            }
            for case in BUILT
        }
    status, _, _ = run_gate(shell)
    assert status == 0
    assert not [cmd for cmd in shell.pytest_runs() if "--compile-report" in cmd]
    selection_md = (tmp_path / "out" / "selection.md").read_text()
    assert "2 built the same (not run), 2 of them but for what the change adds (keys of MAPPING" in selection_md


def test_a_side_that_cannot_fingerprint_keeps_every_case(run_gate, tmp_path):
    shell = FakeShell()
    shell.selection = BUILD_CHANGE
    shell.fingerprints["head"] = {case: _fingerprint("a") for case in BUILT}  # base wrote none
    run_gate(shell)
    listed = (tmp_path / "out" / "selected-cases.txt").read_text().split()
    assert listed == ["llama-tiny/lora/merge-unmerge", *BUILT]


def test_a_change_that_selects_everything_runs_the_full_matrix(run_gate):
    shell = FakeShell()
    shell.selection = Selection(True, (), ("peft/x.py: does not parse: ...: every case",), ("peft/x.py",))
    status, out, _ = run_gate(shell)
    assert status == 0
    assert all("--full-matrix" in cmd for cmd in shell.pytest_runs())
    assert "so the full matrix runs" in out


def test_the_selection_is_chosen_by_the_gate_not_by_pytest_args(run_gate):
    status, _, err = run_gate(FakeShell(), "--", "--full-matrix")
    assert status == 2 and "the gate chooses: --select, --shard" in err[-1]


def test_a_shard_runs_its_part_of_the_selection(run_gate, tmp_path):
    shell = head_fails(FakeShell())
    shell.reports["base"] = report()  # a shard may audit nothing: the merged report is checked
    run_gate(shell, "--shard", "2/3")
    runs = shell.pytest_runs("head")
    assert len(runs) == 1
    for cmd in runs:
        assert cmd[cmd.index("--splits") + 1] == "3" and cmd[cmd.index("--group") + 1] == "2"
        assert cmd[cmd.index("--durations-path") + 1].endswith("tests/durations.json")
    assert "shard 2 of 3" in (tmp_path / "out" / "selection.md").read_text()


@pytest.mark.parametrize("shard", ["0/3", "4/3", "two"])
def test_a_bad_shard_is_refused(run_gate, shard):
    status, _, err = run_gate(FakeShell(), "--shard", shard)
    assert status == 2 and "--shard: " in err[-1]


@pytest.mark.parametrize(("base_version", "noted"), [("0.22.0.dev0", True), ("0.21.2", False)])
def test_footprints_recorded_on_another_peft_than_base_are_noted(run_gate, monkeypatch, base_version, noted):
    shell = FakeShell()
    shell.footprints = Footprints((), {}, {"peft": "0.21.2"})
    monkeypatch.setattr(gate_selection, "_source_version", lambda package: base_version)
    status, out, _ = run_gate(shell)
    assert status == 0
    assert ("the footprints were recorded on peft 0.21.2, base is 0.22.0.dev0" in out) is noted


@pytest.mark.parametrize(
    "record",
    [
        {**AUDITED, "status": "xfailed"},  # a known failure: what it names held, nothing else was found
        {"id": AUDITED["id"], "status": "passed", "phases": [{"name": "train-1"}]},  # no "audited": its phases say
    ],
)
def test_the_gate_counts_as_audited_what_the_report_does(tmp_path, record):
    side = sides.Side("head", "peft", tmp_path, tmp_path / "work")
    side.report.write_text(json.dumps(report(record)))
    assert sides.check_report(side) == 1 == read_cases(side.report).audited_count


def test_audit_selection_runs_a_seeded_sample_outside_the_selection_and_a_changed_verdict_there_fails(
    run_gate, tmp_path
):
    shell = FakeShell()
    ids = [f"m/{i}/x" for i in range(10)]
    shell.footprints = Footprints(tuple(ids), {})
    shell.selection = Selection(False, ("m/0/x",), ("a change",), ("peft/x.py",))
    # Head fails every case the change left out, base passes them: each one sampled is a miss.
    shell.reports = {
        "base": report(*({**AUDITED, "id": case} for case in ids)),
        "head": report({**AUDITED, "id": "m/0/x"}, *({**FAILED, "id": case} for case in ids[1:])),
    }
    shell.pytest_status["head"] = 1
    status, out, _ = run_gate(shell, "--audit-selection", "3", "--audit-seed", "1")
    sample = (tmp_path / "out" / "audit-cases.txt").read_text().split()
    assert len(sample) == 3 and "m/0/x" not in sample
    assert (tmp_path / "out" / "selected-cases.txt").read_text().split() == ["m/0/x", *sample]
    assert status == 1 and f"selection missed 3 case(s) whose verdict changed: {', '.join(sample)}" in out
    assert "## Selection missed (3)" in (tmp_path / "out" / "diff.md").read_text()
    # Seeded: the same sample again.
    argv = ["--base", "peft==0.21.2", "--head", "peft==0.21.2", "--out", str(tmp_path / "again")]
    opts = gate_args.parse_args([*argv, "--audit-selection", "3", "--audit-seed", "1"])
    opts.out.mkdir()
    assert gate_selection.audit_sample(opts, shell.footprints, shell.selection) == sample


NEW_CASE = {**AUDITED, "id": "llama-tiny/hracopy/train-eval-train", "derived": True}


def test_a_change_adding_a_method_runs_its_new_cases_on_head_alone(run_gate, tmp_path):
    shell = FakeShell()
    shell.selection = dataclasses.replace(ONE_CASE, new_cases=True, new_methods=1)
    layer = "peft/tuners/hracopy/layer.py"
    root = {"identity": f"{layer} in forward: gb0025", "location": f"{layer}:246", "function": "forward",
            "reason": "Call to `torch._dynamo.graph_break()`", "hits": 1}  # fmt: skip
    failing = {**NEW_CASE, "status": "failed", "graph_breaks": {"count": 1, "roots": [root]}}
    shell.reports["head"] = report(AUDITED, failing)
    shell.pytest_status["head"] = 1
    status, out, err = run_gate(shell)
    assert status == 1 and err == [], (out, err)
    assert "--new-cases" in shell.pytest_runs("head")[0]
    assert "head: 1 new case(s), of a method base lacks, judged on head alone: llama-tiny/hracopy" in out
    assert not shell.pytest_runs("base")  # base lacks the method: nothing of it to run there
    diff = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert "llama-tiny/hracopy/train-eval-train" in diff
    assert "root `peft/tuners/hracopy/layer.py:246` in `forward`" in diff


def test_new_cases_that_pass_need_no_base(run_gate):
    shell = FakeShell()
    shell.selection = dataclasses.replace(ONE_CASE, new_cases=True, new_methods=1)
    shell.reports["head"] = report(AUDITED, NEW_CASE)
    status, out, _ = run_gate(shell)
    assert status == 0 and "1 new case(s), of a method base lacks" in out and not shell.pytest_runs("base")


def test_code_in_new_files_but_no_new_method_runs_nothing_and_exits_0(run_gate):
    shell = FakeShell()
    shell.selection = Selection(
        False, (), ("peft/utils/new_helper.py: added ...",), ("peft/utils/new_helper.py",), True
    )
    shell.pytest_status["head"] = 5  # --new-cases alone: no derived method, nothing collected
    shell.reports["head"] = None
    status, out, err = run_gate(shell)
    assert status == 0 and err == [], (out, err)
    assert "head adds no method the registry lacks" in out


@pytest.mark.parametrize(
    ("jobs", "pytest_args", "expected"),
    [
        (1, (), ["-n", "1", "--max-worker-restart=8"]),  # a worker of its own: a case that dies costs only it
        (4, (), ["-n", "4", "--max-worker-restart=8"]),
        (1, ("-m", "gpu"), []),  # pytest-benchmark times the GPU tier's steps, and is off under xdist
        (2, ("-m", "gpu"), ["-n", "2", "--max-worker-restart=8"]),
    ],
)
def test_every_side_runs_its_cases_on_workers_that_are_replaced_when_they_die(jobs, pytest_args, expected):
    opts = gate_args.parse_args(
        ["--base", "peft", "--head", "peft", "--out", "o", "--jobs", str(jobs), "--", *pytest_args]
    )
    assert sides.pytest_jobs(opts, 5) == expected


# ----------------------------------------------------------------------------- what both sides share


class ShellWithTheDiff(FakeShell):
    """The fake shell, with the real diff (compile_audit.artifacts.diff) run in this process."""

    def capture(self, cmd, *, env: dict[str, str], cwd: Path | None = None) -> tuple[int, str, str]:
        cmd = [str(c) for c in cmd]
        if "compile_audit.artifacts.diff" not in cmd:
            return super().capture(cmd, env=env, cwd=cwd)
        self.commands.append((cmd, env))
        return diff.main(cmd[cmd.index("compile_audit.artifacts.diff") + 1 :]), "", ""


TORCHAO = "cannot import name 'LinearActivationQuantizedTensor' from 'torchao.quantization'"
TOKENS = ("bert-tiny/trainable-tokens/train-eval-train", "bert-tiny/trainable-tokens/save-load")


def raised(case_id: str, side: str, error: str = TORCHAO, kind: str = "ImportError") -> dict:
    """A case whose body raised before anything compiled, as each side's virtualenv words it."""
    path = f"/tmp/compile-gate-1/{side}/venv/lib/python3.11/site-packages/torchao/quantization/__init__.py"
    return {"id": case_id, "status": "failed", "audited": False, "raised": kind, "error": f"{error} ({path})"}


def fail_on_head(shell: FakeShell, base_error: str = TORCHAO) -> FakeShell:
    shell.selection = dataclasses.replace(ONE_CASE, cases=TOKENS)
    shell.reports = {
        "head": report(*(raised(case, "head") for case in TOKENS)),
        "base": report(*(raised(case, "base", base_error) for case in TOKENS)),
    }
    shell.pytest_status = {"head": 1, "base": 1}
    return shell


def test_cases_that_fail_alike_on_both_sides_are_no_regression_and_named(run_gate, tmp_path):
    """peft#3559: every case head ran fails with the ImportError of a torchao this PEFT does not support, and base
    fails them alike; neither side audited anything. A verdict all the same (exit 0, never 'nothing audited'), and
    diff.md says, first, that they judge nothing of this change and which library would not import."""
    shell = fail_on_head(ShellWithTheDiff())
    status, out, err = run_gate(shell)
    assert (status, err) == (0, []), (out, err)
    assert "base: only the 2 case(s) head failed" in out and "gate: no regression" in out
    verdict = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8").splitlines()[2]
    assert verdict.startswith("no changes; 2 case(s) fail on both sides and judge nothing of this change (2 of them")
    assert "cannot import `torchao` on either side: the environment's failure, not this change's" in verdict
    assert f"- **{TOKENS[0]}**: failed: `ImportError: {TORCHAO}" in out


def test_a_case_that_fails_on_base_otherwise_is_heads_regression(run_gate, tmp_path):
    shell = fail_on_head(ShellWithTheDiff(), base_error="No module named 'torchao'")
    status, out, err = run_gate(shell)
    assert (status, err) == (1, []), (out, err)
    assert f"- **{TOKENS[0]}**: fails on both sides, differently" in out and "gate: head regressed" in out


def test_what_head_skipped_or_never_recorded_is_named_beside_a_clean_verdict(run_gate, tmp_path):
    """Head passes what it audited; of the selection, one case skipped and one has no record (it never reached its
    audit): exit 0, and diff.md names both."""
    shell = ShellWithTheDiff()
    selected = (AUDITED["id"], SKIPPED["id"], "llama-tiny/lora/save-load")
    shell.selection = dataclasses.replace(ONE_CASE, cases=selected)
    shell.reports["head"] = report(AUDITED, SKIPPED)
    status, out, _ = run_gate(shell)
    assert status == 0
    assert "base not needed); 1 skipped on head; 1 could not run (no record)" in out
    written = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert f"- **{SKIPPED['id']}**: GPU tier: CUDA is not available on this machine" in written
    assert "- **llama-tiny/lora/save-load**" in written


@pytest.mark.parametrize(("pytest_args", "exact"), [((), True), (("--", "-k", "save"), False)])
def test_the_diff_names_selected_cases_without_a_record_only_where_the_gate_knows_what_ran(
    run_gate, tmp_path, pytest_args, exact
):
    """The selection's list is what pytest ran unless the caller's pytest args (or a shard) narrow it."""
    shell = fail_on_head(ShellWithTheDiff())
    shell.selection = dataclasses.replace(ONE_CASE, cases=(*TOKENS, "llama-tiny/lora/save-load"))
    status, out, _ = run_gate(shell, *pytest_args)
    assert status == 0 and "2 case(s) fail on both sides" in out
    assert ("1 could not run (no record)" in out) is exact
    [command] = shell.ran("compile_audit.artifacts.diff")
    selected = [command[command.index("--selected") + 1]] if "--selected" in command else []
    assert selected == ([str(tmp_path / "out" / "selected-unrecorded-on-head.txt")] if exact else [])


def test_cases_head_passed_are_not_named_as_never_run_when_base_reruns_only_its_failures(run_gate, tmp_path):
    """peft#3514: head passes most of the selection and fails 21 cases that base fails alike; base reruns only those,
    so the diff sees head's report cut to them. The cases head passed were judged by the budgets: not 'could not
    run'. One selected case that no report holds still is."""
    shell = fail_on_head(ShellWithTheDiff())
    shell.selection = dataclasses.replace(ONE_CASE, cases=(*TOKENS, AUDITED["id"], "llama-tiny/lora/save-load"))
    shell.reports["head"] = report(*(raised(case, "head") for case in TOKENS), AUDITED)
    status, out, _ = run_gate(shell)
    assert status == 0 and "2 case(s) fail on both sides" in out
    assert "1 could not run (no record)" in out
    written = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert "- **llama-tiny/lora/save-load**" in written and f"- **{AUDITED['id']}**" not in written


def test_changed_code_no_case_runs_is_listed_as_not_judged_in_selection_md_and_diff_md(run_gate, tmp_path):
    shell = FakeShell()
    reason = "toy/conv.py::Conv.forward: changed at its entry: run by 0 case(s)"
    shell.selection = Selection(False, (), (reason,), ("toy/conv.py",), unjudged=(reason,))
    status, out, _ = run_gate(shell)
    assert status == 0
    assert "not judged: 1 change(s) that no recorded case runs" in (tmp_path / "out" / "selection.md").read_text()
    diff = (tmp_path / "out" / "diff.md").read_text()
    assert f"## Not judged: changed code no compile case runs (1)\n\n- {reason}\n" in diff
    assert "not judged: the changed code no compile case runs is listed" in out


def test_why_names_the_rules_and_changes_that_selected_a_case_and_what_the_build_comparison_decided(tmp_path, capsys):
    from compile_audit.selection.change_selection import Decision, Selection
    from gate_tools import why

    selection = Selection(
        False,
        ("m/lora/hotswap", "m/lora/train"),
        ("peft/utils/hotswap.py::prepare: changed", "peft/x.py: `A = 1`: readers"),
        build_only=("m/lora/hotswap",),
        decisions=(
            Decision(
                "changed-statements",
                "peft/utils/hotswap.py::prepare: changed",
                ("m/lora/hotswap",),
                ("m/lora/hotswap",),
            ),
            Decision("module-name-readers", "peft/x.py: `A = 1`: readers", ("m/lora/train",)),
        ),
    )
    why.write_selection(tmp_path, selection)
    why.write_builds(tmp_path, [], {"m/lora/hotswap": "built differently: check hot-swap preparation #0 differs"})
    (tmp_path / why.SELECTED).write_text("m/lora/hotswap\nm/lora/train\n")
    assert gate.main(["--why", "m/lora/hotswap", "--out", str(tmp_path)], prog="scripts/gate") == 0
    out = capsys.readouterr().out
    assert "selected only while building its model by rule changed-statements: peft/utils/hotswap.py::prepare" in out
    assert "build comparison: runs: built differently: check hot-swap preparation #0 differs" in out
    assert "so it ran on both sides" in out
    why.write_builds(tmp_path, ["m/lora/hotswap"], {})
    (tmp_path / why.SELECTED).write_text("m/lora/train\n")
    lines = why.explain(tmp_path, "m/lora/hotswap")
    assert lines[-2].startswith("build comparison: built the same") and lines[-1] == "so it did not run"
    assert why.explain(tmp_path, "m/ia3/train")[0].startswith("not selected: no change reaches it")
    assert gate.main(["--why", "m/a/b", "--out", str(tmp_path / "none")], prog="scripts/gate") == 2


# ----------------------------------------------------------------------------- decided on head

PLANTED_LINE = "torch._dynamo.graph_break()  # planted"
LAYER_ROOT = {
    "identity": "peft/tuners/lora/layer.py in forward: gb0025",
    "location": "peft/tuners/lora/layer.py:3",
    "function": "forward",
    "reason": "Call to `torch._dynamo.graph_break()`: User-inserted graph break.",
    "source": PLANTED_LINE,
}
OVER_BUDGET = {"kind": "over budget", "held": False, "summary": "over budget: graph breaks: 1 > budget 0"}


def breaking_on_head(shell: FakeShell, *, base_version: str = "0.21.2", base_has_line: bool = False) -> FakeShell:
    """Head fails its budget with a root at LAYER_ROOT's line; base is `base_version`, its layer.py with or without
    that line."""
    broken = {**FAILED, "audited": True, "graph_breaks": {"count": 1, "roots": [LAYER_ROOT]}, "problems": [OVER_BUDGET]}
    shell.reports["head"] = report(broken)
    shell.pytest_status["head"] = 1
    base_layer = "def forward(x):\n    " + (PLANTED_LINE if base_has_line else "pass") + "\n    return x\n"
    shell.sources["base"] = {"__init__.py": f'__version__ = "{base_version}"\n', "tuners/lora/layer.py": base_layer}
    return shell


def test_a_break_at_a_line_base_lacks_is_a_regression_without_a_base_run(run_gate, tmp_path):
    shell = breaking_on_head(FakeShell())
    status, out, err = run_gate(shell)
    assert (status, err) == (1, []), out
    assert not shell.pytest_runs("base")
    assert "base: not run: 1 case(s) broke at a line base does not have" in out
    diff = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert "Head regressed: breaks at lines base does not have." in diff
    assert "root `peft/tuners/lora/layer.py:3` in `forward`" in diff and PLANTED_LINE in diff
    assert f"- **{FAILED['id']}**: failed, graph breaks 1 — **regression**" in diff


@pytest.mark.parametrize(
    ("base_version", "base_has_line"),
    [("0.21.2", True), ("0.22.0.dev0", False)],
    ids=["base-has-the-line", "base-not-the-budgets-release"],
)
def test_base_runs_the_failure_where_it_could_have_that_break(run_gate, base_version, base_has_line):
    shell = breaking_on_head(FakeShell(diff_status=0), base_version=base_version, base_has_line=base_has_line)
    status, out, _ = run_gate(shell)
    assert status == 0 and "broke at a line" not in out
    assert len(shell.pytest_runs("base")) == 1


def test_cases_decided_on_head_join_the_diff_of_those_base_ran(run_gate, tmp_path):
    shell = breaking_on_head(FakeShell(diff_status=0))
    other = {**FAILED, "id": "llama-tiny/lora/save-load", "problems": [{"kind": "check", "names": ["saved adapter"]}]}
    shell.reports["head"]["cases"].append(other)
    status, out, _ = run_gate(shell)
    assert status == 1, out
    assert len(shell.pytest_runs("base")) == 1
    assert (tmp_path / "out" / "base-cases.txt").read_text().split() == [other["id"]]
    diff = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert "- planted" in diff and "## Breaks at lines base does not have (1 root(s), 1 case(s), base not run)" in diff
