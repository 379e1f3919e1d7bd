"""bench_models.lifecycle.randomize_adapter gives an adapter an effect, also where PEFT's parameter names carry no
adapter name (adaption prompt), and changes only the adapter it is asked for."""

from __future__ import annotations

import pytest
import torch

import bench_models
from bench_models import add_adapter
from bench_models.lifecycle import randomize_adapter

pytestmark = pytest.mark.selftest


@torch.no_grad()
def _logits(model, batch) -> torch.Tensor:
    return model(**batch).logits


@pytest.mark.parametrize("method", ["lora", "adaption-prompt"])
def test_a_randomized_adapter_changes_the_output_and_an_inactive_one_is_found_too(method):
    model = bench_models.build_peft_model("llama-tiny", method).eval()
    add_adapter(model, "llama-tiny", method, "other", seed=1)
    batch = bench_models.make_batch("llama-tiny", method, seq_len=8, seed=0)
    with model.disable_adapter():
        base = _logits(model, batch)
    fresh = _logits(model, batch)
    assert torch.allclose(fresh, base), "a fresh adapter should be the identity, or this test proves nothing"

    assert randomize_adapter(model, "other", seed=11) > 0
    assert torch.allclose(_logits(model, batch), base), "randomizing the inactive adapter changed the active one"
    assert randomize_adapter(model, "default", seed=10) > 0
    assert not torch.allclose(_logits(model, batch), base), "randomize_adapter left the active adapter the identity"

    model.set_adapter("other")
    assert not torch.allclose(_logits(model, batch), base), "randomize_adapter left the inactive adapter the identity"


def test_an_adapter_that_does_not_exist_has_no_parameters():
    model = bench_models.build_peft_model("llama-tiny", "adaption-prompt")
    assert randomize_adapter(model, "missing") == 0
