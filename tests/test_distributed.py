"""Scenarios ddp and fsdp2: the PEFT model trained data-parallel on 2 local ranks, compiled in each rank.

Each case launches its ranks once (``compile_audit.probe.ranks``: fork on CPU, spawn where CUDA is initialized; gloo on
CPU, NCCL with one GPU per rank). Every rank builds the same seeded PEFT model, wraps it (DDP, or ``fully_shard``
on each decoder layer and the root), compiles it under its own audit and runs the plan on its half of each global
batch, then ships its audit, its losses and its trainable weights as JSON. The parent judges one result: every
rank's phases as ``rank<N>/<phase>``, counts summed over the ranks, against the case's budget.

DDP: Dynamo's DDPOptimizer splits each traced graph at DDP's gradient bucket boundaries; those splits are counted
as ``ddp_splits``, apart from graph breaks (``compile_audit.probe.ddp_splits``). The bucket cap is half the adapter's
trainable bytes, so the tiny model's adapter fills two buckets and the split is exercised (at DDP's default 25 MiB,
a few KiB of adapter weights make one bucket and nothing would be split).

Per case: breaks, splits and recompiles within budget, none unexpected; nothing compiles after the first
train -> eval -> train cycle; the mean of the ranks' losses equals a single-process eager run on the same global
batches; after training the trainable weights are identical on every rank and equal eager's.
Dropout is 0 (the adapter's and the base model's): each rank would draw its own masks, which a single-process run
cannot reproduce.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import bench_models
from bench_models import distributed
from compile_audit.probe.ddp_splits import counting_ddp_splits
from compile_audit.probe.parity import compare_losses, compare_tensors
from compile_audit.probe.policy import CompilePolicy
from compile_audit.probe.ranks import launch
from compile_audit.rules.budgets import Budget
from compile_audit.rules.case import CaseAudit, KnownFailureConfirmed
from compile_audit.rules.rank_results import (
    mean_over_ranks,
    merge_rank_results,
    rank_divergence,
    tensors_from_data,
    tensors_to_data,
)
from compile_audit.rules.result_data import result_from_data, result_to_data
from tests.cases import SHORT_CYCLE_ENDS, SHORT_CYCLE_PLAN

WORLD_SIZE = 2
RANK_TIMEOUT_S = {"cpu": 240, "cuda": 600}
OVERRIDES = {"dropout": 0.0}
PLAN, FIRST_CYCLE_ENDS = SHORT_CYCLE_PLAN, SHORT_CYCLE_ENDS


class RankFailed(Exception):
    """A rank raised, died or hung; the message holds each failed rank's traceback or last output, ``summary`` the
    first failed rank's own error in one line (what the report records as the case's error)."""

    def __init__(self, message: str, summary: str) -> None:
        super().__init__(message)
        self.summary = summary


def global_batch(case, step: int, length: int, device: str) -> dict[str, torch.Tensor]:
    return bench_models.make_batch(
        case["model"], case["method"], batch_size=WORLD_SIZE, seq_len=length, seed=step, device=device
    )


def rank_spec(case, case_audit, policy: CompilePolicy) -> dict:
    """What each rank gets of its case: identity, dtype, budget and compile policy (JSON-safe)."""
    return {
        **case.report_fields(),
        "id": case.id,
        "dtype": case.dtype,
        "budget": case_audit.budget.to_dict(),
        "policy": policy.to_dict(),
    }


def ran_under(policy: CompilePolicy) -> dict:
    """What a process runs under of a policy, read back from torch: its threads and each setting the policy names."""
    under = {"dynamo": {name: getattr(torch._dynamo.config, name) for name in policy.dynamo}}
    if policy.threads is not None:
        under["threads"] = torch.get_num_threads()
    under["dynamic"] = policy.dynamic  # a rank overwrites it with what its audit compiles with
    return under


def enter_case_policy(settings: contextlib.ExitStack, case: dict, shipped: dict) -> CompilePolicy:
    """A rank is a fresh interpreter: the case's policy (threads, Dynamo's settings, attention) is applied in it as
    the gate applies it around a test, and what the rank runs under ships back to be compared."""
    policy = CompilePolicy.from_dict(case["policy"])
    settings.enter_context(policy.applied())
    shipped["policy"] = ran_under(policy)
    return policy


def rank_audit(case: dict, policy: CompilePolicy, shipped: dict) -> CaseAudit:
    """The rank's audit, compiling with the policy's dynamic shapes; what it compiles with ships back."""
    audit = CaseAudit(case["id"], Budget.from_dict(case["budget"]), backend=case["backend"], dynamic=policy.dynamic)
    shipped["policy"]["dynamic"] = audit.dynamic
    return audit


def run_rank(shipped: dict, rank: int, world_size: int, case: dict) -> None:
    """One rank of a case: train and evaluate the wrapped, compiled model, shipping the audit after each phase."""
    device = f"cuda:{rank}" if case["tier"] == "cuda" else "cpu"
    dtype = getattr(torch, case["dtype"]) if case["dtype"] else None
    with contextlib.ExitStack() as settings:
        policy = enter_case_policy(settings, case, shipped)
        model = bench_models.build_peft_model(case["model"], case["method"], device=device, dtype=dtype, **OVERRIDES)
        distributed.without_dropout(model)
        audit = rank_audit(case, policy, shipped)
        if case["scenario"] == "ddp":
            bucket_bytes = max(1, distributed.trainable_bytes(model) // 2)
            settings.enter_context(distributed.ddp_buckets_of(bucket_bytes))
            wrapped = distributed.wrap_ddp(model, bucket_bytes, device)
        else:
            wrapped = distributed.shard_fsdp2(model)
        compiled = audit.compile(wrapped)
        settings.enter_context(counting_ddp_splits(audit.counting_backend))
        optimizer = bench_models.make_optimizer(model)
        shipped["losses"] = []
        for step, (name, kind, length) in enumerate(PLAN):
            batch = distributed.shard_batch(global_batch(case, step, length, device), rank, world_size)
            try:
                with audit.phase(name, kind):
                    if kind == "train":
                        shipped["losses"].append(bench_models.train_step(compiled, optimizer, batch).item())
                    else:
                        bench_models.eval_step(compiled, batch)
            except KnownFailureConfirmed:
                shipped["stopped_in"] = name
                return
            finally:
                shipped["audit"] = result_to_data(audit.result)
        audit.steady_state_after(FIRST_CYCLE_ENDS)
        shipped["audit"] = result_to_data(audit.result)
        shipped["trainable"] = tensors_to_data(distributed.full_trainable_state(model))


def eager_reference(case, model, device: str) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Losses and final trainable weights of one process training on the whole global batches."""
    optimizer = bench_models.make_optimizer(model)
    losses = [
        bench_models.train_step(model, optimizer, global_batch(case, step, length, device))
        for step, (_, kind, length) in enumerate(PLAN)
        if kind == "train"
    ]
    return losses, distributed.full_trainable_state(model)


