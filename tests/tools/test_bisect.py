"""bisect (gate_tools.bisect) without installing anything: the search over fake oracles, signatures, release lists,
argument errors, the scratch venv's commands, and git mode over a five-commit history built here, with a
break planted in one commit (a fake lab reads the exported tree instead of running the case)."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from gate_tools.bisect import cli, releases, search, signature
from gate_tools.bisect.driver import BisectError, Candidate, Change, Measurement, NoChange, find_change
from gate_tools.bisect.lab import Lab, case_selection, error_line
from gate_tools.bisect.search import BAD, GOOD, SKIP, Verdict
from tests.selftest import fake_reports as fake

pytestmark = pytest.mark.selftest

REPO_ROOT = Path(__file__).resolve().parents[2]
CASE = "llama-tiny/lora-dora/train-eval-train"
DORA_REASON = "Unsupported method call: Dynamo does not know how to trace method `startswith` of class `str`"
DORA_SOURCE = 'elif type(module.weight).__module__.startswith("torchao."):'
EVAL = fake.recompile("eval-1", fake.EVAL_RECOMPILE, expected=True)
TYPE_ID = fake.recompile("train-1", fake.TYPE_ID_RECOMPILE, expected=False, frame=fake.DEPRECATION_FRAME)


def clean_case(**kwargs) -> dict:
    return copy.deepcopy(fake.case(CASE, recompiles=[EVAL], **kwargs))


def dora_case(occurrences: int = 13, line: int = 90, status: str = "failed") -> dict:
    breaks = [fake.brk(f"peft/utils/integrations.py:{line}", DORA_REASON, DORA_SOURCE, occurrences)]
    return copy.deepcopy(fake.case(CASE, status, breaks=breaks, recompiles=[EVAL, TYPE_ID]))


# The hand-written cases above, read as the lab reads the report of a run.


def signature_of(case: dict) -> signature.Signature:
    return signature.signature_of(fake.record(case))


def evidence(before: dict, after: dict) -> list[str]:
    return signature.evidence(fake.record(before), fake.record(after))


def untestable_reason(case: dict | None) -> str | None:
    return signature.untestable_reason(None if case is None else fake.record(case))


def measurement_of(case: dict | None) -> Measurement:
    return Measurement.of_case(None if case is None else fake.record(case))


# ----------------------------------------------------------------------------- the search


def oracle_for(first_bad: int, skipped: frozenset[int] = frozenset(), asked: list[int] | None = None):
    def oracle(index: int) -> Verdict:
        if asked is not None:
            asked.append(index)
        if index in skipped:
            return Verdict(SKIP, "install failed")
        return Verdict(BAD if index >= first_bad else GOOD)

    return oracle


@pytest.mark.parametrize("count", range(2, 12))
def test_bisect_finds_every_first_bad_in_log_steps(count):
    for first_bad in range(1, count):
        asked: list[int] = []
        outcome = search.bisect(count, oracle_for(first_bad, asked=asked))
        assert outcome.first_bad == first_bad
        assert outcome.last_good == first_bad - 1
        assert 0 not in asked and count - 1 not in asked  # the endpoints are known
        assert len(asked) == len(set(asked)) <= math.ceil(math.log2(count - 1))


def test_bisect_steps_around_a_skipped_candidate():
    asked: list[int] = []
    outcome = search.bisect(10, oracle_for(7, skipped=frozenset({4, 5}), asked=asked))
    assert outcome.first_bad == 7
    assert outcome.verdicts[4].kind == SKIP and outcome.verdicts[4].detail == "install failed"
    assert len(asked) == len(set(asked))  # a skipped candidate is never asked again


def test_bisect_lists_suspects_when_a_skip_hides_the_first_bad():
    outcome = search.bisect(6, oracle_for(3, skipped=frozenset({2})))
    assert outcome.first_bad is None
    assert outcome.suspects == [2, 3]
    assert outcome.last_good == 1


def test_bisect_all_skipped_leaves_every_candidate_suspect():
    outcome = search.bisect(5, oracle_for(4, skipped=frozenset({1, 2, 3})))
    assert outcome.first_bad is None
    assert outcome.suspects == [1, 2, 3, 4]


def test_bisect_of_adjacent_endpoints_names_bad_without_asking():
    asked: list[int] = []
    assert search.bisect(2, oracle_for(1, asked=asked)).first_bad == 1
    assert asked == []


def test_bisect_rejects_fewer_than_two_candidates_and_unknown_verdicts():
    with pytest.raises(ValueError, match="needs a good and a bad candidate, got 1"):
        search.bisect(1, oracle_for(1))
    with pytest.raises(ValueError, match="verdict must be"):
        Verdict("maybe")


# ----------------------------------------------------------------------------- signatures


def test_signature_counts_breaks_guards_and_status():
    assert signature_of(dora_case()) != signature_of(clean_case())
    assert signature_of(dora_case(occurrences=7)) != signature_of(dora_case(occurrences=13))
    assert signature_of(dora_case(status="passed")) != signature_of(dora_case())
    assert signature_of(dora_case()).breaks == {"peft/utils/integrations.py in forward: Unsupported method call"}


def test_signature_ignores_line_numbers_and_ids():
    moved = dora_case(line=95)
    assert signature_of(moved) == signature_of(dora_case())
    other_id = json.loads(json.dumps(dora_case()).replace("94059199957264", "1234"))
    assert signature_of(other_id) == signature_of(dora_case())


def test_signature_sees_a_new_root_with_unchanged_counts():
    other = dora_case()
    other["graph_breaks"]["roots"][0]["identity"] = "peft/utils/integrations.py in forward: Data-dependent branching"
    assert signature_of(other) != signature_of(dora_case())


def test_a_recompile_in_a_renamed_frame_is_a_change_as_it_is_to_the_budgets():
    renamed = json.loads(json.dumps(dora_case()).replace("wrapped_func at", "renamed_wrapper at"))
    assert signature_of(renamed) != signature_of(dora_case())


def _variants() -> dict[str, dict]:
    """dora_case() changed in one part of its signature each."""
    status = dora_case(status="passed")
    unexpected = dora_case()
    unexpected["recompiles"]["events"][1]["expected"] = True
    unexpected["recompiles"]["unexpected"] = 0
    break_kind = dora_case()
    break_kind["graph_breaks"]["roots"][0]["identity"] = (
        "peft/utils/integrations.py in forward: Data-dependent branching"
    )
    guard = json.loads(json.dumps(dora_case()).replace("LlamaForCausalLM", "LlamaModel"))
    return {"status": status, "unexpected": unexpected, "break kind": break_kind, "guard": guard}


@pytest.mark.parametrize("part", ["status", "unexpected", "break kind", "guard"])
def test_every_signature_difference_has_evidence(part):
    changed = _variants()[part]
    assert signature_of(changed) != signature_of(dora_case())
    assert evidence(dora_case(), changed), f"a change of {part} printed no evidence"


def test_signature_of_a_known_failure_leaves_out_its_counts():
    one = fake.case(CASE, "xfailed", breaks=[fake.brk("a.py:1", "Graph break: x")], recompiles=[EVAL], audited=True)
    more = fake.case(CASE, "xfailed", breaks=[fake.brk("a.py:1", "Graph break: x", occurrences=5)], audited=True)
    assert signature_of(one) == signature_of(more)


def test_bisect_compares_the_identities_the_budgets_record():
    """One identity: a break whose function was renamed is a new budget signature, so it is a change to bisect."""
    before = fake.case(CASE, "passed", breaks=[fake.brk("a.py:1", "Graph break: x")], audited=True)
    after = copy.deepcopy(before)
    before["graph_breaks"]["signatures"] = ["a.py in forward: Graph break"]
    after["graph_breaks"]["signatures"] = ["a.py in forward_renamed: Graph break"]
    assert signature_of(before) != signature_of(after)
    after["graph_breaks"]["signatures"] = ["a.py in forward: Graph break"]
    assert signature_of(before) == signature_of(after)
    after["recompiles"]["signatures"] = ["forward at a.py: len(args)"]
    assert signature_of(before) != signature_of(after)


def test_untestable_when_missing_or_not_audited():
    assert untestable_reason(None) == "the case did not run (not in the report)"
    crashed = fake.case(CASE, "error", message="ImportError: cannot import name 'X'")
    assert untestable_reason(crashed) == "the case was not audited (error: ImportError: cannot import name 'X')"
    assert untestable_reason(dora_case()) is None


def test_evidence_names_counts_new_breaks_with_source_and_new_guards():
    failing = dora_case()
    failing["message"] = "llama-tiny/lora-dora/train-eval-train: graph breaks 13/0\n- over budget"
    lines = evidence(clean_case(), failing)
    assert lines[:3] == [
        "status passed -> failed",
        "    after: llama-tiny/lora-dora/train-eval-train: graph breaks 13/0",
        "graph breaks 0 -> 13 (+13)",
    ]
    assert "graph breaks 0 -> 13 (+13)" in lines
    assert f"new root at peft/utils/integrations.py:90 (x13): {DORA_REASON}\n      {DORA_SOURCE}" in lines
    assert any(
        line.startswith(
            "new unexpected recompile x1: wrapped_func at transformers/utils/deprecation.py: ___check_type_id"
        )
        for line in lines
    )


def test_evidence_of_fewer_breaks_of_the_same_kind():
    lines = evidence(dora_case(13), dora_case(7))
    assert "graph breaks 13 -> 7 (-6)" in lines
    assert any(line.startswith("kept root at peft/utils/integrations.py:90 (x13 -> x7)") for line in lines)


# ----------------------------------------------------------------------------- the driver


def run_driver(cases: list[dict | None]):
    candidates = [Candidate(str(i), f"pkg {i}") for i in range(len(cases))]
    measured: list[str] = []

    def measure(candidate: Candidate) -> Measurement:
        measured.append(candidate.key)
        return measurement_of(cases[int(candidate.key)])

    return find_change(candidates, measure), measured


def test_driver_measures_endpoints_first_and_names_the_first_change():
    result, measured = run_driver([clean_case(), clean_case(), None, clean_case(), dora_case(), dora_case()])
    assert isinstance(result, Change)
    assert measured == ["0", "5", "2", "3", "4"]  # endpoints, then 2 (untestable), around it, then onwards
    assert (result.last_good.label, result.first_bad.label) == ("pkg 3", "pkg 4")
    assert result.before.case.graph_breaks.count == 0 and result.after.case.graph_breaks.count == 13


def test_driver_treats_fewer_breaks_as_a_change():
    result, _ = run_driver([dora_case(13), dora_case(13), dora_case(7)])
    assert isinstance(result, Change) and result.first_bad.label == "pkg 2"


def test_driver_agreeing_endpoints_is_no_change():
    result, measured = run_driver([dora_case(), clean_case(), dora_case()])
    assert isinstance(result, NoChange)
    assert measured == ["0", "2"]  # nothing in between is measured


@pytest.mark.parametrize(
    ("cases", "message"), [([None, dora_case()], "good pkg 0 is untestable: the case did not run")]
)
def test_driver_untestable_good_is_an_error(cases, message):
    with pytest.raises(BisectError, match=message):
        run_driver(cases)


def test_driver_untestable_bad_is_an_error():
    with pytest.raises(BisectError, match=r"bad pkg 1 is untestable: the case was not audited \(skipped"):
        run_driver([clean_case(), fake.case(CASE, "skipped", message="no CUDA")])


def test_driver_all_skipped_names_every_suspect():
    with pytest.raises(BisectError) as error:
        run_driver([clean_case(), None, None, dora_case()])
    assert str(error.value) == (
        "no single culprit: 2 untestable candidate(s) after pkg 0; the first changed one is one of: pkg 1, pkg 2, pkg 3"
    )


# ----------------------------------------------------------------------------- releases

TORCH_INDEX = """torch (2.15.0)
Available versions: 2.15.0, 2.14.1, 2.14.0, 2.13.0+cpu, 2.13.0, 2.12.1, 2.12.0, 2.12.0rc3, 2.11.0, 2.10.0
  INSTALLED: 2.13.0+cpu
