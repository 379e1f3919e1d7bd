"""Scenario depth: compile work must not grow with the number of layers.

Real models repeat their decoder layer 16-36 times. A break inside a layer makes Dynamo compile each layer's
frames on their own, and guards that differ between layers recompile the same code once per layer, until
Dynamo's recompile limit (8) is hit and the frame runs eagerly from then on. One-layer models cannot show
this; this scenario runs the same plan at one layer and at DEPTH layers and fails when the N-layer run
compiles more frames or recompiles more often, or when Dynamo gives up (the gate's recompile-limit verdict).
Growth a maintainer has explained is allowed by a hand-written note on the case's budget entry.
"""

from __future__ import annotations

import pytest
import torch

from bench_models import make_batch, make_optimizer, train_step
from bench_models.workloads import eval_step
from compile_audit.probe.depth import growth_with_depth
from compile_audit.probe.recompiles import PhaseAudit
from compile_audit.rules.case import reset_dynamo
from compile_audit.rules.roots import attribute
from tests.cases import SHORT_CYCLE_ENDS, SHORT_CYCLE_PLAN

DEPTH = 4  # already shows DoRA's per-layer recompiles and its recompile-limit hit
PLAN, FIRST_CYCLE_ENDS = SHORT_CYCLE_PLAN, SHORT_CYCLE_ENDS


def _run(audit, model, case, device) -> None:
    compiled = audit.compile(model)
    optimizer = make_optimizer(model)
    for step, (name, kind, length) in enumerate(PLAN):
        batch = make_batch(case.model, case.method, seq_len=length, seed=step, device=device)
        torch.manual_seed(step)
        with audit.phase(name, kind):
            if kind == "train":
                train_step(compiled, optimizer, batch)
            else:
                eval_step(compiled, batch)


def _growth_explained(budget) -> bool:
    return bool(budget.recorded and budget.note)


@pytest.mark.scenario("depth")
def test_depth(case, device, make_peft_model, case_audit):
    _run(case_audit, make_peft_model(num_layers=DEPTH), case, device)
    case_audit.steady_state_after(FIRST_CYCLE_ENDS)
    deep = case_audit.result
    if deep.limit_hits:  # Dynamo gave up at depth: the case fails on that, whatever one layer compiles
        return

    shallow = PhaseAudit(case.backend, case_audit.dynamic)
    reset_dynamo()
    _run(shallow, make_peft_model(num_layers=1), case, device)
    grew = growth_with_depth(shallow.phases, deep.phases, DEPTH)
    if grew and not _growth_explained(case_audit.budget):
        first_new = next((r.describe() for r in deep.recompiles if r not in shallow.recompiles), None)
        example = f"; e.g. {first_new}" if first_new else ""
        case_audit.expect(
            "compile work grows with depth (explain it in a hand-written note on the budget entry to allow it): "
            + "; ".join(grew)
            + example,
            check="depth growth",
        )
    # Judged as the verdict judges the deep run: a hit on a frame compiled only because of a root is that root's.
    for hit in attribute(shallow.phases, deep.under_test).limit_hits:
        case_audit.expect(f"at 1 layer already: {hit.describe()}", check="recompile limit at 1 layer")
