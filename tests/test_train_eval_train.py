"""Scenario train-eval-train: the MetaMathQA loop (train, evaluate, train again) under torch.compile.

Per case, from one compiled run: graph breaks and recompiles within budget, none unexpected; the
second train/eval cycle compiles nothing; losses and every trainable gradient equal eager; dropout is
really off in eval; training moved every trainable adapter weight and no frozen one.
"""

from __future__ import annotations

import pytest
import torch

from bench_models import eval_step, make_batch, make_optimizer, train_step
from compile_audit.probe.parity import (
    compare_gradients,
    compare_losses,
    compare_tensors,
    gradients,
    parameter_changes,
    same_tensor,
    snapshot_parameters,
)

# (phase, kind, sequence length): three lengths so dynamic shapes are exercised before the
# first eval; the cycle train -> eval -> train ends at train-4, after which nothing may compile.
PLAN = [
    ("train-1", "train", 8),
    ("train-2", "train", 12),
    ("train-3", "train", 16),
    ("eval-1", "eval", 10),
    ("train-4", "train", 8),
    ("eval-2", "eval", 10),
    ("train-5", "train", 12),
]
FIRST_CYCLE_ENDS = "train-4"


def _keep_gradients(model, into: dict):
    return lambda: into.update(gradients(model))


@pytest.mark.scenario("train-eval-train")
def test_train_eval_train(case, device, make_peft_model, case_audit):
    # Two seeded builds rather than deepcopy: some methods (OSF) hold hooks that a copy would not carry.
    model, eager = make_peft_model(), make_peft_model()
    tolerance = case.tolerance
    batches = {
        name: make_batch(case.model, case.method, seq_len=length, seed=step, device=device)
        for step, (name, _, length) in enumerate(PLAN)
    }

    before, eager_before = snapshot_parameters(model), snapshot_parameters(eager)
    compiled = case_audit.compile(model)
    optimizer, eager_optimizer = make_optimizer(model), make_optimizer(eager)
    compiled_losses, eager_losses = [], []
    for step, (name, kind, _) in enumerate(PLAN):
        batch = batches[name]
        if kind == "train":
            compiled_grads, eager_grads = {}, {}
            torch.manual_seed(step)
            with case_audit.phase(name, kind):
                compiled_losses.append(
                    train_step(compiled, optimizer, batch, on_gradients=_keep_gradients(model, compiled_grads))
                )
            torch.manual_seed(step)
            eager_losses.append(
                train_step(eager, eager_optimizer, batch, on_gradients=_keep_gradients(eager, eager_grads))
            )
            what = f"[{name}] compiled vs eager gradients"
            case_audit.expect(compare_gradients(what, eager_grads, compiled_grads, **tolerance), check="parity")
        else:
            with case_audit.phase(name, kind):
                first, second = eval_step(compiled, batch), eval_step(compiled, batch)
            case_audit.expect(
                compare_tensors(f"[{name}] two compiled eval calls (dropout on in eval?)", first, second, **tolerance),
                check="parity",
            )
            case_audit.expect(
                compare_tensors(
                    f"[{name}] compiled eval vs eager eval logits", eval_step(eager, batch), first, **tolerance
                ),
                check="parity",
            )
    case_audit.steady_state_after(FIRST_CYCLE_ENDS)

    case_audit.expect(compare_losses(eager_losses, compiled_losses, **tolerance), check="parity")
    changed, unchanged, frozen_changed = parameter_changes(before, model)
    eager_changed, _, eager_frozen_changed = parameter_changes(eager_before, eager)
    # A frozen weight the eager twin changed identically is the library's own in-place conversion, not compile's
    # doing (bitsandbytes repacks 4-bit weights for CPU in its first no-grad forward).
    eager_params, params = dict(eager.named_parameters()), dict(model.named_parameters())
    frozen_changed = [
        name
        for name in frozen_changed
        if name not in eager_frozen_changed or not same_tensor(eager_params[name].detach(), params[name].detach())
    ]
    if not changed:
        case_audit.expect("compiled training changed no trainable parameter")
    # A weight eager training moves but compiled training leaves alone lost its gradient under compile.
    stuck = sorted(set(unchanged) & set(eager_changed))
    if stuck:
        case_audit.expect(
            f"compiled training left {len(stuck)} trainable parameter(s) that eager training changed: {stuck[:5]}"
        )
    if frozen_changed:
        case_audit.expect(f"compiled training changed {len(frozen_changed)} frozen parameter(s): {frozen_changed[:5]}")
