"""The budgets file: malformed input names file and line; the ratchet fails on a beaten budget."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from compile_audit.rules.budgets import Budget, BudgetFile, BudgetFileError, Observed, compare
from compile_audit.rules.case import CaseAudit
from compile_audit.rules.verdict import Kind
from compile_gate.session import GateSession
from tests.selftest import toys

pytestmark = pytest.mark.selftest
REPO_ROOT = Path(__file__).resolve().parents[2]

GOOD = """
[versions.cpu]
torch = "2.13.0"

[cases."llama-tiny/loha/train-eval-train"]
graph_breaks = 4
expected_recompiles = 1
note = "LoHa: data-dependent branching"
"""


def _write(tmp_path, text):
    path = tmp_path / "budgets.toml"
    path.write_text(text)
    return path


def test_round_trip_keeps_entries_and_lines(tmp_path):
    budgets = BudgetFile.load(_write(tmp_path, GOOD))
    entry = budgets.budget_for("llama-tiny/loha/train-eval-train")
    assert (entry.graph_breaks, entry.recompiles, entry.line) == (4, 1, 5)
    assert budgets.budget_for("unknown/case") == Budget()
    again = BudgetFile.load(_write(tmp_path, budgets.dumps()))
    assert again.entries.keys() == budgets.entries.keys() and again.versions == budgets.versions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[cases."a/b/c"]\ngraph_breaks = = 1\n', ":2: not valid TOML"),
        ('[cases."a/b/c"]\ngraph_breaks = -1\n', ":1: entry 'a/b/c': graph_breaks must be a non-negative integer"),
        (
            '\n\n[cases."a/b/c"]\ngraph_breaks = 2\n',
            ":3: entry 'a/b/c': graph_breaks=2, unexpected_recompiles=0 but no note",
        ),
        ('[cases."a/b/c"]\ngraph_breaks = 0\nbreaks = 1\n', ":1: entry 'a/b/c': unknown key(s) ['breaks']"),
        (
            '[cases."a/b/c"]\nrecompiles = 2\nnote = "x"\n',
            ":1: entry 'a/b/c': recompiles is not a field; write expected_recompiles",
        ),
        ("[budgets]\nx = 1\n", "unknown top-level table(s) ['budgets']"),
        (
            '[cases."a/b/c"]\ngraph_breaks = 1\nbreak_signatures = ["a.py in f: print"]\n',
            ":1: entry 'a/b/c': graph_breaks=1, unexpected_recompiles=0 but no note; no cause names ['a.py in f: p",
        ),
        ('[causes.x]\nnote = "why"\nsignatures = []\n', ":1: cause 'x': signatures is empty"),
        ('[causes.x]\nnote = "why"\nwhy = 1\nsignatures = ["a"]\n', ":1: cause 'x': unknown key(s) ['why']"),
        ('[cases."a/b/c"]\nknown_failure = 1\n', ":1: entry 'a/b/c': known_failure must be a string"),
    ],
    ids=[
        "toml-syntax",
        "negative",
        "no-note",
        "unknown-key",
        "unexpected-above-total",
        "unknown-table",
        "no-note-no-cause",
        "cause-names-nothing",
        "cause-unknown-key",
        "known-not-str",
    ],
)
def test_malformed_file_names_file_line_and_entry(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(BudgetFileError) as error:
        BudgetFile.load(path)
    assert str(path) in str(error.value)
    assert expected in str(error.value)


def test_beaten_budget_asks_to_tighten():
    audit = CaseAudit("toy/clean/forward", Budget(graph_breaks=2, note="was 2", line=7, recorded=True))
    audit.graph_breaks(toys.Clean(), torch.randn(2, 4), call="forward")
    verdict = audit.verdict(where="tests/compile_budgets.toml:7")
    assert verdict.status == "failed" and verdict.warnings == ()
    (problem,) = verdict.problems
    assert problem.kind is Kind.TIGHTEN
    assert problem.text.startswith("tighten the budget (tests/compile_budgets.toml:7)")
    assert "graph breaks: 0 < budget 2" in problem.text
    verdict = audit.verdict(on_recorded_versions=False)  # other versions than the file records
    assert verdict.status == "passed" and "tighten the budget" in verdict.warnings[0]


def test_a_new_root_named_by_its_graph_break_id_fails_on_any_versions():
    """A graph-break id does not change with upstream's wording: a root the budget does not list fails everywhere."""
    other = "tests/selftest/toys.py in forward: gb0000"
    budget = Budget(graph_breaks=1, note="the toy's branch", break_signatures=(other,), line=3, recorded=True)
    audit = CaseAudit("toy/branch/forward", budget, under_test=("tests",))
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    (root,) = audit.result.roots
    assert root.kind.startswith("gb") and root.identity == f"tests/selftest/toys.py in forward: {root.kind}"
    for on_recorded_versions in (True, False):
        verdict = audit.verdict(on_recorded_versions=on_recorded_versions)
        assert verdict.status == "failed" and Kind.NEW_ROOT in {p.kind for p in verdict.problems}
        assert f"new graph break {root.identity!r}" in verdict.message


