"""The libraries whose versions decide whether a budget is current (the ratchet) and what a diff compares."""

from __future__ import annotations

GATED_LIBRARIES = ("torch", "transformers", "peft")


def gated(versions: dict[str, str]) -> dict[str, str]:
    """The gated libraries' entries of a versions mapping (those it has)."""
    return {name: versions[name] for name in GATED_LIBRARIES if name in versions}
