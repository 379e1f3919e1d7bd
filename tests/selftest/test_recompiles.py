"""Recompile auditing fails, with the guard reason, on toy modules that recompile on purpose."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from compile_audit.probe.depth import growth_with_depth
from compile_audit.probe.guards import parse_guard_failure
from compile_audit.rules.budgets import Budget
from compile_audit.rules.case import CaseAudit, KnownFailureConfirmed
from compile_audit.rules.verdict import Kind, observed
from tests.selftest import toys

pytestmark = pytest.mark.selftest


def _run(audit: CaseAudit, module: torch.nn.Module, plan, *, dynamic):
    compiled = audit.compile(module, dynamic=dynamic)
    for name, kind, length in plan:
        module.train(kind == "train")
        with audit.phase(name, kind), torch.set_grad_enabled(kind == "train"):
            compiled(torch.randn(length, 4))


TRAIN_EVAL_TRAIN = [("train-1", "train", 2), ("eval-1", "eval", 2), ("train-2", "train", 2), ("eval-2", "eval", 2)]


def test_train_eval_switch_is_one_expected_recompile():
    audit = CaseAudit("toy/clean/train-eval", Budget())
    _run(audit, toys.Clean(), TRAIN_EVAL_TRAIN, dynamic=True)
    audit.steady_state_after("train-2")
    assert [r.expected for r in audit.result.recompiles] == [True]
    assert audit.verdict().status == "passed"


def test_a_dropped_cache_entry_recompiles_at_the_phase_boundary_named_by_its_frame():
    """A guarded object that dies takes its cache entry with it. The audit collects garbage before each phase and
    pauses the collector during it, so the class a call made dies at the next phase's start, every run: the next
    phase recompiles with no guard failure, named by the frame an earlier compile of it compiled."""
    for _ in range(2):
        audit = CaseAudit("toy/class-per-call/train", Budget())
        _run(audit, toys.ClassPerCall(), [(f"train-{i}", "train", 2) for i in range(3)], dynamic=True)
        # The class statement is a break before the frame's first operation: a root, and these recompiles of the
        # frame resumed after it are its consequences (all_recompiles holds them too).
        dropped = [r for r in audit.result.all_recompiles if not r.failures]
        assert [r.phase for r in dropped] and all(r.phase != "train-0" for r in dropped), audit.result.all_recompiles
        assert all("resume_in_forward" in r.frame and "tests/selftest/toys.py" in r.frame for r in dropped), dropped
        assert all("frame " not in s for s in audit.result.recompile_signatures)


def test_python_attribute_changed_in_forward_recompiles_unexpectedly():
    audit = CaseAudit("toy/counter/train", Budget())
    _run(audit, toys.CountsCalls(), [(f"train-{i}", "train", 2) for i in range(3)], dynamic=True)
    recompiles = audit.result.unexpected_recompiles
    assert len(recompiles) == 2
    assert "calls" in recompiles[0].reason
    message = audit.verdict().message
    assert "unexpected recompiles: 2 > budget 0" in message
    assert "UNEXPECTED" in message and "[train-1]" in message and "calls" in message
    assert "toys.py" in message  # the recompiled frame: forward at tests/selftest/toys.py:<line>


def test_shape_change_with_dynamic_off_recompiles_with_size_reason():
    audit = CaseAudit("toy/clean/static", Budget())
    _run(audit, toys.Clean(), [("train-1", "train", 2), ("train-2", "train", 3)], dynamic=False)
    (recompile,) = audit.result.recompiles
    assert not recompile.expected
    assert "size" in recompile.reason.lower()
    assert "unexpected recompiles: 1 > budget 0" in audit.verdict().message


def test_steady_state_violation_is_reported_with_phase_and_reason():
    audit = CaseAudit("toy/counter/steady", Budget(unexpected_recompiles=5, recompiles=5, note="x", recorded=True))
    _run(audit, toys.CountsCalls(), TRAIN_EVAL_TRAIN, dynamic=True)
    audit.steady_state_after("train-2")
    steady = [p.text for p in audit.verdict().problems if p.kind is Kind.STEADY_STATE]
    assert steady and "[eval-2]" in steady[0] and "calls" in steady[0]


def test_training_flag_guard_is_shortened_and_located():
    reason = (
        "0/0: self.__dict__['_modules']['base']._modules['drop'].training == True  # F.dropout(...)\n"
        "User stack trace:\n"
        '  File "/x/site-packages/peft/tuners/lora/layer.py", line 12, in forward\n'
        "    y = dropout(x)\n"
        '  File "/x/site-packages/torch/nn/modules/dropout.py", line 73, in forward\n'
    )
    failure = parse_guard_failure(reason)
    assert failure.guard == "self.base.drop.training == True"
    assert failure.location == "peft/tuners/lora/layer.py:12"
    assert failure.is_mode_switch
    assert not parse_guard_failure("0/1: tensor 'x' size mismatch at index 0").is_mode_switch


def test_a_phase_can_expect_a_named_guard_failure():
    audit = CaseAudit("toy/clean/automatic-dynamic", Budget())
    compiled = audit.compile(toys.Clean(), dynamic=None)
    with audit.phase("static", "train"):
        compiled(torch.randn(2, 4))
    with audit.phase("mark-dynamic", "train", expect=("size mismatch",)):
        compiled(torch.randn(3, 4))
    with audit.phase("dynamic", "train"):
        compiled(torch.randn(5, 4))
    assert [(r.phase, r.expected) for r in audit.result.recompiles] == [("mark-dynamic", True)]
    assert audit.verdict().status == "passed"


def test_recompile_limit_hit_fails_whatever_the_budget_and_never_asks_to_tighten():
    """Dynamo gives up on a frame at its recompile limit and runs it eagerly: counts collapse, the case fails."""
    generous = Budget(graph_breaks=9, recompiles=99, unexpected_recompiles=99, note="generous", recorded=True)
    audit = CaseAudit("toy/counter/limit", generous)
    with torch._dynamo.config.patch(recompile_limit=2):
        _run(audit, toys.CountsCalls(), [(f"train-{i}", "train", 2) for i in range(5)], dynamic=True)
    (hit,) = audit.result.limit_hits
    assert hit.phase == "train-2" and "forward at tests/selftest/toys.py" in hit.frame
    assert hit.limit == "recompile_limit (2)" and "calls" in hit.last_guard
    verdict = audit.verdict(updating=True)  # not even --update-budgets may record it
    assert verdict.status == "failed" and not verdict.feeds_budget
    assert [p.kind for p in verdict.problems] == [Kind.RECOMPILE_LIMIT]
    assert "Dynamo hit its recompile limit on 1 frame(s)" in verdict.message
    assert "[train-2] forward at tests/selftest/toys.py" in verdict.message
    held = _recorded_at_the_limit(audit.result)
    known = CaseAudit("toy/counter/limit", held)
    known.result = audit.result
    assert known.verdict().status == "xfailed" and known.verdict().feeds_budget
    elsewhere = dataclasses.replace(held, known_recompile_limit=("forward at tests/selftest/other.py",))
    # A limit hit on another frame than the one named is not held.
    other = CaseAudit("toy/counter/limit", elsewhere)
    other.result = audit.result
    assert other.verdict().status == "failed" and not other.verdict().feeds_budget


def test_a_known_failure_holds_every_problem_it_names_and_only_those():
    """A case may fail in two named ways at once (a frame at the limit and a failed check): an entry naming both holds
    both; naming one leaves the other failing the case, by name."""
    audit = CaseAudit("toy/counter/limit", Budget())
    with torch._dynamo.config.patch(recompile_limit=2):
        _run(audit, toys.CountsCalls(), [(f"train-{i}", "train", 2) for i in range(5)], dynamic=True)
    audit.expect("outputs drift from eager", check="parity")
    held = _recorded_at_the_limit(audit.result)
    both = dataclasses.replace(held, known_check=("parity",))
    for budget, status in ((held, "failed"), (both, "xfailed")):
        verdict = _verdict(budget, audit)
        assert verdict.status == status, verdict.message
    assert "it holds nothing else; these problems are new:\n- outputs drift from eager" in _verdict(held, audit).message
    # A known failure that no longer occurs names every field it holds.
    assert "known_check = 'parity'" in _verdict(both, audit, replay=False).message


def _verdict(budget: Budget, audit: CaseAudit, *, replay: bool = True):
    """What `budget` says of audit's run (replay), or of a run of the same case where nothing went wrong."""
    judged = CaseAudit(audit.case_id, budget)
    if replay:
        judged.result, judged.checks = audit.result, audit.checks
    return judged.verdict()