def test_a_new_root_wholly_upstream_fails_on_the_recorded_versions_and_warns_on_others():
    """A root with no frame of the code under test on its stack (torch's own FSDP wrapper) changes with upstream's
    code: judged like the ratchet. The counts still bind."""
    budget = Budget(graph_breaks=1, note="the toy's branch", break_signatures=("x.py in f: gb0000",), recorded=True)
    audit = CaseAudit("toy/branch/forward", budget, under_test=("peft",))
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    assert Kind.NEW_SIGNATURE in {p.kind for p in audit.verdict().problems}
    verdict = audit.verdict(on_recorded_versions=False)
    assert verdict.status == "passed" and any("new graph break" in w for w in verdict.warnings)


def test_a_new_signature_in_upstream_words_fails_on_the_recorded_versions_and_warns_on_others(monkeypatch):
    """A root without a graph-break id (a torch without the registry) is named by Dynamo's headline, which upstream
    rewords between releases: on other versions the counts bind, the signature warns."""
    monkeypatch.setattr("compile_audit.probe.graph_breaks.graph_break_id", lambda reason: "")
    other = "tests/selftest/toys.py in forward: a reason worded by another torch"
    budget = Budget(graph_breaks=1, note="the toy's branch", break_signatures=(other,), line=3, recorded=True)
    audit = CaseAudit("toy/branch/forward", budget)
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    verdict = audit.verdict()
    assert verdict.status == "failed" and Kind.NEW_SIGNATURE in {p.kind for p in verdict.problems}
    verdict = audit.verdict(on_recorded_versions=False)
    assert verdict.status == "passed"
    assert any("new graph break" in w and "recorded on other versions" in w for w in verdict.warnings)
    over = CaseAudit("toy/branch/forward", Budget(note="none allowed", line=3, recorded=True))
    over.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    verdict = over.verdict(on_recorded_versions=False, versions_note="on other versions than the budget's: torch 9")
    assert verdict.status == "failed" and "graph breaks: 1 > budget 0" in verdict.message
    assert verdict.message.splitlines()[0].endswith("; on other versions than the budget's: torch 9")


def test_compare_over_and_under():
    verdict = compare(Observed(3, 2, 1), Budget(graph_breaks=1, recompiles=4, unexpected_recompiles=1, recorded=True))
    assert verdict.over == ["graph breaks: 3 > budget 1"]
    assert verdict.under == ["expected recompiles: 1 < budget 3"]


def test_an_expected_recompile_is_bounded_by_itself_not_by_the_total():
    # 1 unexpected + 1 expected allowed; 0 unexpected + 2 expected has the same total, and fails on the expected one
    budget = Budget(recompiles=2, unexpected_recompiles=1, recorded=True)
    assert compare(Observed(0, 2, 0), budget).over == ["expected recompiles: 2 > budget 1"]


def test_record_keeps_a_hand_written_note_and_writes_none_itself(tmp_path):
    budgets = BudgetFile.load(_write(tmp_path, GOOD))
    budgets.record("llama-tiny/loha/train-eval-train", Observed(6, 1, 0, ("a.py in f: print",)))
    assert budgets.entries["llama-tiny/loha/train-eval-train"].break_signatures == ("a.py in f: print",)
    assert budgets.entries["llama-tiny/loha/train-eval-train"].note == "LoHa: data-dependent branching"
    budgets.record("new/case/x", Observed(1, 0, 0, ("a.py in f: print",)))
    assert budgets.entries["new/case/x"].note == ""


