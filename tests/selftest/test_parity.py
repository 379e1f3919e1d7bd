"""Parity and weight checks fail on a toy that diverges under compile or trains nothing."""

from __future__ import annotations

import pytest
import torch

from compile_audit.probe.parity import (
    compare_gradients,
    compare_losses,
    compare_tensors,
    gradients,
    parameter_changes,
    snapshot_parameters,
)
from tests.cases import TOLERANCES
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


BF16_ON_CUDA = TOLERANCES[("cuda", "inductor")]


def _bf16_noise(reference: torch.Tensor) -> torch.Tensor:
    """What bf16 and fused kernels do to a tensor: rounding and a reordered sum, computed, not assumed."""
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(reference.shape[-1], reference.shape[-1], generator=generator) / reference.shape[-1] ** 0.5
    exact = reference @ weight
    rounded = (reference.bfloat16() @ weight.bfloat16()).float()
    return reference + (rounded - exact)


def test_relative_norm_passes_bf16_noise_on_every_element():
    gradient = torch.randn(128, 64, generator=torch.Generator().manual_seed(0))
    noisy = _bf16_noise(gradient)
    assert not torch.equal(noisy, gradient)
    assert compare_gradients("bf16", {"w": gradient}, {"w": noisy}, **BF16_ON_CUDA) is None
    assert compare_tensors("bf16 logits", gradient, noisy, **BF16_ON_CUDA) is None


def test_relative_norm_fails_a_scaled_gradient():
    gradient = torch.randn(128, 64, generator=torch.Generator().manual_seed(0))
    message = compare_gradients("bf16", {"w": gradient}, {"w": _bf16_noise(gradient) * 1.05}, **BF16_ON_CUDA)
    assert message is not None and "1 gradient(s) differ" in message and "norm compiled/eager = 1.05" in message


def test_relative_norm_fails_a_dropped_term_that_elementwise_tolerance_passes():
    """A small tensor that lost half its value passes rtol = atol = 2e-2 (atol dominates); its relative error
    does not."""
    expected = torch.full((64,), 0.01)
    actual = expected * 0.5
    assert compare_tensors("small", expected, actual, rtol=2e-2, atol=2e-2) is None
    message = compare_tensors("small", expected, actual, **BF16_ON_CUDA)
    assert message is not None and "relative error" in message and "0.5" in message


def test_relative_norm_fails_nan_and_compares_losses_step_by_step():
    assert compare_tensors("nan", torch.ones(3), torch.tensor([1.0, float("nan"), 1.0]), **BF16_ON_CUDA) is not None
    same = [torch.tensor(12.0), torch.tensor(11.5)]
    assert compare_losses(same, [torch.tensor(12.05), torch.tensor(11.52)], **BF16_ON_CUDA) is None
    message = compare_losses(same, [torch.tensor(12.0), torch.tensor(11.5 * 1.05)], **BF16_ON_CUDA)
    assert message is not None and "11.500000/12.075000" in message
