"""What the ranks of one case audited, put together: one AuditResult whose phases say their rank, and the checks
that the ranks agree (identical trainable weights after training)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from compile_audit.rules.result import AuditResult


def rank_phase(rank: int, name: str) -> str:
    return f"rank{rank}/{name}"


def merge_rank_results(per_rank: Sequence[AuditResult | None]) -> AuditResult:
    """One result for the case from each rank's (``None``: that rank shipped none): every rank's phases, renamed
    ``rank<N>/<phase>`` and interleaved step by step (rank 0's first phase, rank 1's first phase, ...), so counts are
    summed over the ranks and the steady state starts after the last rank's copy of the phase each rank named."""
    results = [(rank, result) for rank, result in enumerate(per_rank) if result is not None]
    phases = []
    for index in range(max((len(r.phases) for _, r in results), default=0)):
        for rank, result in results:
            if index < len(result.phases):
                phase = result.phases[index]
                renamed = [dataclasses.replace(r, phase=rank_phase(rank, r.phase)) for r in phase.recompiles]
                hits = [dataclasses.replace(h, phase=rank_phase(rank, h.phase)) for h in phase.limit_hits]
                phases.append(
                    dataclasses.replace(phase, name=rank_phase(rank, phase.name), recompiles=renamed, limit_hits=hits)
                )
    explained = [
        dataclasses.replace(report, call=rank_phase(rank, report.call))
        for rank, result in results
        for report in result.explained
    ]
    steady = [(rank, r.steady_state_from) for rank, r in results if r.steady_state_from]
    return AuditResult(
        explained=explained,
        phases=phases,
        steady_state_from=rank_phase(*steady[-1]) if steady else None,
    )


def tensors_to_data(tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Tensors as JSON data, exactly (float32 and narrower floats are exact as Python floats)."""
    return {
        name: {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "values": t.flatten().tolist()}
        for name, t in tensors.items()
    }


def tensors_from_data(data: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {
        name: torch.tensor(item["values"], dtype=getattr(torch, item["dtype"])).reshape(item["shape"])
        for name, item in data.items()
    }


def rank_divergence(what: str, per_rank: Sequence[dict[str, torch.Tensor]], *, limit: int = 5) -> str | None:
    """None when every rank holds exactly rank 0's tensors; else each rank's differing names and largest gap."""
    reference = per_rank[0]
    lines = []
    for rank, tensors in enumerate(per_rank[1:], start=1):
        missing = sorted(set(reference) ^ set(tensors))
        differing = []
        for name in sorted(set(reference) & set(tensors)):
            ours, theirs = reference[name], tensors[name]
            if ours.shape != theirs.shape:
                differing.append(f"{name} (shape {tuple(theirs.shape)} vs {tuple(ours.shape)})")
            elif not torch.equal(ours, theirs):
                gap = (ours.double() - theirs.double()).abs().max().item()
                differing.append(f"{name} (max abs difference {gap:.3g})")
        if missing:
            lines.append(f"  rank {rank} vs rank 0: names present on one rank only: {missing[:limit]}")
        if differing:
            more = f" and {len(differing) - limit} more" if len(differing) > limit else ""
            lines.append(
                f"  rank {rank} differs from rank 0 in {len(differing)} of {len(reference)}:"
                f" {', '.join(differing[:limit])}{more}"
            )
    if not lines:
        return None
    return "\n".join([f"{what}: the ranks diverged", *lines])


def mean_over_ranks(per_rank: Sequence[Sequence[float]]) -> list[torch.Tensor]:
    """Per step, the mean of the ranks' values (each rank's loss on its equal share of the global batch)."""
    steps = min(len(values) for values in per_rank)
    return [torch.tensor(sum(values[step] for values in per_rank) / len(per_rank)) for step in range(steps)]