def _recorded_at_the_limit(result) -> Budget:
    """The budget --update-budgets records from a run that stopped at the limit its known failure names."""
    seen = observed(result)
    return Budget(
        graph_breaks=seen.graph_breaks,
        recompiles=seen.recompiles,
        unexpected_recompiles=seen.unexpected_recompiles,
        note="counted up to the limit",
        known_failure="recompiles on every call",
        known_recompile_limit=("forward at tests/selftest/toys.py",),
        break_signatures=seen.break_signatures,
        recompile_signatures=seen.recompile_signatures,
        recorded=True,
    )


def test_known_failure_stops_at_the_phase_that_hits_the_limit():
    """Once a known failure hits the limit again its verdict is settled: the scenario stops, saving the rest."""
    first = CaseAudit("toy/counter/limit", Budget())
    with torch._dynamo.config.patch(recompile_limit=2):
        _run(first, toys.CountsCalls(), [(f"train-{i}", "train", 2) for i in range(3)], dynamic=True)
    audit = CaseAudit("toy/counter/limit", _recorded_at_the_limit(first.result))
    with torch._dynamo.config.patch(recompile_limit=2), pytest.raises(KnownFailureConfirmed, match="train-2"):
        _run(audit, toys.CountsCalls(), [(f"train-{i}", "train", 2) for i in range(5)], dynamic=True)
    assert [p.name for p in audit.result.phases] == ["train-0", "train-1", "train-2"]
    assert audit.verdict().status == "xfailed"


