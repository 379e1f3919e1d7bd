"""Compile work at one layer and at N layers: real models repeat their layers, and what Dynamo does per layer
(breaks, per-layer guards) only shows when the count grows with depth."""

from __future__ import annotations

from compile_audit.probe.recompiles import PhaseRecord


def growth_with_depth(shallow: list[PhaseRecord], deep: list[PhaseRecord], depth: int) -> list[str]:
    """What compiled more at ``depth`` layers than at one (frames compiled, recompiles); empty when nothing grew."""
    grew = []
    frames = sum(p.frames_compiled for p in shallow), sum(p.frames_compiled for p in deep)
    if frames[1] != frames[0]:
        grew.append(f"frames compiled {frames[1]} at {depth} layers vs {frames[0]} at 1 layer")
    recompiles = sum(len(p.recompiles) for p in shallow), sum(len(p.recompiles) for p in deep)
    if recompiles[1] != recompiles[0]:
        grew.append(f"recompiles {recompiles[1]} at {depth} layers vs {recompiles[0]} at 1 layer")
    return grew
