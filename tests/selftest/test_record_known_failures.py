"""scripts/record_known_failures.py: failed cases become known failures with the reason the run gave, nothing else."""

from __future__ import annotations

import pytest

from compile_audit.budgets import BudgetFile
from scripts import record_known_failures
from tests.selftest import fake_reports as fake

pytestmark = pytest.mark.selftest

LIMIT_HIT = {
    "phase": "eval-1",
    "frame": fake.DEPRECATION_FRAME,
    "limit": "recompile_limit (8)",
    "last_guard": fake.TYPE_ID_RECOMPILE.replace("9/0", "10/7"),
}
RAISED = """llama-tiny-bnb4/lora-dora/save-load: the case raised
E   RuntimeError: absmax must be float32, got torch.bfloat16
E   (a second line)"""


def _report(tmp_path):
    limit = fake.case("opt-tiny/frod/save-load", "failed", message="recompile limit hit")
    limit["recompiles"]["limit_hits"] = [LIMIT_HIT]
    cases = [
        limit,
        fake.case("llama-tiny-bnb4/lora-dora/save-load", "failed", message=RAISED, audited=False),
        fake.case("llama-tiny/loha/save-load", "failed", message="graph breaks 6/0"),  # over budget: not a mark
        fake.case("llama-tiny/lora/save-load"),
        fake.case("llama-tiny/ia3/save-load", "failed", message="E   ValueError: new"),  # already known
    ]
    return fake.write(tmp_path / "report.json", fake.report(cases))


def _budgets(tmp_path):
    path = tmp_path / "budgets.toml"
    path.write_text('[cases."llama-tiny/ia3/save-load"]\ngraph_breaks = 1\nnote = "kept"\nknown_failure = "older"\n')
    return path


def test_limit_hits_and_errors_are_marked_with_their_reasons_and_nothing_else(tmp_path, capsys):
    budgets = _budgets(tmp_path)
    assert record_known_failures.main([str(_report(tmp_path)), "--budgets", str(budgets), "--write"]) == 0
    entries = BudgetFile.load(budgets).entries
    limit = entries["opt-tiny/frod/save-load"].known_failure
    assert limit.startswith("Dynamo hits its recompile_limit (8) on wrapped_func at transformers/utils/deprecation")
    assert "in eval-1" in limit and "___check_type_id(args[0], <id>)" in limit and "10/7" not in limit
    raised = entries["llama-tiny-bnb4/lora-dora/save-load"].known_failure
    assert raised == "raises RuntimeError: absmax must be float32, got torch.bfloat16"
    assert "llama-tiny/loha/save-load" not in entries and "llama-tiny/lora/save-load" not in entries
    kept = entries["llama-tiny/ia3/save-load"]
    assert (kept.known_failure, kept.note, kept.graph_breaks) == ("older", "kept", 1)
    out = capsys.readouterr().out
    assert "marked 2 known failure(s)" in out
    assert "not marked (failed without a limit hit or an error line; see its message): llama-tiny/loha" in out


def test_without_write_the_file_is_untouched(tmp_path, capsys):
    budgets = _budgets(tmp_path)
    before = budgets.read_text()
    assert record_known_failures.main([str(_report(tmp_path)), "--budgets", str(budgets)]) == 0
    assert budgets.read_text() == before
    assert "would mark 2 known failure(s)" in capsys.readouterr().out


def test_an_unreadable_report_exits_2_naming_it(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    assert record_known_failures.main([str(missing), "--budgets", str(_budgets(tmp_path))]) == 2
    assert "missing.json" in capsys.readouterr().err