CAUSED = """
[causes.wrapper]
note = "transformers' wrapper guards on its kwargs"
link = "https://example.invalid/issue/1"
signatures = ["wrapped_func at transformers/utils/deprecation.py: *"]

[cases."a/b/c"]
unexpected_recompiles = 2
recompile_signatures = [
    "wrapped_func at transformers/utils/deprecation.py: len(kwargs) == 2",
    "wrapped_func at transformers/utils/deprecation.py: kwargs['x'] size mismatch",
]
"""


def test_a_cause_explains_the_signatures_it_names_in_every_case(tmp_path):
    budgets = BudgetFile.load(_write(tmp_path, CAUSED))
    entry = budgets.budget_for("a/b/c")
    assert entry.explained_by == (
        "cause 'wrapper': transformers' wrapper guards on its kwargs (https://example.invalid/issue/1)",
    )
    assert budgets.unexplained() == {} and budgets.unused_causes() == []
    again = BudgetFile.load(_write(tmp_path, budgets.dumps()))
    assert again.causes == {
        name: dataclasses.replace(c, line=again.causes[name].line) for name, c in budgets.causes.items()
    }


def test_an_update_proposes_a_cause_and_leaves_its_note_to_a_person(tmp_path):
    budgets = BudgetFile.load(_write(tmp_path, CAUSED))
    seen = Observed(1, 0, 0, ("peft/tuners/x/layer.py in forward: Unsupported method call",))
    budgets.apply({"a/b/new": budgets.proposal("a/b/new", seen)}, {"a/b/new": "cpu"}, {"torch": "2.13.0"})
    proposed = budgets.causes["unexplained: peft/tuners/x/layer.py in forward"]
    assert proposed.note == "" and proposed.signatures == seen.break_signatures
    assert budgets.unexplained() == {"a/b/new": list(seen.break_signatures)}
    reloaded = BudgetFile.load(_write(tmp_path, budgets.dumps()))  # the proposal loads; the review check fails on it
    assert reloaded.unexplained() == {"a/b/new": list(seen.break_signatures)}
    assert "not explained yet" in reloaded.budget_for("a/b/new").explained_by[0]


def test_an_entry_that_says_only_the_default_is_not_written(tmp_path):
    budgets = BudgetFile.load(_write(tmp_path, GOOD))
    budgets.record("new/case/quiet", Observed(0, 1, 0))
    text = budgets.dumps()
    assert "new/case/quiet" not in text and "llama-tiny/loha/train-eval-train" in text
    budgets.record("new/case/breaks", Observed(0, 2, 1, (), ("f at a.py: x",)))
    written = budgets.dumps().split('[cases."new/case/breaks"]')[1].split("[cases.")[0]
    assert written.splitlines()[1:] == [
        "unexpected_recompiles = 1",
        "expected_recompiles = 1",
        'recompile_signatures = ["f at a.py: x"]',
    ]


def test_stale_entries_are_listed(tmp_path):
    budgets = BudgetFile.load(_write(tmp_path, GOOD))
    assert budgets.stale({"llama-tiny/lora/train-eval-train"}) == ["llama-tiny/loha/train-eval-train"]
    assert budgets.stale({"llama-tiny/loha/train-eval-train"}) == []


DRIFTS = Budget(known_failure="logits drift from eager", known_check=("parity",), line=3, recorded=True)


def _audited(case_id: str, module: torch.nn.Module, budget: Budget, check: str | None = None) -> CaseAudit:
    """A toy's audit; ``check``: the name of a check it fails (a scenario's parity, say)."""
    audit = CaseAudit(case_id, budget)
    audit.graph_breaks(module, torch.randn(2, 4), call="forward")
    if check is not None:
        audit.expect("compiled vs eager logits differ", check=check)
    return audit