"""


def test_pip_index_output_parsed():
    assert releases.parse_pip_index(TORCH_INDEX)[:4] == ["2.15.0", "2.14.1", "2.14.0", "2.13.0+cpu"]
    with pytest.raises(releases.ReleaseError, match="no 'Available versions:' line"):
        releases.parse_pip_index("ERROR: No matching distribution found for torhc")


def test_releases_between_two_versions():
    versions = releases.parse_pip_index(TORCH_INDEX)
    assert releases.between(versions, "2.11.0", "2.13.0") == ["2.11.0", "2.12.0", "2.12.1", "2.13.0"]
    assert releases.between(versions, "2.11.0", "2.12.1", pre=True) == ["2.11.0", "2.12.0rc3", "2.12.0", "2.12.1"]
    assert releases.between(versions, "2.12.1", "2.13.0+cpu") == ["2.12.1", "2.13.0"]


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("2.13.0", "2.13.0+cpu", r"--good and --bad are the same release \(2.13.0\)"),
        ("2.13.0", "2.11.0", "--good 2.13.0 is newer than --bad 2.11.0"),
        ("2.11.5", "2.13.0", r"--good 2.11.5 is not among the index's releases \(pre-releases count only with --pre\)"),
        ("2.12.0rc3", "2.13.0", "--good 2.12.0rc3 is not among the index's releases"),
        ("two", "2.13.0", "--good 'two' is not a version"),
    ],
)
def test_releases_between_rejects(good, bad, message):
    with pytest.raises(releases.ReleaseError, match=message):
        releases.between(releases.parse_pip_index(TORCH_INDEX), good, bad)


# ----------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--good", "1", "--bad", "2", "--package", "torch"], "the following arguments are required: --case"),
        (["--case", CASE, "--good", "2.11.0", "--bad", "2.13.0"], "give exactly one of --repo PATH"),
        (["--case", CASE, "--good", "a", "--bad", "b", "--repo", ".", "--package", "torch"], "exactly one of"),
        (["--case", CASE, "--good", "1", "--bad", "2", "--package", "numpy"], "argument --package: invalid choice"),
        (["--case", CASE, "--good", "1", "--bad", "2", "--package", "torch", "--torch", "2.11"], "--torch belongs to"),
        (["--case", CASE, "--good", "a", "--bad", "b", "--repo", ".", "--pre"], "--pre belongs to versions mode"),
        (["--case", "llama-tiny/lora", "--good", "1", "--bad", "2", "--package", "torch"], "is not a case id"),
        (["--case", CASE, "--good", "2.13.0", "--bad", "2.13.0", "--package", "torch"], "are the same (2.13.0)"),
        (["--case", CASE, "--good", "1", "--bad", "2", "--package", "torch", "--timeout", "0"], "--timeout must be"),
        (["--case", CASE, "--good", "1", "--bad", "2", "--package", "torch", "--hold", "numpy==2"], "expected NAME=="),
        (
            ["--case", CASE, "--good", "1", "--bad", "2", "--package", "torch", "--hold", "torch==2"],
            "what this run varies",
        ),
        (["--case", CASE, "--good", "a", "--bad", "b", "--repo", ".", "--torch", "numpy"], "neither a version nor"),
    ],
)
def test_argument_errors_are_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv, make_lab=unusable_lab) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("peft-compile-bisect: error: ")
    assert message in captured.err


def test_non_empty_workdir_is_refused(tmp_path, capsys):
    (tmp_path / "something").write_text("x")
    argv = ["--case", CASE, "--good", "1", "--bad", "2", "--package", "torch", "--workdir", str(tmp_path)]
    assert cli.main(argv, make_lab=unusable_lab) == 2
    assert f"--workdir {tmp_path} exists and is not an empty directory" in capsys.readouterr().err


def test_the_script_runs_from_the_checkout():
    script = str(REPO_ROOT / "scripts" / "bisect")
    argv = [sys.executable, script, "--package", "torch", "--case", CASE, "--good", "x", "--bad", "x"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/")
    assert done.returncode == 2
    assert done.stderr == "scripts/bisect: error: --good and --bad are the same (x): nothing to bisect\n"


def unusable_lab(*args, **kwargs):
    raise AssertionError("an argument error must stop before any scratch venv")


# ----------------------------------------------------------------------------- the scratch venv


class FakeRunner:
    """Plays venv, pip, the import check and pytest; records every command and its environment."""

    def __init__(self, pip_error: str | None = None, import_output: str | None = None, import_error: str = ""):
        self.calls: list[tuple[list[str], dict]] = []
        self.pip_error, self.import_error, self.case = pip_error, import_error, clean_case()
        self.import_output = import_output or json.dumps(
            {"torch": "2.12.0", "transformers": "5.17.0", "peft": "0.21.2"}
        )

    def __call__(self, argv, *, env, timeout=None, **kwargs):
        self.calls.append((list(argv), env))
        if argv[1:3] == ["-m", "pip"] and self.pip_error:
            return subprocess.CompletedProcess(argv, 1, "Collecting torch==9\n", f"{self.pip_error}\n")
        if argv[1] == "-c" and self.import_error:
            return subprocess.CompletedProcess(
                argv, 1, "", f"Traceback (most recent call last):\n{self.import_error}\n"
            )
        if argv[1] == "-c":
            return subprocess.CompletedProcess(argv, 0, self.import_output + "\n", "")
        if "pytest" in argv:
            if timeout == 0.5:
                raise subprocess.TimeoutExpired(argv, timeout)
            report = Path(argv[argv.index("--compile-report") + 1])
            fake.write(report, fake.report([self.case]))
        return subprocess.CompletedProcess(argv, 0, "", "")


def make_lab(tmp_path: Path, runner: FakeRunner, timeout: float = 60) -> Lab:
    environ = {"PATH": "/usr/bin", "VIRTUAL_ENV": "/caller/venv", "PYTHONPATH": "/caller/src", "PIP_USER": "1"}
    return Lab(tmp_path / "work", REPO_ROOT, CASE, ["--find-links=/wheels"], timeout, run=runner, environ=environ)


def test_every_command_runs_in_the_scratch_venv(tmp_path):
    runner = FakeRunner()
    lab = make_lab(tmp_path, runner)
    lab.create(["torch==2.13.0", "peft==0.21.2"], ["numpy==2.4.6"])
    measurement = lab.measure("torch 2.12.0", ["torch==2.12.0"], ["transformers==5.17.0"], expect=("torch", "2.12.0"))
    assert measurement.untestable is None and measurement.case.id == CASE
    venv_python = str(tmp_path / "work" / "venv" / "bin" / "python")
    (venv_argv, _), *rest = runner.calls
    assert venv_argv == [sys.executable, "-m", "venv", str(tmp_path / "work" / "venv")]
    for argv, env in rest:
        assert argv[0] == venv_python, argv  # never the caller's interpreter or pip
        assert not {"--user", "--target", "--prefix", "--root"} & set(argv)
        assert env["VIRTUAL_ENV"] == str(tmp_path / "work" / "venv")
        assert env["PATH"].startswith(str(tmp_path / "work" / "venv" / "bin") + os.pathsep)
        assert "PYTHONPATH" not in env and "PIP_USER" not in env and env["PYTHONNOUSERSITE"] == "1"
    pip_calls = [argv for argv, _ in rest if argv[1:3] == ["-m", "pip"]]
    assert all("--find-links=/wheels" in argv for argv in pip_calls)
    step = pip_calls[-1]
    assert step[-1] == "torch==2.12.0"
    constraints = Path(step[step.index("--constraint") + 1]).read_text()
    assert constraints == "transformers==5.17.0\n"
    pytest_argv = rest[-1][0]
    assert pytest_argv[1:3] == ["-m", "pytest"] and pytest_argv[-2:] == ["-k", f"[{CASE}]"]


def test_install_failure_is_untestable_with_pips_error(tmp_path):
    lab = make_lab(tmp_path, FakeRunner(pip_error="ERROR: No matching distribution found for torch==9"))
    measurement = lab.measure("torch 9", ["torch==9"])
    assert measurement.untestable == "install failed: ERROR: No matching distribution found for torch==9"


def test_import_failure_and_wrong_version_are_untestable(tmp_path):
    lab = make_lab(tmp_path, FakeRunner(import_error="ImportError: libcudnn.so.9: cannot open shared object file"))
    assert lab.measure("torch 2.12.0", ["torch==2.12.0"]).untestable == (
        "import failed: ImportError: libcudnn.so.9: cannot open shared object file"
    )
    lab = make_lab(tmp_path / "a", FakeRunner(import_output="x"))  # the import check prints something not JSON
    assert lab.measure("torch 2.12.0", ["torch==2.12.0"]).untestable.startswith("import failed: unexpected output")
    lab = make_lab(tmp_path / "b", FakeRunner())
    measurement = lab.measure("torch 2.12.1", ["torch==2.12.1"], expect=("torch", "2.12.1"))
    assert measurement.untestable == "torch 2.12.0 imports, not the 2.12.1 installed"


def test_case_run_timeout_is_untestable(tmp_path):
    lab = make_lab(tmp_path, FakeRunner(), timeout=0.5)
    assert lab.measure("torch 2.12.0", ["torch==2.12.0"]).untestable == (
        "pytest wrote no report (exit status 124: timed out after 0.5 s)"
    )


def test_failed_setup_names_the_requirements(tmp_path):
    lab = make_lab(tmp_path, FakeRunner(pip_error="ERROR: ResolutionImpossible: ..."))
    with pytest.raises(Exception, match=r"cannot install torch==2.13.0 into the scratch venv: ERROR: Resolution"):
        lab.create(["torch==2.13.0"], ["numpy==2.4.6"])


def test_error_line_picks_what_went_wrong():
    pip = "Collecting x\nERROR: Cannot install transformers==5.17.0 because ...\nERROR: ResolutionImpossible: see"
    assert error_line(pip) == "ERROR: Cannot install transformers==5.17.0 because ..."
    traceback = 'Traceback (most recent call last):\n  File "<string>", line 1\nModuleNotFoundError: No module named x'
    assert error_line(traceback) == "ModuleNotFoundError: No module named x"
    conftest = (
        "ImportError while loading conftest 'conftest.py'.\nconftest.py:14: in <module>\nE   AttributeError: no X"
    )
    assert error_line(conftest) == "AttributeError: no X"


@pytest.mark.parametrize(
    ("case_id", "options"),
    [
        (CASE, ["--full-matrix", "-k", f"[{CASE}]"]),
        (f"{CASE}@cpu-aot_eager", ["--full-matrix", "--cpu-backend", "aot_eager", "-k", f"[{CASE}"]),
        (
            "llama-3.2-1b/lora/train-eval-train@cuda-inductor",
            ["--full-matrix", "-m", "gpu", "-k", "[llama-3.2-1b/lora/train-eval-train"],
        ),
    ],
)
def test_case_selection(case_id, options):
    assert case_selection(case_id) == options


def test_each_step_compiles_into_caches_of_its_own(tmp_path):
    runner = FakeRunner()
    lab = make_lab(tmp_path, runner)
    lab.create(["torch==2.13.0"], [])
    lab.measure("torch 2.12.0", ["torch==2.12.0"])
    lab.measure("torch 2.12.1", ["torch==2.12.1"])
    caches = {env["TORCHINDUCTOR_CACHE_DIR"] for argv, env in runner.calls if "pytest" in argv}
    assert caches == {str(tmp_path / "work" / "caches" / step / "inductor-cache") for step in ("01", "02")}
    assert all(env["PYTHONDONTWRITEBYTECODE"] == "1" for _, env in runner.calls)  # nothing written into the checkout


# ----------------------------------------------------------------------------- git mode, end to end

LAYER = "def forward(x):\n    return x\n"
PLANTED = "import torch\n\n\ndef forward(x):\n    torch._dynamo.graph_break()\n    return x\n"
HISTORY = [  # (subject, layer.py, setup.py or None: unchanged)
    ("Add the layer", LAYER, "\n"),
    ("Break setup.py", LAYER, "raise SystemExit(1)\n"),
    ("Fix setup.py", LAYER, "\n"),
    ("Speed up forward", PLANTED, None),
    ("Document the layer", "# the layer\n" + PLANTED, None),
]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def build_history(repo: Path) -> list[str]:
    """Five commits: the second cannot be installed (untestable), the fourth plants a graph break."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "Dev")
    layer = repo / "src" / "peft" / "layer.py"
    layer.parent.mkdir(parents=True)
    shas = []
    for subject, text, setup in HISTORY:
        layer.write_text(text)
        if setup is not None:
            (repo / "setup.py").write_text(setup)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    return shas


