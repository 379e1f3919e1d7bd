"""What compiling buys, per GPU case: train step time eager vs compiled, compile times, memory, compiles.

Each case runs eagerly, then (after freeing the eager model) compiled with the case's backend; both see
the same seeded batches for the same number of train steps, so their final losses are of the same step. Memory is
released before each measured model. The compiled run is audited by phase: ``first-step`` (the compile), ``eval``
(the train -> eval recompile), ``steady`` (warm-up and timed steps, via ``benchmark.pedantic``). A compiled run that
hit Dynamo's recompile limit is partly eager: its figures are recorded, its speedup is not claimed. Every compile
time comes with the state of inductor's caches (fresh, warm or mixed), and the first step's and the eval step's are
split into Dynamo, AOTAutograd and the backend, with the compile attempts (compile_audit.probe.compile_cost).
``--compile-regions`` compiles each decoder layer once instead of the whole model (``compile_scope``). Every figure
goes into ``benchmark.extra_info`` (``--benchmark-json``, ``--benchmark-compare``) and into the compile report's
``benchmarks`` for the case. Nothing here is asserted about speed or memory: timings are reported, never asserted.

``pytest -m gpu`` runs it on CUDA (each xdist worker on its own GPU, through the ``device`` fixture;
pytest-benchmark turns its own timing off under xdist, the step times below are measured either way);
``pytest -m gpu --gpu-tier-device cpu`` runs the same code on CPU with llama-tiny and inductor.
"""

from __future__ import annotations

import pytest
import torch

from bench_models import eval_step, make_batch, make_optimizer, set_kv_cache, train_step
from compile_audit.probe.compile_cache import CacheWatch
from compile_audit.probe.compile_cost import CompileCostWatch
from compile_audit.probe.memory import MemorySampler, release_memory
from compile_audit.probe.recompiles import PhaseAudit
from compile_audit.probe.timing import StepTimer, summarize_times
from compile_audit.rules.case import reset_dynamo
from tests.plugins.step_benchmarks import benchmark_cases

pytestmark = pytest.mark.gpu

EVAL_SEED = 10_000  # the eval batch is not one of the training batches


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", [pytest.param(c, id=c.id) for c in benchmark_cases(metafunc.config)])


def _run(model, optimizer, batches, timer: StepTimer, memory: MemorySampler, losses: list) -> None:
    """One train step per call, timed and memory-sampled; the seed depends on the step for dropout parity."""
    step = len(losses)
    torch.manual_seed(step)
    memory.before_step()
    losses.append(timer.time(train_step, model, optimizer, batches[step % len(batches)]))
    memory.after_step()


def _speedup(eager_median: float, compiled_median: float, limit_hits) -> float | str | None:
    """eager / compiled; withheld when Dynamo gave up on a frame, since the "compiled" model then ran partly eagerly."""
    if limit_hits:
        return f"withheld: {len(limit_hits)} frame(s) hit the recompile limit and ran eagerly"
    return round(eager_median / compiled_median, 3) if compiled_median > 0 else None


