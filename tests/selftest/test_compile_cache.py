"""The inductor cache state recorded with every compile time: fresh on a first compile, warm on a repeat."""

from __future__ import annotations

import pytest
import torch

from compile_audit.probe.compile_cache import CacheWatch, cache_state

pytestmark = pytest.mark.selftest


def test_states_from_counts():
    assert [cache_state(0, 0), cache_state(0, 2), cache_state(2, 0), cache_state(1, 1)] == [
        "none",
        "fresh",
        "warm",
        "mixed",
    ]


def test_a_repeated_inductor_compile_reads_warm_and_eager_reads_none(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x = torch.randn(4)
    states = []
    for backend in ("inductor", "inductor", "eager"):
        torch._dynamo.reset()
        with CacheWatch() as watch:
            torch.compile(lambda t: t.cos() * 3, backend=backend)(x)
        states.append(watch.state)
    torch._dynamo.reset()
    assert states == ["fresh", "warm", "none"], states
    assert watch.to_dict()["inductor_cache_dir"] == str(tmp_path)
