"""Compiled-vs-eager comparisons and parameter-change checks, returning messages instead of raising."""

from __future__ import annotations

from collections.abc import Sequence

import torch


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
        moved = not torch.equal(old, param.detach())
        if trainable:
            (changed if moved else unchanged).append(name)
        elif moved:
            frozen_changed.append(name)
    return changed, unchanged, frozen_changed
