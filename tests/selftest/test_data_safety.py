"""The budgets file holds hand-written notes nothing can regenerate: writes are atomic, a missing file is an
error, options work in every form from any directory, a partial update leaves other entries alone."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compile_audit import files
from compile_audit.artifacts.report import build_report, write_report
from compile_audit.rules.budgets import Budget, BudgetFile

pytestmark = pytest.mark.selftest
REPO_ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = '[cases."a/b/c"]\ngraph_breaks = 1\nnote = "hand-written: upstream issue #1"\n'


def _full_disk(*args):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_interrupted_budgets_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "budgets.toml"
    path.write_text(ORIGINAL)
    budgets = BudgetFile.load(path)
    budgets.entries["x/y/z"] = Budget(graph_breaks=1, note="why", recorded=True)
    monkeypatch.setattr(files.os, "fsync", _full_disk)  # the disk fills up mid-write
    with pytest.raises(OSError, match="No space left"):
        budgets.write()
    assert path.read_text() == ORIGINAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budgets.toml"]  # no temporary file left behind


def test_interrupted_report_write_leaves_the_old_report_intact(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    path.write_text("old report\n")
    monkeypatch.setattr(files.os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_report(path, build_report([], {}))
    assert path.read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_write_replaces_the_file_when_it_succeeds(tmp_path):
    path = tmp_path / "budgets.toml"
    path.write_text(ORIGINAL)
    budgets = BudgetFile.load(path)
    budgets.entries["x/y/z"] = Budget(graph_breaks=1, note="why", recorded=True)
    budgets.write()
    assert set(BudgetFile.load(path).entries) == {"a/b/c", "x/y/z"}
    assert os.stat(path).st_size > len(ORIGINAL)


def test_a_rewritten_file_keeps_its_mode_and_a_new_one_gets_the_umasks(tmp_path):
    """A temporary file is created 0600; the file it replaces must not become private (a shared checkout's budgets
    file, a report CI uploads)."""
    kept = tmp_path / "budgets.toml"
    kept.write_text(ORIGINAL)
    kept.chmod(0o664)
    files.write_text_atomic(kept, ORIGINAL + "\n")
    assert kept.stat().st_mode & 0o777 == 0o664
    umask = os.umask(0o022)
    try:
        files.write_text_atomic(tmp_path / "new.json", "{}\n")
    finally:
        os.umask(umask)
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644


def test_the_lock_excludes_a_second_writer_and_leaves_no_file_behind(tmp_path):
    """Shards of one selection update the budgets file in turn; nothing is left beside it afterwards."""
    import multiprocessing

    target = tmp_path / "budgets.toml"
    target.write_text(ORIGINAL)
    context = multiprocessing.get_context("fork")
    with files.exclusive(target):
        waiting = context.Process(target=_lock_and_write, args=(target,))
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive(), "a second writer took the lock while the first held it"
        files.write_text_atomic(target, ORIGINAL + "# first\n")
    waiting.join(timeout=30)
    assert waiting.exitcode == 0
    assert target.read_text().endswith("# first\n# second\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budgets.toml"]


def _lock_and_write(target: Path) -> None:
    with files.exclusive(target):
        files.write_text_atomic(target, target.read_text() + "# second\n")


def _pytest(*args, cwd=REPO_ROOT):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_options_work_in_both_forms_from_another_directory(tmp_path):
    """From outside the repository: every option in the equals form, and the space form where pytest's rootdir
    does not depend on it (--cpu-backend, a --compile-report path that does not exist yet)."""
    budgets, report = tmp_path / "budgets.toml", tmp_path / "report.json"
    budgets.write_text((REPO_ROOT / "tests" / "compile_budgets.toml").read_text())
    test_file = REPO_ROOT / "tests" / "selftest" / "test_parity.py"
    args = [f"--budgets={budgets}", "--cpu-backend", "eager", "--compile-report", str(report)]
    result = _pytest(*args, "-q", "-m", "selftest", str(test_file), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert report.is_file()


def test_an_output_that_cannot_be_written_fails_before_the_first_case(tmp_path):
    target = "/proc/peft-compile-gate/report.json"  # no one creates files in /proc, root included
    result = _pytest(f"--compile-report={target}", "-q", "-k", "llama-tiny/lora/train-eval")
    assert result.returncode == 4, result.stdout + result.stderr
    assert f"--compile-report: cannot write {target}" in result.stderr
    assert "passed" not in result.stdout


def test_an_output_path_that_is_a_folder_fails_before_the_first_case(tmp_path):
    result = _pytest(f"--compile-report={tmp_path}", "-q", "-k", "llama-tiny/lora/train-eval")
    assert result.returncode == 4, result.stdout + result.stderr
    assert f"--compile-report: cannot write {tmp_path}" in result.stderr
    assert "passed" not in result.stdout


def test_space_form_that_would_move_the_rootdir_is_a_usage_error(tmp_path):
    """pytest picks its rootdir before plugin options exist: in the project, with no test path, ``--budgets
    /elsewhere/b.toml`` (an existing file) makes /elsewhere the rootdir and the project's ini (addopts, markers)
    unread; the gate refuses to run the wrong selection."""
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("")
    result = _pytest("--budgets", str(budgets), "--collect-only", "-q")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert "Write --budgets=PATH, or pass --rootdir" in result.stderr


def test_the_budgets_files_own_checks_judge_the_file_given_with_budgets(tmp_path):
    budgets = tmp_path / "budgets.toml"
    entry = '[cases."llama-tiny/lora/train-eval-train"]\ngraph_breaks = 1\nnote = "the break at peft/x.py:12"\n'
    budgets.write_text(entry)  # a line number: the file's own checks refuse it, the loader does not
    result = _pytest(f"--budgets={budgets}", "-q", "tests/test_budgets_file.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{budgets}:3: note = " in result.stdout