def _phases_of(module: torch.nn.Module) -> list:
    audit = CaseAudit("toy/deep/train", Budget())
    _run(audit, module, [("train-1", "train", 2), ("eval-1", "eval", 2), ("train-2", "train", 2)], dynamic=True)
    return audit.result.phases


def test_compile_work_growing_with_depth_is_reported():
    """Each layer specializes on its own index behind a break: one more frame compile per layer."""
    grew = growth_with_depth(
        _phases_of(toys.Deep(1, toys.LayerIndexed)), _phases_of(toys.Deep(4, toys.LayerIndexed)), 4
    )
    assert grew and grew[0].startswith("frames compiled") and "at 4 layers vs" in grew[0]
    assert growth_with_depth(_phases_of(toys.Deep(1, toys.Clean)), _phases_of(toys.Deep(4, toys.Clean)), 4) == []


def test_a_recompile_is_signed_by_its_newest_cache_entry_not_the_first_listed():
    """Dynamo lists cache entries most recently used first: after merged, unmerged and merged again, the unmerged
    entry (0/0) is listed before the merged one (0/1), whose count guard is what the new recompile adds."""
    audit = CaseAudit("toy/merged-counter/merge", Budget())
    module = toys.CountsMergedCalls()
    compiled = audit.compile(module, dynamic=True)
    for name, merged in (("unmerged-1", False), ("merged-1", True), ("unmerged-2", False), ("merged-2", True)):
        module.merged = merged
        with audit.phase(name, "eval"), torch.no_grad():
            compiled(torch.randn(2, 4))
    last = audit.result.recompiles[-1]
    assert last.phase == "merged-2" and len(last.failures) == 2, audit.result.recompiles
    assert "merged_calls" in last.signature, last.signature
    assert last.reason.startswith(last.failures[0].entry) and "merged_calls" in last.reason.split(";")[0]