class TreeReadingLab:
    """Stands in for the scratch venv: "installs" the exported tree by reading it; records what it saw."""

    seen: ClassVar[list[str]] = []

    def __init__(self, workdir, gate_root, case_id, pip_options, timeout, say):
        self.workdir = workdir

    def create(self, requirements, pins):
        assert any(r.startswith("torch==") for r in requirements)

    def measure(self, label, install, constraints=(), options=(), expect=None):
        tree = Path(install[0])
        assert options == ("--no-deps", "--force-reinstall") and tree.is_relative_to(self.workdir)
        TreeReadingLab.seen.append(label)
        if "SystemExit" in (tree / "setup.py").read_text():
            return Measurement.failed("install failed: ERROR: setup.py exited with 1")
        planted = "graph_break()" in (tree / "src" / "peft" / "layer.py").read_text()
        return measurement_of(dora_case(1) if planted else clean_case())


def snapshot(repo: Path) -> dict:
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "HEAD"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "refs": git(repo, "for-each-ref"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "stash": git(repo, "stash", "list"),
        "layer": (repo / "src" / "peft" / "layer.py").read_text(),
    }


def caller_environment() -> dict:
    return {
        "environ": dict(os.environ),
        "sys.path": list(sys.path),
        "distributions": sorted((d.metadata["Name"], d.version) for d in importlib.metadata.distributions()),
    }


