"""A pytest plugin that plants a compile regression in PEFT's LoRA layer, to prove the gate catches it.

    PLANT=graph-break pytest -p tests.plant_regression -k lora    # a graph break in LoRA's forward
    PLANT=recompile   pytest -p tests.plant_regression -k lora    # a recompile on every call

Nothing happens without the PLANT environment variable.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

PLANTS = ("graph-break", "recompile")


def _with_graph_break(forward):
    @functools.wraps(forward)
    def planted(self, x, *args, **kwargs):
        torch._dynamo.graph_break()  # PLANTED: graph break
        return forward(self, x, *args, **kwargs)

    return planted


def _with_recompile(forward):
    @functools.wraps(forward)
    def planted(self, x, *args, **kwargs):
        self.planted_calls = getattr(self, "planted_calls", 0) + 1  # PLANTED: a new constant every call
        return forward(self, x, *args, **kwargs) * (self.planted_calls / self.planted_calls)

    return planted


@pytest.fixture(autouse=True)
def plant_regression(monkeypatch):
    plant = os.environ.get("PLANT")
    if not plant:
        yield
        return
    if plant not in PLANTS:
        raise pytest.UsageError(f"PLANT={plant!r}: expected one of {', '.join(PLANTS)}")
    from peft.tuners.lora.layer import Linear

    wrap = _with_graph_break if plant == "graph-break" else _with_recompile
    monkeypatch.setattr(Linear, "forward", wrap(Linear.forward))
    yield
