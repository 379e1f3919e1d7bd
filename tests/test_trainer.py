"""Scenario trainer: the real ``transformers.Trainer`` compiling the PEFT model itself (``torch_compile=True``,
the tier's backend) and evaluating during training (``eval_strategy="steps"``), as most PEFT users compile.

The Trainer compiles through accelerate, which only accepts the backend names of its own enum, so it cannot be
given the audit's counting backend by name. It is given the tier's backend (``torch_compile_backend="eager"``,
...), and while it trains, its ``torch.compile`` call on the case's model is routed to the audit's counting
backend (registered by ``case_audit.backend_name()``, wrapping that same tier backend); any other
``torch.compile`` call passes through untouched.

Phases are delimited by a ``TrainerCallback``, nothing is subclassed: ``on_step_begin`` opens ``train-N``
around one optimizer step (forward, backward, optimizer), ``on_step_end`` closes it and, when the Trainer has
just decided to evaluate (``control.should_evaluate``, set by its flow callback, which runs before ours), opens
``eval-M``; ``on_evaluate`` (after the evaluation loop) closes it. With 5 steps and an evaluation every 2 steps
(and one at the end of training) that is train-1, train-2, eval-1, train-3, train-4, eval-2, train-5, eval-3:
after train-3 the first train -> eval -> train cycle is done, and nothing may compile any more. (transformers 5.24
evaluates the uncompiled model during training, so its eval phases compile nothing; a Trainer that evaluates
compiled would show the first switch's mode recompile, expected by the phase kinds.)

Per case: graph breaks and recompiles within budget, none unexpected; the steady state; the phases are the plan
(else the delimiting broke); every train and eval loss finite; the Trainer compiled and trained the case's PEFT
model: every trainable (adapter) weight that got a gradient moved, no frozen (base) weight did.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from unittest import mock

import pytest
import torch
from transformers import TrainerCallback

from bench_models.trainer import make_trainer
from compile_audit.probe.parity import parameter_changes, snapshot_parameters

MAX_STEPS, EVAL_STEPS = 5, 2
PLAN = ["train-1", "train-2", "eval-1", "train-3", "train-4", "eval-2", "train-5", "eval-3"]
FIRST_CYCLE_ENDS = "train-3"


class AuditPhases(TrainerCallback):
    """Opens a ``case_audit`` phase around every optimizer step and every evaluation of the Trainer."""

    def __init__(self, case_audit, model) -> None:
        self.case_audit = case_audit
        self.model = model
        self.open = contextlib.ExitStack()  # the phase in progress, if any
        self.names: list[str] = []
        self.eval_losses: list[float] = []
        self.with_gradient: set[str] = set()  # trainable parameters that had a gradient at some optimizer step

    def _start(self, name: str, kind: str) -> None:
        self.close()
        self.names.append(name)
        self.open.enter_context(self.case_audit.phase(name, kind))

    def close(self) -> None:
        self.open.close()

    def on_step_begin(self, args, state, control, **kwargs):
        self._start(f"train-{state.global_step + 1}", "train")

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.with_gradient |= {n for n, p in self.model.named_parameters() if p.requires_grad and p.grad is not None}

    def on_step_end(self, args, state, control, **kwargs):
        self.close()
        if control.should_evaluate:
            self._start(f"eval-{len(self.eval_losses) + 1}", "eval")

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.close()
        self.eval_losses.append((metrics or {}).get("eval_loss", math.nan))

    def on_train_end(self, args, state, control, **kwargs):
        self.close()


@contextlib.contextmanager
def compiles_with(model, audit_backend: str) -> Iterator[list[str]]:
    """Route ``torch.compile(model, backend=...)`` to ``audit_backend``; yields the backends it was asked for."""
    real_compile = torch.compile
    requested: list[str] = []

    def compile_(target=None, **kwargs):
        if target is model:
            requested.append(kwargs.get("backend", "inductor"))
            kwargs["backend"] = audit_backend
        return real_compile(target, **kwargs)

    with mock.patch.object(torch, "compile", compile_):
        yield requested


@pytest.mark.scenario("trainer")
def test_trainer(case, device, make_peft_model, case_audit, tmp_path):
    model = make_peft_model()
    phases = AuditPhases(case_audit, model)
    trainer = make_trainer(
        model,
        case.model,
        case.method,
        output_dir=str(tmp_path),
        backend=case.backend,
        device=device,
        max_steps=MAX_STEPS,
        eval_steps=EVAL_STEPS,
        callbacks=[phases],
    )
    before = snapshot_parameters(model)
    with compiles_with(model, case_audit.backend_name()) as requested:
        try:
            output = trainer.train()
        finally:
            phases.close()
    case_audit.steady_state_after(FIRST_CYCLE_ENDS)

    if requested != [case.backend]:
        case_audit.expect(f"the Trainer compiled the PEFT model with backends {requested}, expected [{case.backend!r}]")
    if trainer.model is not model or getattr(trainer.model_wrapped, "_orig_mod", None) is not model:
        case_audit.expect(
            f"the Trainer did not train the compiled PEFT model: it holds {type(trainer.model).__name__}"
            f" wrapped as {type(trainer.model_wrapped).__name__}"
        )
    if phases.names != PLAN:
        case_audit.expect(f"phases {phases.names}, expected {PLAN} (the callback no longer delimits them)")
    if not math.isfinite(output.training_loss):
        case_audit.expect(f"training loss (mean over {MAX_STEPS} steps) is {output.training_loss}")
    evaluations = sum(name.startswith("eval") for name in PLAN)
    if len(phases.eval_losses) != evaluations or not all(math.isfinite(loss) for loss in phases.eval_losses):
        case_audit.expect(f"eval losses {phases.eval_losses}: expected {evaluations}, all finite")

    changed, unchanged, frozen_changed = parameter_changes(before, model)
    if not changed or not phases.with_gradient:
        case_audit.expect(
            f"the Trainer changed {len(changed)} trainable parameter(s), {len(phases.with_gradient)} had a gradient"
        )
    # Some methods hold trainable parameters their forward never uses (no gradient, eager or compiled).
    stuck = [name for name in unchanged if name in phases.with_gradient]
    if stuck:
        case_audit.expect(f"the Trainer left {len(stuck)} trainable parameter(s) with gradients unchanged: {stuck[:5]}")
    if frozen_changed:
        case_audit.expect(f"the Trainer changed {len(frozen_changed)} frozen parameter(s): {frozen_changed[:5]}")
