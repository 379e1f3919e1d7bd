"""gate_tools.known_failures (scripts/record_known_failures.py): failed cases become known failures with the reason
the run gave, nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compile_audit.probe.ranks import RankOutcome
from compile_audit.rules.budgets import BudgetFile
from gate_tools import known_failures as record_known_failures
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


OVER_BUDGET = """llama-tiny/loha/save-load: graph breaks 6/0
- over budget (no entry in the budgets file: default budget 0 graph breaks): graph breaks: 6 > budget 0
- saved adapter: 1 key(s) carry `_orig_mod.`"""
CHECK = """opt-tiny/lora/inject-compiled-base: graph breaks 0/0, recompiles 1
- adapter saved from get_peft_model(compiled base): 4 key(s) carry the compiled wrapper's `_orig_mod.` prefix
- reloaded vs eager: differ"""


def _report(tmp_path):
    limit = fake.case("opt-tiny/frod/save-load", "failed", message="recompile limit hit")
    limit["recompiles"]["limit_hits"] = [LIMIT_HIT]
    raised = fake.case("llama-tiny-bnb4/lora-dora/save-load", "failed", message=RAISED, audited=False)
    raised["raised"], raised["error"] = "RuntimeError", "absmax must be float32, got torch.bfloat16"
    over = fake.case("llama-tiny/loha/save-load", "failed", message=OVER_BUDGET)  # a budget, not a known failure
    over["problems"] = [{"kind": "over budget", "names": []}, {"kind": "check", "names": ["saved adapter"]}]
    check = fake.case("opt-tiny/lora/inject-compiled-base", "failed", message=CHECK)
    check["problems"] = [
        {"kind": "check", "names": ["saved adapter"], "summary": CHECK.splitlines()[1].removeprefix("- ")},
        {"kind": "check", "names": ["saved adapter"], "summary": CHECK.splitlines()[2].removeprefix("- ")},
    ]
    known = fake.case("llama-tiny/ia3/save-load", "failed", message="E   ValueError: new")  # already known
    known["raised"] = "ValueError"
    two = fake.case("llama-tiny/cartridge/train-eval-train", "failed", message="limit and steady state")
    two["recompiles"]["limit_hits"] = [LIMIT_HIT, {**LIMIT_HIT, "frame": "weight at peft/tuners/cartridge/model.py:72"}]
    two["problems"] = [{"kind": "recompile limit", "names": []}, {"kind": "steady state", "names": ["steady state"]}]
    cases = [limit, raised, over, check, fake.case("llama-tiny/lora/save-load"), known, two]
    return fake.write(tmp_path / "report.json", fake.report(cases))


def _budgets(tmp_path):
    path = tmp_path / "budgets.toml"
    entry = 'graph_breaks = 1\nnote = "kept"\nknown_failure = "older"\nknown_raises = "ValueError"\n'
    path.write_text(f'[cases."llama-tiny/ia3/save-load"]\n{entry}')
    return path


def test_limit_hits_and_errors_are_marked_with_their_reasons_and_nothing_else(tmp_path, capsys):
    budgets = _budgets(tmp_path)
    assert record_known_failures.main([str(_report(tmp_path)), "--budgets", str(budgets), "--write"]) == 0
    entries = BudgetFile.load(budgets).entries
    assert entries["opt-tiny/frod/save-load"].known_recompile_limit == (
        "wrapped_func at transformers/utils/deprecation.py",
    )
    assert entries["llama-tiny-bnb4/lora-dora/save-load"].known_raises == "RuntimeError"
    assert entries["opt-tiny/lora/inject-compiled-base"].known_check == ("saved adapter",)
    # Two frames at the limit and a broken steady state: one entry names all three, as a list and a string.
    two = entries["llama-tiny/cartridge/train-eval-train"]
    assert two.known_recompile_limit == (
        "weight at peft/tuners/cartridge/model.py",
        "wrapped_func at transformers/utils/deprecation.py",
    )
    assert two.known_check == ("steady state",)
    text = budgets.read_text()
    assert 'known_recompile_limit = ["weight at peft/tuners/cartridge/model.py", "wrapped_func at' in text
    limit = entries["opt-tiny/frod/save-load"].known_failure
    assert limit.startswith(
        "proposed: Dynamo hits its recompile_limit (8) on wrapped_func at transformers/utils/deprecation"
    )
    assert "___check_type_id(args[0], <id>)" in limit and "10/7" not in limit
    assert "eval-1" not in limit and not re.search(r"\.py:\d", limit)  # no phase, no line: they move
    raised = entries["llama-tiny-bnb4/lora-dora/save-load"].known_failure
    assert raised == "proposed: raises RuntimeError: absmax must be float32, got torch.bfloat16"
    check = entries["opt-tiny/lora/inject-compiled-base"].known_failure
    assert (
        check
        == "proposed: fails: adapter saved from get_peft_model(compiled base): 4 key(s) carry the compiled wrapper's"
        " `_orig_mod.` prefix"
    )
    assert "llama-tiny/loha/save-load" not in entries and "llama-tiny/lora/save-load" not in entries
    kept = entries["llama-tiny/ia3/save-load"]
    assert (kept.known_failure, kept.note, kept.graph_breaks) == ("older", "kept", 1)
    # tests/test_budgets_file.py fails on every proposed reason until a person rewrites it; the kept one is a person's.
    assert BudgetFile.load(budgets).proposed_reasons() == sorted(
        [
            "opt-tiny/frod/save-load",
            "llama-tiny-bnb4/lora-dora/save-load",
            "opt-tiny/lora/inject-compiled-base",
            "llama-tiny/cartridge/train-eval-train",
        ]
    )
    out = capsys.readouterr().out
    assert "marked 4 known failure(s)" in out
    assert "not marked (over budget, or no reason found; see its message): llama-tiny/loha" in out


def test_without_write_the_file_is_untouched(tmp_path, capsys):
    budgets = _budgets(tmp_path)
    before = budgets.read_text()
    assert record_known_failures.main([str(_report(tmp_path)), "--budgets", str(budgets)]) == 0
    assert budgets.read_text() == before
    assert "would mark 4 known failure(s)" in capsys.readouterr().out


def test_an_unreadable_report_exits_2_naming_it(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    assert record_known_failures.main([str(missing), "--budgets", str(_budgets(tmp_path))]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_a_rank_that_raised_is_marked_with_the_type_the_test_raises():
    case = fake.case("llama-tiny/lora-dora/ddp", "failed", message="the message is not read")
    case["raised"], case["error"] = "RankFailed", "AttributeError: 'float' object"
    assert record_known_failures.error_reason(fake.record(case)) == "raises RankFailed: AttributeError: 'float' object"


def test_a_rank_says_its_own_error_in_one_line():
    traceback = "Traceback (most recent call last):\n  ...\nValueError: bad\n"
    outcome = RankOutcome(1, 1, None, {}, traceback, Path("x"), 0.1)
    assert outcome.summary() == "ValueError: bad"
    assert RankOutcome(0, None, "hung past the deadline", {}, None, Path("x"), 9).summary() == (
        "rank 0 hung past the deadline and was killed"
    )


CAUSES = """[causes."depth-growth"]
note = "a person's reason"
signatures = ["peft/tuners/frod/* in *: *"]
known_failures = ["*/frod/depth*: check depth growth"]

