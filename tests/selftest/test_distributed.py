"""The distributed pieces fail when they should: ranks that diverge, hang or raise; DDP splits counted apart from
graph breaks; rank results that survive the trip to the parent whole. Toy modules on 2 gloo ranks (fork)."""

from __future__ import annotations

import contextlib
import time
import types

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from bench_models.distributed import ddp_buckets_of
from compile_audit.artifacts import diff, matrix
from compile_audit.artifacts.report import summary_table
from compile_audit.probe import ranks
from compile_audit.probe.ddp_splits import counting_ddp_splits
from compile_audit.probe.policy import CompilePolicy
from compile_audit.rules.budgets import Budget, BudgetFile, BudgetFileError
from compile_audit.rules.case import CaseAudit
from compile_audit.rules.rank_results import merge_rank_results, rank_divergence, tensors_from_data, tensors_to_data
from compile_audit.rules.result_data import result_from_data, result_to_data
from compile_audit.rules.verdict import judge
from tests.cases import cases_for
from tests.selftest import fake_reports, toys
from tests.test_distributed import enter_case_policy, rank_audit, rank_spec

pytestmark = pytest.mark.selftest

WORLD_SIZE = 2
TIMEOUT_S = 30


def _launch(fn, *args, timeout=TIMEOUT_S, tmp_path):
    # The cases' own start method (forkserver): forking this process is refused by torch once autograd's threads
    # have run in it, as earlier self-tests make them do on some Pythons (3.13).
    return ranks.launch(fn, args, world_size=WORLD_SIZE, timeout=timeout, workdir=tmp_path)