def run_distributed_case(case, device, make_peft_model, case_audit, compile_policy, tmp_path) -> None:
    if case.tier == "cuda" and torch.cuda.device_count() < WORLD_SIZE:
        pytest.skip(f"{case.scenario} on the GPU tier needs {WORLD_SIZE} GPUs, {torch.cuda.device_count()} visible")
    # The same seeded build as every rank's; skips with the registry's reason.
    eager = distributed.without_dropout(make_peft_model(**OVERRIDES))
    spec = rank_spec(case, case_audit, compile_policy)
    outcomes = launch(
        run_rank,
        (spec,),
        world_size=WORLD_SIZE,
        timeout=RANK_TIMEOUT_S[case.tier],
        workdir=tmp_path,
        backend="nccl" if case.tier == "cuda" else "gloo",
    )
    expected = ran_under(compile_policy)
    differ = [o.shipped["policy"] for o in outcomes if o.shipped.get("policy", expected) != expected]
    if differ:
        message = f"a rank ran under {differ[0]}, not the case's compile policy {expected}"
        raise RankFailed(f"{case.id}: {message}", message)
    if any("audit" in o.shipped for o in outcomes):
        audits = [result_from_data(o.shipped["audit"]) if "audit" in o.shipped else None for o in outcomes]
        case_audit.result = merge_rank_results(audits)
    failures = [o.failure() for o in outcomes if o.failure()]
    if failures:
        summary = next(o.summary() for o in outcomes if o.failure())
        raise RankFailed(f"{case.id}: " + "\n\n".join(failures), summary)
    if any("stopped_in" in o.shipped for o in outcomes):
        return  # a known failure hit the recompile limit again and stopped the ranks: the verdict is settled

    tolerance = case.tolerance
    eager_losses, eager_weights = eager_reference(spec, eager, device)
    rank_losses = mean_over_ranks([o.shipped["losses"] for o in outcomes])
    case_audit.expect(compare_losses(eager_losses, rank_losses, **tolerance), check="parity")
    weights = [tensors_from_data(o.shipped["trainable"]) for o in outcomes]
    case_audit.expect(rank_divergence("trainable weights after training", weights))
    for name, expected in eager_weights.items():
        if name not in weights[0]:
            case_audit.expect(f"rank 0 shipped no trainable {name}, which eager training has")
            break
        problem = compare_tensors(f"rank 0's trainable {name} vs eager's", expected, weights[0][name], **tolerance)
        if problem:
            case_audit.expect(problem)
            break


@pytest.mark.scenario("ddp")
def test_ddp(case, device, make_peft_model, case_audit, compile_policy, tmp_path):
    run_distributed_case(case, device, make_peft_model, case_audit, compile_policy, tmp_path)


@pytest.mark.scenario("fsdp2")
def test_fsdp2(case, device, make_peft_model, case_audit, compile_policy, tmp_path):
    run_distributed_case(case, device, make_peft_model, case_audit, compile_policy, tmp_path)
