"""bench_models.lifecycle.base_weight_mismatches finds the base weights behind every kind of PEFT wrapper, and names a
changed one."""

from __future__ import annotations

import pytest
import torch

import bench_models
from bench_models.lifecycle import base_weight_mismatches

pytestmark = pytest.mark.selftest

# Each wraps the base weights differently: a tuner layer, adaption prompt around the attention, SHADOW around a
# decoder layer, trainable tokens around the embedding.
WRAPPERS = ("lora", "adaption-prompt", "shadow", "lora-trainable-token-indices")


@pytest.mark.parametrize("method", WRAPPERS)
def test_every_base_weight_is_found_and_a_changed_one_is_named(method):
    model = bench_models.build_peft_model("llama-tiny", method)
    base = bench_models.build_base_model("llama-tiny", seed=0)
    assert base_weight_mismatches(model, base) == ([], [])
    with torch.no_grad():
        base.model.layers[0].self_attn.q_proj.weight.add_(1.0)
    assert base_weight_mismatches(model, base) == (["model.layers.0.self_attn.q_proj.weight"], [])
