"""Compiled-vs-eager comparisons and parameter-change checks, returning messages instead of raising."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass


def compare_tensors(what: str, expected: torch.Tensor, actual: torch.Tensor, *, rtol: float, atol: float) -> str | None:
    """None when close, else a one-paragraph message saying where and by how much they differ."""
    try:
        torch.testing.assert_close(actual.float().cpu(), expected.float().cpu(), rtol=rtol, atol=atol)
    except AssertionError as error:
        detail = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        return f"{what}: {detail}"
    return None


def compare_losses(
    eager: Sequence[torch.Tensor], compiled: Sequence[torch.Tensor], *, rtol: float, atol: float
) -> str | None:
    if len(eager) != len(compiled):
        return f"train losses: {len(eager)} eager steps but {len(compiled)} compiled steps"
    expected = torch.stack([loss.float().cpu() for loss in eager])
    actual = torch.stack([loss.float().cpu() for loss in compiled])
    if torch.allclose(actual, expected, rtol=rtol, atol=atol):
        return None
    pairs = ", ".join(f"{e:.6f}/{a:.6f}" for e, a in zip(expected.tolist(), actual.tolist(), strict=True))
    return f"train losses differ from eager (eager/compiled per step, rtol={rtol}, atol={atol}): {pairs}"


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
    what: str, eager: dict[str, torch.Tensor], compiled: dict[str, torch.Tensor], *, rtol: float, atol: float
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
        elif not torch.allclose(actual.cpu(), expected.cpu(), rtol=rtol, atol=atol):
            eager_norm, compiled_norm = expected.norm().item(), actual.norm().item()
            ratio = f"{compiled_norm / eager_norm:.4g}" if eager_norm > 0 else "inf (eager gradient is zero)"
            differing.append(f"{name} (norm compiled/eager = {ratio})")
    if not differing:
        return None
    shown = ", ".join(differing[:5]) + (f" and {len(differing) - 5} more" if len(differing) > 5 else "")
    return f"{what}: {len(differing)} gradient(s) differ from eager: {shown}"
