"""Compile cost split into Dynamo, AOTAutograd and the backend, with attempts and restarts, from Dynamo's records."""

from __future__ import annotations

import types

import pytest
import torch

from compile_audit.probe.compile_cost import CompileCost, CompileCostWatch

pytestmark = pytest.mark.selftest


def _record(frame_us=None, backend_us=None, inductor_us=None, backward_us=None, restarts=(), restart_us=None):
    return types.SimpleNamespace(
        dynamo_cumulative_compile_time_us=frame_us,
        aot_autograd_cumulative_compile_time_us=backend_us,
        inductor_cumulative_compile_time_us=inductor_us,
        backward_cumulative_compile_time_us=backward_us,
        restart_reasons=set(restarts),
        dynamo_compile_time_before_restart_us=restart_us,
    )


def test_the_split_of_frame_compiles_and_a_lazy_backward():
    cost = CompileCost.of(
        [
            _record(frame_us=10_000_000, backend_us=6_000_000, inductor_us=4_000_000, restarts={"R"}, restart_us=1),
            _record(frame_us=2_000_000, backend_us=1_000_000),
            _record(backward_us=3_000_000),  # the backward compiled at the first backward: no frame of its own
        ]
    )
    assert (cost.frames, cost.attempts, cost.restarts) == (2, 3, ("R",))
    assert (cost.dynamo_s, cost.aot_autograd_s, cost.backend_s) == (5.0, 3.0, 7.0)
    assert cost.to_dict("first_step_")["first_step_compile_attempts"] == 3


def test_the_watch_sees_only_its_own_span_and_a_restart_would_count():
    torch._dynamo.reset()
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))  # before the span
    with CompileCostWatch() as watch:
        torch.compile(lambda x: x * 2, backend="aot_eager")(torch.ones(2))
        torch.compile(lambda x: x - 3, backend="aot_eager")(torch.ones(2))
    torch._dynamo.reset()
    assert watch.cost.frames == 2 and watch.cost.attempts >= 2
    assert watch.cost.aot_autograd_s > 0 and watch.cost.backend_s == 0  # aot_eager: no inductor
