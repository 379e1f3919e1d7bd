"""The libraries whose versions decide whether a budget is current (the ratchet) and what a diff compares: a zoo
names them (the ``compile_gated_libraries`` ini value of the plugin); torch alone when it does not."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

DEFAULT_GATED = ("torch",)


def gated(versions: Mapping[str, str], libraries: Sequence[str] = DEFAULT_GATED) -> dict[str, str]:
    """The gated libraries' entries of a versions mapping (those it has)."""
    return {name: versions[name] for name in libraries if name in versions}