def train_alone(shipped, rank, world_size, sync):
    """A toy trained on this rank's own data; gradients averaged over the ranks only when ``sync``."""
    torch.manual_seed(0)
    model = toys.Clean().eval()
    trained = DistributedDataParallel(model) if sync else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        torch.manual_seed(100 * rank + step)
        trained(torch.randn(3, 4)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    shipped["weights"] = tensors_to_data({n: p.detach() for n, p in model.named_parameters()})


def test_ranks_that_train_different_weights_are_reported(tmp_path):
    outcomes = _launch(train_alone, False, tmp_path=tmp_path)
    assert [o.failure() for o in outcomes] == [None, None]
    message = rank_divergence("weights", [tensors_from_data(o.shipped["weights"]) for o in outcomes])
    assert message is not None
    assert "weights: the ranks diverged" in message
    assert "rank 1 differs from rank 0 in 2 of 2: linear.bias (max abs difference" in message


def test_ranks_that_average_gradients_agree(tmp_path):
    outcomes = _launch(train_alone, True, tmp_path=tmp_path / "ddp")
    assert [o.failure() for o in outcomes] == [None, None]
    assert rank_divergence("weights", [tensors_from_data(o.shipped["weights"]) for o in outcomes]) is None


def hang_on_rank_1(shipped, rank, world_size):
    shipped["started"] = True
    if rank == 1:
        time.sleep(600)  # PLANTED:hang


def test_a_hung_rank_is_a_failure_within_its_timeout(tmp_path):
    started = time.monotonic()
    outcomes = _launch(hang_on_rank_1, timeout=2, tmp_path=tmp_path)
    elapsed = time.monotonic() - started
    assert elapsed < 2 + ranks.STACK_DUMP_WAIT_S + 3
    assert outcomes[0].failure() is None
    failure = outcomes[1].failure()
    assert failure.startswith("rank 1 did not finish within 2 s and was killed with its process group")
    assert "in hang_on_rank_1" in failure  # the rank's Python stack, dumped before the kill
    assert outcomes[1].shipped == {"started": True}  # what it shipped before it hung


def raise_on_rank_1(shipped, rank, world_size):
    if rank == 1:
        raise RuntimeError("planted failure on rank 1")
    dist.barrier()  # waits for rank 1, which never comes


def test_a_rank_that_raises_fails_with_its_traceback_and_its_peers_are_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(ranks, "PEER_GRACE_S", 1.0)
    started = time.monotonic()
    outcomes = _launch(raise_on_rank_1, tmp_path=tmp_path)
    assert time.monotonic() - started < TIMEOUT_S / 2
    failure = outcomes[1].failure()
    assert failure.startswith("rank 1 raised:\nTraceback (most recent call last):")
    assert "RuntimeError: planted failure on rank 1" in failure
    assert outcomes[0].failure() is not None  # rank 0 failed in its barrier, or was killed after the grace


def audit_under_ddp(shipped, rank, world_size, planted_break):
    """The toy under DDP with one bucket per Linear (bucket cap: one Linear's bytes), audited."""
    torch.manual_seed(0)
    model = toys.TwoLinears(planted_break)
    cap = sum(p.numel() * p.element_size() for p in model.first.parameters())
    with ddp_buckets_of(cap):
        audit = CaseAudit("toy/ddp/train", Budget())
        compiled = audit.compile(DistributedDataParallel(model, bucket_cap_mb=cap / 2**20))
        with counting_ddp_splits(audit.counting_backend), audit.phase("train-1", "train"):
            compiled(torch.randn(2, 4)).sum().backward()
    shipped["audit"] = result_to_data(audit.result)


def _merged(tmp_path, planted_break):
    outcomes = _launch(audit_under_ddp, planted_break, tmp_path=tmp_path)
    assert [o.failure() for o in outcomes] == [None, None]
    return merge_rank_results([result_from_data(o.shipped["audit"]) for o in outcomes])


def test_ddp_splits_are_counted_apart_from_graph_breaks(tmp_path):
    result = _merged(tmp_path, planted_break=False)
    # DDP's own forward breaks before its first operation (its logger, its context manager): torch's roots, not the
    # toy's, and no split is counted as a break.
    upstream = {root.location.split(":")[0] for root in result.roots}
    assert upstream and not any(location.startswith("tests/") for location in upstream), upstream
    assert result.ddp_split_count == 2  # one per rank
    assert [p.graphs_compiled for p in result.phases] == [1, 1]
    verdict = judge("toy/ddp/train", result, Budget())
    assert verdict.status == "failed"
    assert f"toy/ddp/train: graph breaks (roots) {result.graph_break_count}/0, ddp splits 2/0," in verdict.message
    assert "ddp splits: 2 > budget 0" in verdict.message
    assert "[rank1/train-1] 1 graph split into 2 pieces at DDP bucket boundaries" in verdict.message
    signatures = tuple(sorted(result.break_signatures))
    budget = Budget(
        graph_breaks=result.graph_break_count,
        break_signatures=signatures,
        ddp_splits=2,
        note="DDPOptimizer",
        recorded=True,
    )
    assert judge("toy/ddp/train", result, budget).status == "passed"


def test_a_graph_break_under_ddp_is_still_a_break_at_its_line(tmp_path):
    result = _merged(tmp_path, planted_break=True)
    (root,) = [r for r in result.roots if r.location.startswith("tests/")]  # one place it stopped, on both ranks
    assert root.location == toys.planted_line("ddp-break") and root.hits == 2
    message = judge("toy/ddp/train", result, Budget()).message
    assert f"{toys.planted_line('ddp-break')} in forward [rank0/train-1, rank1/train-1 x2]" in message


def test_an_audit_result_survives_the_trip_from_a_rank_whole():
    audit = CaseAudit("toy/counter/train", Budget())
    module = toys.CountsCalls()
    compiled = audit.compile(module, dynamic=True)
    for name in ("train-1", "train-2"):
        with audit.phase(name, "train"):
            compiled(torch.randn(2, 4))
    audit.steady_state_after("train-1")
    assert audit.result.recompiles
    assert result_from_data(result_to_data(audit.result)) == audit.result


def test_merged_ranks_name_their_phases_and_keep_the_steady_state_per_rank():
    audit = CaseAudit("toy/counter/train", Budget())
    compiled = audit.compile(toys.CountsCalls(), dynamic=True)
    for name in ("train-1", "train-2", "train-3"):
        with audit.phase(name, "train"):
            compiled(torch.randn(2, 4))
    audit.steady_state_after("train-1")
    merged = merge_rank_results([audit.result, audit.result])
    names = ["rank0/train-1", "rank1/train-1", "rank0/train-2", "rank1/train-2", "rank0/train-3", "rank1/train-3"]
    assert [p.name for p in merged.phases] == names
    assert [p.name for p in merged.steady_state_compiles] == names[2:]
    assert {r.phase for r in merged.recompiles} == set(names[2:])
    only_rank_1 = merge_rank_results([None, audit.result])
    assert [p.name for p in only_rank_1.phases] == names[1::2]


def test_a_ddp_splits_budget_needs_a_note(tmp_path):
    path = tmp_path / "budgets.toml"
    path.write_text('[cases."a/b/ddp"]\ngraph_breaks = 0\nddp_splits = 2\n', encoding="utf-8")
    with pytest.raises(BudgetFileError, match="ddp_splits=2 but no note"):
        BudgetFile.load(path)
    path.write_text('[cases."a/b/ddp"]\nddp_splits = 2\nnote = "bucket boundaries"\n', encoding="utf-8")
    budgets = BudgetFile.load(path)
    assert budgets.budget_for("a/b/ddp").ddp_splits == 2
    assert "ddp_splits = 2" in budgets.dumps()


def test_ddp_splits_show_in_the_terminal_table_and_the_matrix():
    split = {**fake_reports.case("llama-tiny/lora/ddp"), "ddp_splits": {"count": 4, "budget": 4}}
    plain = fake_reports.case("llama-tiny/lora/train-eval-train")
    header, *rows = summary_table([fake_reports.record(split), fake_reports.record(plain)])
    assert header.split() == ["case", "breaks", "splits", "recompiles", "unexpected", "seconds", "status"]
    assert rows[0].split()[:3] == ["llama-tiny/lora/ddp", "0/0", "4/4"]
    assert "4 DDP splits" in matrix.cell(fake_reports.record(split), matrix.Footnotes())
    assert "DDP splits" not in matrix.cell(fake_reports.record(plain), matrix.Footnotes())
    assert "splits" not in summary_table([fake_reports.record(plain)])[0]


def test_a_change_of_ddp_splits_shows_in_the_diff():
    before = {**fake_reports.case("llama-tiny/lora/ddp"), "ddp_splits": {"count": 4, "budget": 4}}
    after = {**before, "ddp_splits": {"count": 6, "budget": 4}}
    before, after = fake_reports.record(before), fake_reports.record(after)
    changed = diff.compare_case(before, after, timing_threshold=0.1, memory_threshold=0.1)
    assert [c.text for c in changed.changes] == ["ddp splits 4 -> 6 (+2)"]
    assert changed.regressed


def policy_in_rank(shipped, rank, world_size, spec):
    with contextlib.ExitStack() as settings:
        rank_audit(spec, enter_case_policy(settings, spec, shipped), shipped)
        shipped["threads"] = torch.get_num_threads()
        shipped["fake_tensor_cache_enabled"] = torch._dynamo.config.fake_tensor_cache_enabled


def test_each_rank_runs_under_its_cases_compile_policy(tmp_path):
    """The spec a distributed case ships carries its compile policy, and each rank applies it: settings unlike the
    launching process's show in every rank."""
    policy = CompilePolicy(
        dynamo={"fake_tensor_cache_enabled": not torch._dynamo.config.fake_tensor_cache_enabled},
        threads=torch.get_num_threads() + 1,
        dynamic=False,  # the default is None: automatic dynamic shapes
    )
    case = cases_for("ddp")[0]
    spec = rank_spec(case, types.SimpleNamespace(budget=Budget()), policy)
    outcomes = _launch(policy_in_rank, spec, tmp_path=tmp_path)
    assert [o.failure() for o in outcomes] == [None, None]
    for outcome in outcomes:
        assert outcome.shipped["threads"] == policy.threads
        assert outcome.shipped["fake_tensor_cache_enabled"] == policy.dynamo["fake_tensor_cache_enabled"]
        assert outcome.shipped["policy"] == {"dynamo": dict(policy.dynamo), "threads": policy.threads, "dynamic": False}


def do_nothing(shipped, rank, world_size):
    shipped["rank"] = rank


def test_a_case_that_starts_ranks_says_its_footprint_misses_them(tmp_path):
    """What ranks run is in no footprint: the recorder active when they start says so, and the record carries it
    (``footprint_elsewhere``), so that the selection never counts those cases out on a footprint alone."""
    from compile_audit.probe.footprint import FootprintRecorder

    with FootprintRecorder(["tests"]) as idle:
        pass
    with FootprintRecorder(["tests"]) as recorder:
        outcomes = _launch(do_nothing, tmp_path=tmp_path)
    assert [o.failure() for o in outcomes] == [None, None]
    assert recorder.other_processes and not idle.other_processes