def test_train_step_benchmark(
    case, device, make_peft_model, benchmark, gpu_bench, record_compile_benchmarks, compile_policy
):
    # Both runs take the first step (the compile, for the compiled run), the warm-up steps and the timed ones.
    steps = 1 + gpu_bench.warmup + gpu_bench.rounds
    batches = [
        make_batch(
            case.model, case.method, batch_size=gpu_bench.batch_size, seq_len=gpu_bench.seq_len, seed=s, device=device
        )
        for s in range(steps + 1)
    ]
    eval_batch = make_batch(
        case.model,
        case.method,
        batch_size=gpu_bench.batch_size,
        seq_len=gpu_bench.seq_len,
        seed=EVAL_SEED,
        device=device,
    )
    # Dropout off, as in the GPU train-eval-train cases: the same graphs, and inductor's RNG differs from eager's.
    overrides = {"dropout": 0.0}

    # Eager: warm-up steps, then timed ones; the memory of whatever ran before is released first, and the model is
    # freed before the compiled run starts.
    release_memory(device)
    model = set_kv_cache(make_peft_model(**overrides), on=False)
    optimizer = make_optimizer(model)
    eager_timer, eager_memory, eager_losses = StepTimer(device), MemorySampler(device), []
    for _ in range(steps):
        _run(model, optimizer, batches, eager_timer, eager_memory, eager_losses)
    eager = summarize_times(eager_timer.samples[1 + gpu_bench.warmup :])
    del model, optimizer
    release_memory(device)

    # Compiled: first step (compile), an eval step (recompile for eval mode + no_grad), then the steady state.
    reset_dynamo()
    audit = PhaseAudit(backend=case.backend, dynamic=compile_policy.dynamic, regional=compile_policy.regional)
    model = set_kv_cache(make_peft_model(**overrides), on=False)
    optimizer = make_optimizer(model)
    compiled = audit.compile(model)
    timer, memory, losses = StepTimer(device), MemorySampler(device), []

    def step(model=compiled, optimizer=optimizer) -> None:  # bound now: both are deleted at the end
        _run(model, optimizer, batches, timer, memory, losses)

    with CacheWatch() as first_cache, CompileCostWatch() as first_cost, audit.phase("first-step", "train") as first:
        step()
    with CacheWatch() as eval_cache, CompileCostWatch() as eval_cost, audit.phase("eval", "eval") as evaluation:
        memory.before_step()
        eval_step(compiled, eval_batch)
        memory.after_step()
    with audit.phase("steady", "train") as steady:
        benchmark.pedantic(step, rounds=gpu_bench.rounds, warmup_rounds=gpu_bench.warmup, iterations=1)
        while len(losses) < steps:  # benchmark disabled (xdist, --benchmark-disable): it ran step() once
            step()
    compiled_stats = summarize_times(timer.samples[1 + gpu_bench.warmup :])

    phases = (first, evaluation, steady)
    limit_hits = audit.limit_hits
    figures = {
        **compiled_stats.to_dict("compiled_step"),
        **eager.to_dict("eager_step"),
        "speedup": _speedup(eager.median, compiled_stats.median, limit_hits),
        "recompile_limit_hits": [hit.describe() for hit in limit_hits],
        "compile_seconds": round(sum(p.compile_seconds for p in phases), 3),
        "first_step_compile_seconds": round(first.compile_seconds, 3),
        "eval_compile_seconds": round(evaluation.compile_seconds, 3),
        **first_cost.cost.to_dict("first_step_"),
        **eval_cost.cost.to_dict("eval_"),
        "compile_scope": "regional" if compile_policy.regional else "whole",
        **{f"first_step_{name}": value for name, value in first_cache.to_dict().items()},
        **{f"eval_{name}": value for name, value in eval_cache.to_dict().items()},
        "first_step_ms": round(timer.samples[0] * 1000, 3),
        "frames_compiled": sum(p.frames_compiled for p in phases),
        "first_step_frames_compiled": first.frames_compiled,
        "eval_frames_compiled": evaluation.frames_compiled,
        "steady_frames_compiled": steady.frames_compiled,
        "graphs_compiled": sum(p.graphs_compiled for p in phases),
        "graph_breaks": sum(len(p.graph_breaks) for p in phases),
        "recompiles": len(audit.recompiles),
        "final_loss_step": len(losses) - 1,
        "final_loss_eager": float(eager_losses[len(losses) - 1]),
        "final_loss_compiled": float(losses[-1]),
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "backend": case.backend,
        "batch_size": gpu_bench.batch_size,
        "seq_len": gpu_bench.seq_len,
        "warmup_rounds": gpu_bench.warmup,
    }
    compiled_memory, eager_memory_stats = memory.summary(), eager_memory.summary()
    if compiled_memory is None:
        figures["memory"] = "n/a (CPU)"
    else:
        figures.update(compiled_memory.to_dict())
        figures.update(eager_memory_stats.to_dict("eager_"))
    benchmark.extra_info.update(figures)
    record_compile_benchmarks(case, figures)
    del step, compiled, model, optimizer
    release_memory(device)