def bisect_history(repo: Path, good: str, bad: str) -> int:
    TreeReadingLab.seen = []
    return cli.main(["--repo", str(repo), "--good", good, "--bad", bad, "--case", CASE], make_lab=TreeReadingLab)


def test_git_mode_names_the_planting_commit_and_changes_nothing(tmp_path, capsys):
    repo = tmp_path / "peft"
    shas = build_history(repo)
    (repo / "src" / "peft" / "layer.py").write_text("# uncommitted work in progress\n")  # must survive untouched
    before, environment = snapshot(repo), caller_environment()
    assert bisect_history(repo, shas[0], "main") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"first bad commit: {shas[3]} Speed up forward"
    assert out[1] == f"last like good: {shas[2]} Fix setup.py"
    assert "  graph breaks 0 -> 1 (+1)" in out
    assert out[2].startswith("held: torch==") and "transformers==" in out[2] and "peft" not in out[2]
    assert snapshot(repo) == before
    assert caller_environment() == environment


def test_git_mode_skips_an_untestable_commit(tmp_path, capsys):
    shas = build_history(tmp_path / "peft")
    assert bisect_history(tmp_path / "peft", shas[0], shas[3]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"first bad commit: {shas[3]} Speed up forward\n")
    assert TreeReadingLab.seen[2] == f"{shas[1][:12]} Break setup.py"  # probed, skipped, bisection went on
    assert "steps (4 measured, 1 untestable):" in out