def test_known_failure_is_expected_while_failing_and_fails_once_it_passes():
    known = DRIFTS
    verdict = _audited("toy/clean/forward", toys.Clean(), known, check="parity").verdict()
    assert verdict.status == "xfailed" and "known failure (logits drift from eager)" in verdict.message
    fixed = CaseAudit("toy/clean/forward", known)
    fixed.graph_breaks(toys.Clean(), torch.randn(2, 4), call="forward")
    verdict = fixed.verdict(where="tests/compile_budgets.toml:3")
    assert verdict.status == "failed"
    assert "passes now, but tests/compile_budgets.toml:3 records it as a known failure" in verdict.message
    assert CaseAudit("toy/clean/forward", Budget()).verdict().status == "passed"


def test_a_known_failure_does_not_hold_a_new_break_or_another_check():
    verdict = _audited("toy/branch/forward", toys.BranchesOnData(), DRIFTS, check="parity").verdict()
    assert verdict.status == "failed" and [p.kind for p in verdict.held] == [Kind.CHECK]
    assert "the known failure (known_check = 'parity') still holds, and it holds nothing else" in verdict.message
    assert "graph breaks: 1 > budget 0" in verdict.message and "tests/selftest/toys.py" in verdict.message
    verdict = _audited("toy/clean/forward", toys.Clean(), DRIFTS, check="scenario check").verdict()
    assert verdict.status == "failed" and "did not occur" in verdict.message


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ('known_failure = "why"\n', "known_failure needs at least one of known_raises"),
        ('known_failure = "why"\nknown_raises = "A"\nknown_check = "b"\n', "it cannot be combined with known_check"),
        ('known_failure = "why"\nknown_check = ["b", "b"]\n', "known_check names ['b'] twice"),
        ('known_failure = "why"\nknown_check = [1]\n', "known_check must be a string or a list of strings"),
        ('known_raises = "KeyError"\n', "a known failure without known_failure (the reason, in a person's words)"),
    ],
)
def test_a_known_failure_must_name_what_it_holds(tmp_path, entry, problem):
    path = tmp_path / "budgets.toml"
    path.write_text(f'[cases."a/b/c"]\n{entry}')
    with pytest.raises(BudgetFileError, match=re.escape(problem)):
        BudgetFile.load(path)


def test_update_mode_fails_only_on_what_a_budget_cannot_hold():
    """--update-budgets: over budget is not a failure (the budget is being rewritten), a failed check still is."""
    audit = CaseAudit("toy/branch/forward", Budget())
    audit.graph_breaks(toys.BranchesOnData(), torch.randn(2, 4), call="forward")
    assert audit.verdict(updating=True).status == "passed"
    audit.expect("compiled vs eager logits differ")
    verdict = audit.verdict(updating=True)
    assert verdict.status == "failed" and [p.kind for p in verdict.problems] == [Kind.CHECK]


def test_shards_updating_one_budgets_file_each_add_their_cases(tmp_path):
    """Two runs started from the same file (shards side by side): the second writer keeps the first one's cases."""
    path = _write(tmp_path, '[cases."kept"]\nexpected_recompiles = 1\n')
    shards = [GateSession(BudgetFile.load(path), tmp_path, updating=True) for _ in range(2)]
    for shard, case_id in zip(shards, ("shard-1-case", "shard-2-case"), strict=True):
        shard.proposals[case_id] = Budget(graph_breaks=1, recompiles=2, note="why", recorded=True)
    for shard in shards:
        shard.finish(known_case_ids={"kept", "shard-1-case", "shard-2-case"})
    assert sorted(BudgetFile.load(path).entries) == ["kept", "shard-1-case", "shard-2-case"]


PARTIAL = """[versions.cpu]
torch = "2.12.0"

[cases."a/b/kept"]
graph_breaks = 1
expected_recompiles = 1
note = "a hand-written note, kept byte for byte"

[cases."a/b/updated"]
expected_recompiles = 1
"""


