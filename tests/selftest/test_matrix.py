"""The compatibility matrix: cells, markers, footnoted skips and errors, legend, header; deterministic."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from compile_audit.artifacts import matrix
from tests.selftest import fake_reports as fake

pytestmark = pytest.mark.selftest
REPO_ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = "GPU tier: CUDA is not available on this machine"


def _cases():
    return [
        *fake.base_cases(),
        fake.case("llama-tiny/lora/generate"),
        fake.case("llama-tiny/prompt-tuning/train-eval-train", "skipped", message="prompt tuning: no LM head here"),
        fake.case("opt-tiny/lora/train-eval-train"),
        fake.case("opt-tiny/ia3/train-eval-train", "error", message="RuntimeError: shapes mismatch\nTraceback (...)"),
        fake.case("llama-3.2-3b/lora/train-eval-train@cuda-inductor", "skipped", message=NO_CUDA),
        fake.case("llama-3.2-3b/loha/train-eval-train@cuda-inductor", "skipped", message=NO_CUDA),
    ]


def _render(tmp_path, cases, output=None):
    path = fake.write(tmp_path / "report.json", fake.report(cases))
    args = [str(path)] + (["--output", str(output)] if output else [])
    return path, matrix.main(args)


def _table(text, title):
    """Rows of the table under '## title', as {method: [cells]}, and its header cells."""
    lines = text.splitlines()
    start = lines.index(f"## {title}") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows[0], {row[0]: row[1:] for row in rows[2:]}


def _footnote(text, ref):
    return next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith(f"{ref}: "))


def test_cells_show_breaks_recompiles_unexpected_and_status(tmp_path, capsys):
    _, code = _render(tmp_path, _cases())
    out = capsys.readouterr().out
    assert code == 0
    header, rows = _table(out, "llama-tiny · cpu / eager")
    assert header == ["method", "generate", "train-eval-train"]
    assert rows["lora"] == ["✅ 0 / 0", "✅ 0 / 1"]
    assert rows["loha"] == ["–", "⚠️ 6 / 3 (2 unexp.)"]
    assert rows["ia3"] == ["–", "✅ 0 / 1"]
    assert list(rows) == ["ia3", "loha", "lora", "prompt-tuning"]


def test_skips_and_errors_are_footnoted_once_per_reason(tmp_path, capsys):
    _render(tmp_path, _cases())
    out = capsys.readouterr().out
    _, llama = _table(out, "llama-tiny · cpu / eager")
    skip = llama["prompt-tuning"][1]
    assert skip.startswith("⏭[^")
    assert _footnote(out, skip.removeprefix("⏭")) == "prompt tuning: no LM head here"
    _, opt = _table(out, "opt-tiny · cpu / eager")
    error = opt["ia3"][0]
    assert error.startswith("❌[^")
    assert _footnote(out, error.removeprefix("❌")) == "RuntimeError: shapes mismatch"  # first line only
    # A model whose every case was skipped for the same reason: one line, and one footnote for all.
    assert "All 2 cases were skipped[^" in out
    assert sum(line.endswith(NO_CUDA) for line in out.splitlines()) == 1


def test_speedup_is_shown_where_benchmarked(tmp_path, capsys):
    gpu = fake.case("llama-3.2-1b/lora/train-eval-train@cuda-inductor", benchmarks={"speedup": 1.634})
    _render(tmp_path, [gpu])
    out = capsys.readouterr().out
    _, rows = _table(out, "llama-3.2-1b · cuda / inductor")
    assert rows["lora"] == ["✅ 0 / 0 · 1.63×"]
    assert "Regenerate: `pytest -m gpu --compile-report" in out


def test_header_legend_and_summary(tmp_path, capsys):
    path, _ = _render(tmp_path, _cases())
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "# torch.compile compatibility matrix"
    assert f"Generated from `{path}` (run of 2026-11-30T03:00:00+00:00)" in lines[2]
    assert "torch 2.13.0+cpu, transformers 5.24.0, peft 0.21.2" in lines[2]
    assert (
        lines[3] == f"Regenerate: `pytest --compile-report {path} && python -m compile_audit.artifacts.matrix {path}`"
    )
    for marker in ("✅", "⚠️", "❌", "⏭", "(N unexp.)", "×", "–"):
        assert any(line.startswith("- ") and marker in line for line in lines), marker
    _, summary = _table(out, "Summary")
    assert summary["llama-tiny · cpu / eager"] == [
        "5",
        "3",
        "0",
        "1",
        "0",
        "1",
        "0",
    ]  # cases, clean, within budget, failed, error, skipped, known failures


def test_clean_is_told_from_within_budget(tmp_path, capsys):
    budgeted = fake.case(
        "llama-tiny/lora-dora/train-eval-train",
        breaks=[fake.brk("peft/utils/integrations.py:90", "Unsupported method call", occurrences=7)],
        break_budget=7,
    )
    _render(tmp_path, [*_cases(), budgeted])
    out = capsys.readouterr().out
    _, rows = _table(out, "llama-tiny · cpu / eager")
    assert rows["lora-dora"][-1] == "☑️ 7 / 0"
    assert rows["lora"][-1] == "✅ 0 / 1"
    _, summary = _table(out, "Summary")
    assert summary["llama-tiny · cpu / eager"][:3] == ["6", "3", "1"]


def test_output_is_deterministic_and_written_where_asked(tmp_path, capsys):
    output = tmp_path / "docs" / "compile-matrix.md"
    cases = _cases()
    _render(tmp_path, cases, output)
    first = output.read_text(encoding="utf-8")
    random.Random(1).shuffle(cases)
    _render(tmp_path, cases, output)
    assert output.read_text(encoding="utf-8") == first
    assert capsys.readouterr().out == ""
    assert f"--output {output}`" in first


def test_regenerate_names_the_command_that_made_the_report(tmp_path, capsys):
    path = fake.write(tmp_path / "report.json", fake.report(_cases()))
    assert matrix.main([str(path), "--regenerate", "scripts/full_matrix.py --shards 8"]) == 0
    assert "Regenerate: `scripts/full_matrix.py --shards 8`" in capsys.readouterr().out


def test_runs_as_a_module_without_torch(tmp_path):
    path = fake.write(tmp_path / "report.json", fake.report(_cases()))
    (tmp_path / "torch.py").write_text("raise ImportError('compile_audit.artifacts.matrix must not import torch')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO_ROOT}", "PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, "-m", "compile_audit.artifacts.matrix", str(path)]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "## llama-tiny · cpu / eager" in completed.stdout


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read the report"),
        ('{"schema": "compile-audit-report/0", "cases": []}', "not a compile report"),
        ('{"schema": "compile-audit-report/2", "cases": [{"id": "x", "status": "passed"}]}', "model, method, scenario"),
    ],
)
def test_bad_input_exits_2_naming_the_file(tmp_path, capsys, content, expected):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    assert matrix.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and expected in err