def test_git_mode_without_a_change_or_with_an_untestable_end(tmp_path, capsys):
    shas = build_history(tmp_path / "peft")
    assert bisect_history(tmp_path / "peft", shas[3], shas[4]) == 1  # the planted break is in both
    assert capsys.readouterr().out.startswith(f"no change: {shas[3][:12]} Speed up forward and {shas[4][:12]}")
    assert bisect_history(tmp_path / "peft", shas[0], shas[1]) == 2
    assert f"bad {shas[1][:12]} Break setup.py is untestable: install failed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("HEAD~1", "HEAD~4", "--good HEAD~1 is not an ancestor of --bad HEAD~4"),
        ("nope", "HEAD", "--good 'nope' is not a commit of"),
        ("main", "HEAD", "--good main and --bad HEAD are the same commit"),
    ],
)
def test_git_mode_range_errors(tmp_path, capsys, good, bad, message):
    build_history(tmp_path / "peft")
    argv = ["--repo", str(tmp_path / "peft"), "--good", good, "--bad", bad, "--case", CASE]
    assert cli.main(argv, make_lab=unusable_lab) == 2
    assert message in capsys.readouterr().err


def test_git_mode_needs_a_repository(tmp_path, capsys):
    argv = ["--repo", str(tmp_path), "--good", "a", "--bad", "b", "--case", CASE]
    assert cli.main(argv, make_lab=unusable_lab) == 2
    assert capsys.readouterr().err == f"peft-compile-bisect: error: --repo {tmp_path} is not a git repository\n"