def test_a_partial_update_on_other_versions_changes_only_its_own_cases(tmp_path):
    path = tmp_path / "budgets.toml"
    path.write_text(PARTIAL)
    budgets = BudgetFile.load(path)
    proposal = Budget(graph_breaks=1, recompiles=3, note="why", recorded=True)
    budgets.apply({"a/b/updated": proposal}, {"a/b/updated": "cpu"}, {"torch": "2.13.0"})
    budgets.write()
    text = path.read_text()
    assert '[versions.cpu]\ntorch = "2.12.0"\n' in text  # the file's versions stay
    kept = PARTIAL.split('[cases."a/b/updated"]')[0].split("\n\n", 1)[1].rstrip("\n")
    assert kept + "\n" in text  # the other entry, byte for byte
    reloaded = BudgetFile.load(path)
    assert reloaded.entries["a/b/updated"].recorded_with == (("torch", "2.13.0"),)
    assert reloaded.versions_match("cpu", {"torch": "2.13.0"}, "a/b/updated")
    assert not reloaded.versions_match("cpu", {"torch": "2.13.0"}, "a/b/kept")
    assert reloaded.versions_match("cpu", {"torch": "2.12.0"}, "a/b/kept")
    # Recorded again on the file's versions, the entry drops its own.
    reloaded.apply({"a/b/updated": proposal}, {"a/b/updated": "cpu"}, {"torch": "2.12.0"})
    assert reloaded.entries["a/b/updated"].recorded_with == ()


def test_an_entry_that_counts_allows_only_the_expected_recompiles_it_records(tmp_path):
    budgets = BudgetFile.load(
        _write(
            tmp_path,
            '[cases."a/b/counts"]\ngraph_breaks = 1\nnote = "x"\n'
            '[cases."a/b/eval"]\nexpected_recompiles = 1\n'
            '[cases."a/b/raises"]\nknown_failure = "why"\nknown_raises = "KeyError"\n',
        )
    )
    counts, one_expected, raises = (budgets.budget_for(f"a/b/{name}") for name in ("counts", "eval", "raises"))
    assert compare(Observed(1, 1, 0), counts).over == ["expected recompiles: 1 > budget 0"]
    assert compare(Observed(0, 2, 0), one_expected).over == ["expected recompiles: 2 > budget 1"]
    assert compare(Observed(0, 5, 0), raises).over == []  # no count recorded: any number of expected ones


def test_an_array_is_one_line_where_it_fits_else_one_signature_per_line(tmp_path):
    budgets = BudgetFile.load(_write(tmp_path, GOOD))
    short, long = ("f at a.py: x", "g at b.py: y"), ("f at a.py: " + "x" * 120, "g at b.py: " + "y" * 120)
    for name, signatures in (("short", short), ("long", long)):
        budgets.entries[f"a/b/{name}"] = Budget(
            recompiles=2, unexpected_recompiles=2, recompile_signatures=signatures, note="why", recorded=True
        )
    text = budgets.dumps()
    assert 'recompile_signatures = ["f at a.py: x", "g at b.py: y"]\n' in text
    assert "recompile_signatures = [\n" + "".join(f'    "{s}",\n' for s in long) + "]\n" in text
    assert BudgetFile.load(_write(tmp_path, text)).budget_for("a/b/long").recompile_signatures == long


CAUSED_KNOWN_FAILURE = """
[causes.saved-names]
note = "the compiled wrapper's names are saved"
known_failures = ["*/inject-compiled-base: raises KeyError"]

[cases."a/b/inject-compiled-base"]
known_raises = "KeyError"
"""


def test_a_cause_that_names_a_known_failure_is_its_reason(tmp_path):
    budgets = BudgetFile.load(_write(tmp_path, CAUSED_KNOWN_FAILURE))
    entry = budgets.budget_for("a/b/inject-compiled-base")
    assert entry.known and entry.known_reason == "cause 'saved-names': the compiled wrapper's names are saved"
    assert budgets.unused_causes() == []
    assert BudgetFile.load(_write(tmp_path, budgets.dumps())).causes["saved-names"].known_failures == (
        "*/inject-compiled-base: raises KeyError",
    )
    verdict = _audited("a/b/inject-compiled-base", toys.Clean(), entry).verdict()
    assert verdict.status == "failed" and "the compiled wrapper's names are saved" in verdict.message
    other_case = CAUSED_KNOWN_FAILURE.replace("a/b/inject-compiled-base", "a/b/save-load")
    with pytest.raises(BudgetFileError, match=re.escape("no cause names 'a/b/save-load: raises KeyError'")):
        BudgetFile.load(_write(tmp_path, other_case))