[causes."wrapper"]
note = "the wrapper recompiles per caller"
signatures = ["wrapped_func at transformers/utils/deprecation.py*"]
known_failures = ["*: recompile limit at wrapped_func at transformers/utils/deprecation.py"]

"""


def test_a_known_failure_that_now_fails_on_more_is_extended_and_reviewed_unless_a_cause_names_it(tmp_path, capsys):
    budgets = tmp_path / "budgets.toml"
    held_by_cause = '[cases."llama-tiny/frod/depth"]\nknown_check = "depth growth"\n'
    held_by_person = '[cases."opt-tiny/frod/save-load"]\nknown_failure = "older"\nknown_check = "saved adapter"\n'
    budgets.write_text(CAUSES + held_by_cause + held_by_person)
    depth = fake.case("llama-tiny/frod/depth", "failed", message="depth growth, and the wrapper at the limit")
    depth["recompiles"]["limit_hits"] = [LIMIT_HIT]
    depth["problems"] = [{"kind": "recompile limit", "names": []}, {"kind": "check", "names": ["depth growth"]}]
    save = fake.case("opt-tiny/frod/save-load", "failed", message="saved adapter, and the wrapper at the limit")
    save["recompiles"]["limit_hits"] = [LIMIT_HIT]
    save["problems"] = [{"kind": "recompile limit", "names": []}, {"kind": "check", "names": ["saved adapter"]}]
    report = fake.write(tmp_path / "report.json", fake.report([depth, save]))

    assert record_known_failures.main([str(report), "--budgets", str(budgets), "--write"]) == 0
    loaded = BudgetFile.load(budgets)
    # The cause that names the wrapper's limit explains the widening: the entry keeps no reason of its own.
    widened = loaded.entries["llama-tiny/frod/depth"]
    assert widened.known_recompile_limit == ("wrapped_func at transformers/utils/deprecation.py",)
    assert (widened.known_check, widened.known_failure) == (("depth growth",), "")
    # A person's reason does not cover what it never named: the widening is proposed, quoting the old reason.
    reviewed = loaded.entries["opt-tiny/frod/save-load"]
    assert reviewed.known_recompile_limit == ("wrapped_func at transformers/utils/deprecation.py",)
    assert reviewed.known_failure.startswith("proposed: older; now also: Dynamo hits its recompile_limit (8)")
    assert loaded.proposed_reasons() == ["opt-tiny/frod/save-load"]
    out = capsys.readouterr().out
    assert "llama-tiny/frod/depth: extended: known_recompile_limit" in out and "marked 2 known failure(s)" in out


def test_a_known_failure_that_holds_all_it_fails_on_is_left_alone(tmp_path, capsys):
    budgets = tmp_path / "budgets.toml"
    entry = '[cases."llama-tiny/frod/depth"]\nknown_check = "depth growth"\n'
    budgets.write_text(CAUSES + entry + 'known_recompile_limit = "wrapped_func at transformers/utils/deprecation.py"\n')
    before = budgets.read_text()
    depth = fake.case("llama-tiny/frod/depth", "failed", message="depth growth, and the wrapper at the limit")
    depth["recompiles"]["limit_hits"] = [LIMIT_HIT]
    depth["problems"] = [{"kind": "recompile limit", "names": []}, {"kind": "check", "names": ["depth growth"]}]
    report = fake.write(tmp_path / "report.json", fake.report([depth]))
    assert record_known_failures.main([str(report), "--budgets", str(budgets), "--write"]) == 0
    assert budgets.read_text() == before
    assert "marked 0 known failure(s)" in capsys.readouterr().out


def test_a_new_known_failure_a_cause_names_gets_no_reason_of_its_own(tmp_path, capsys):
    budgets = tmp_path / "budgets.toml"
    budgets.write_text(CAUSES)
    case = fake.case("llama-tiny/lora-dora/multi-adapter", "failed", message="the wrapper at the limit")
    case["recompiles"]["limit_hits"] = [LIMIT_HIT]
    case["problems"] = [{"kind": "recompile limit", "names": []}]
    report = fake.write(tmp_path / "report.json", fake.report([case]))
    assert record_known_failures.main([str(report), "--budgets", str(budgets), "--write"]) == 0
    entry = BudgetFile.load(budgets).entries["llama-tiny/lora-dora/multi-adapter"]
    assert entry.known_recompile_limit == ("wrapped_func at transformers/utils/deprecation.py",)
    assert entry.known_failure == ""
    assert [text for text in entry.known_because if "the wrapper recompiles per caller" in text]
