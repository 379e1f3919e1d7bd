"""Compiled-vs-eager comparisons and parameter-change checks, returning messages instead of raising.

Two kinds of tolerance. Elementwise (``rtol``, ``atol``, as ``torch.testing.assert_close``) suits fp32 with Dynamo's
own backends, whose kernels are eager's. ``relative_norm`` compares each tensor as a whole,
``||actual - expected|| <= relative_norm * ||expected||``: it suits bf16 and inductor's fused kernels, where single
elements drift (rounding, reordered sums, an AdamW step that is ``lr * sign(grad)`` for near-zero gradients) while a
real error (a scaled gradient, a dropped term) moves the whole tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass


def relative_error(expected: torch.Tensor, actual: torch.Tensor) -> float:
    """``||actual - expected|| / ||expected||`` in fp32 (0 when both are zero, inf when only expected is)."""
    expected, actual = expected.detach().float().cpu(), actual.detach().float().cpu()
    difference, scale = (actual - expected).norm().item(), expected.norm().item()
    if difference == 0:
        return 0.0
    return difference / scale if scale > 0 else float("inf")


def _within(
    expected: torch.Tensor, actual: torch.Tensor, rtol: float, atol: float, relative_norm: float | None
) -> bool:
    if relative_norm is not None:
        return relative_error(expected, actual) <= relative_norm  # NaN compares False: a failure
    return torch.allclose(actual.float().cpu(), expected.float().cpu(), rtol=rtol, atol=atol)


def compare_tensors(
    what: str,
    expected: torch.Tensor,
    actual: torch.Tensor,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    relative_norm: float | None = None,
) -> str | None:
    """None when close, else a one-paragraph message saying where and by how much they differ."""
    if expected.shape != actual.shape:
        return f"{what}: shapes differ, expected {tuple(expected.shape)}, got {tuple(actual.shape)}"
    if relative_norm is not None:
        error = relative_error(expected, actual)
        if error <= relative_norm:
            return None
        allowed = f"up to {relative_norm:g} allowed"
        return f"{what}: relative error ||compiled - eager|| / ||eager|| = {error:.3g} ({allowed})"
    try:
        torch.testing.assert_close(actual.float().cpu(), expected.float().cpu(), rtol=rtol, atol=atol)
    except AssertionError as error:
        detail = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        return f"{what}: {detail}"
    return None


def compare_losses(
    eager: Sequence[torch.Tensor],
    compiled: Sequence[torch.Tensor],
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    relative_norm: float | None = None,
) -> str | None:
    """Step by step (each loss against eager's of the same step); with ``relative_norm``, each step's relative error."""
    if len(eager) != len(compiled):
        return f"train losses: {len(eager)} eager steps but {len(compiled)} compiled steps"
    expected = [loss.detach().float().cpu() for loss in eager]
    actual = [loss.detach().float().cpu() for loss in compiled]
    if all(_within(e, a, rtol, atol, relative_norm) for e, a in zip(expected, actual, strict=True)):
        return None
    pairs = ", ".join(f"{e.item():.6f}/{a.item():.6f}" for e, a in zip(expected, actual, strict=True))
    allowed = f"relative error {relative_norm:g}" if relative_norm is not None else f"rtol={rtol}, atol={atol}"
    return f"train losses differ from eager (eager/compiled per step, {allowed}): {pairs}"


def snapshot_parameters(module: torch.nn.Module) -> dict[str, tuple[torch.Tensor, bool]]:
    return {name: (p.detach().clone(), p.requires_grad) for name, p in module.named_parameters()}


def parameter_changes(
    before: dict[str, tuple[torch.Tensor, bool]], module: torch.nn.Module
) -> tuple[list[str], list[str], list[str]]:
    """(trainable that changed, trainable that did not change, frozen that changed)."""
    changed, unchanged, frozen_changed = [], [], []
    for name, param in module.named_parameters():
        if name not in before:
            continue
        old, trainable = before[name]
        moved = not same_tensor(old, param.detach())
        if trainable:
            (changed if moved else unchanged).append(name)
        elif moved:
            frozen_changed.append(name)
    return changed, unchanged, frozen_changed


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values; a tensor subclass (a quantized weight) by its inner tensors, since many
    implement no ``aten.equal``."""
    if is_traceable_wrapper_subclass(a) or is_traceable_wrapper_subclass(b):
        if type(a) is not type(b):
            return False
        (names, meta_a), (names_b, meta_b) = a.__tensor_flatten__(), b.__tensor_flatten__()
        try:
            same_meta = names == names_b and bool(meta_a == meta_b)
        except RuntimeError:  # metadata holding tensors
            same_meta = names == names_b and repr(meta_a) == repr(meta_b)
        if not same_meta:
            return False
        return all(same_tensor(getattr(a, n), getattr(b, n)) for n in names)
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def gradients(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every trainable parameter's gradient (a parameter without one maps to zeros)."""
    return {
        name: (p.grad.detach().float().clone() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32))
        for name, p in module.named_parameters()
        if p.requires_grad
    }


def compare_gradients(
    what: str,
    eager: dict[str, torch.Tensor],
    compiled: dict[str, torch.Tensor],
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    relative_norm: float | None = None,
) -> str | None:
    """None when every gradient matches eager's; else each differing parameter with the ratio of the norms.

    Optimizers like AdamW normalise the gradient's scale, so a compiled gradient off by a constant factor
    leaves losses and parameter moves equal to eager's: only the gradients themselves show it.
    """
    differing = []
    for name, expected in eager.items():
        actual = compiled.get(name)
        if actual is None:
            differing.append(f"{name} (no gradient under compile)")
        elif not _within(expected, actual, rtol, atol, relative_norm):
            eager_norm, compiled_norm = expected.norm().item(), actual.norm().item()
            ratio = f"{compiled_norm / eager_norm:.4g}" if eager_norm > 0 else "inf (eager gradient is zero)"
            differing.append(f"{name} (norm compiled/eager = {ratio})")
    if not differing:
        return None
    shown = ", ".join(differing[:5]) + (f" and {len(differing) - 5} more" if len(differing) > 5 else "")
    return f"{what}: {len(differing)} gradient(s) differ from eager: {shown}"
