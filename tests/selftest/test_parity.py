"""Parity and weight checks fail on a toy that diverges under compile or trains nothing."""

from __future__ import annotations

import pytest
import torch

from compile_audit.parity import (
    compare_gradients,
    compare_losses,
    compare_tensors,
    gradients,
    parameter_changes,
    snapshot_parameters,
)
from tests.selftest import toys

pytestmark = pytest.mark.selftest


def test_divergence_under_compile_is_caught():
    torch._dynamo.reset()
    module = toys.DivergesUnderCompile()
    x = torch.randn(2, 4)
    compiled = torch.compile(module, backend="eager")
    message = compare_tensors("toy logits", module(x), compiled(x), rtol=1e-4, atol=1e-5)
    assert message is not None and "toy logits" in message and "Mismatched elements" in message


def test_equal_outputs_pass():
    x = torch.randn(3)
    assert compare_tensors("same", x, x.clone(), rtol=0, atol=0) is None


def test_dropout_left_on_in_eval_is_caught():
    module = toys.Clean().train()  # "eval" without module.eval(): dropout stays on
    x = torch.randn(8, 4)
    assert compare_tensors("two eval calls", module(x), module(x), rtol=0, atol=0) is not None


def test_loss_mismatch_names_each_step():
    message = compare_losses(
        [torch.tensor(1.0), torch.tensor(2.0)], [torch.tensor(1.0), torch.tensor(2.5)], rtol=1e-4, atol=1e-5
    )
    assert message is not None and "2.000000/2.500000" in message


def test_parameter_changes_sees_frozen_and_untouched_weights():
    module = toys.Clean()
    module.linear.bias.requires_grad_(False)
    before = snapshot_parameters(module)
    with torch.no_grad():
        module.linear.bias.add_(1.0)  # a frozen weight moves: must be reported
    changed, unchanged, frozen_changed = parameter_changes(before, module)
    assert changed == [] and unchanged == ["linear.weight"] and frozen_changed == ["linear.bias"]


def test_scaled_gradient_with_equal_outputs_is_caught():
    """AdamW hides a constant gradient scale from losses and parameter moves; the gradient check does not."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager, module = toys.ScalesGradientUnderCompile(), toys.ScalesGradientUnderCompile()
    module.load_state_dict(eager.state_dict())
    compiled = torch.compile(module, backend="eager")
    x = torch.randn(2, 4)
    assert compare_tensors("outputs", eager(x), compiled(x), rtol=1e-6, atol=1e-6) is None
    eager(x).sum().backward()
    compiled(x).sum().backward()
    message = compare_gradients("toy gradients", gradients(eager), gradients(module), rtol=1e-4, atol=1e-5)
    assert message is not None
    assert "linear.weight (norm compiled/eager = 2)" in message and "linear.bias (norm compiled/eager = 2)" in message
    assert compare_gradients("same", gradients(eager), gradients(eager), rtol=1e-4, atol=1e-5) is None
