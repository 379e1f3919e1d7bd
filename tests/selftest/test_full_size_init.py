"""Full-size models are materialized from the meta device (bench_models.models): every tensor must end up as a normal
build has it. One layer and a small vocabulary keep it fast; neither changes rotary buffers or tying."""

from __future__ import annotations

import pytest
import torch

from bench_models import MODELS, models
from bench_models.models import UninitializedTensors, auto_model_class, build_base_model, get_spec

pytestmark = pytest.mark.selftest

FULL_SIZE = [key for key, spec in MODELS.items() if spec.full_size]
SMALL = {"vocab_size": 512}


def _normal_build(key: str, dtype: torch.dtype):
    spec = get_spec(key)
    config = spec.hf_config()
    config.num_hidden_layers = 1
    for name, value in SMALL.items():
        setattr(config, name, value)
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[:1]
    torch.manual_seed(0)
    return auto_model_class(spec).from_config(config, attn_implementation=spec.attn_implementation, dtype=dtype)


@pytest.mark.parametrize("key", FULL_SIZE)
def test_meta_build_matches_a_normal_build(key):
    dtype = torch.bfloat16  # the GPU tier's: full-size models run nowhere else
    meta = build_base_model(key, num_layers=1, dtype=dtype, config_overrides=SMALL)
    normal = _normal_build(key, dtype)
    buffers = dict(meta.named_buffers())
    assert buffers, f"{key}: no buffers (rotary inv_freq expected)"
    for name, expected in normal.named_buffers():
        torch.testing.assert_close(buffers[name], expected, msg=lambda m, name=name: f"{key} buffer {name}: {m}")
    for module_name, module in normal.named_modules():
        if hasattr(module, "original_inv_freq"):
            twin = meta.get_submodule(module_name)
            torch.testing.assert_close(twin.original_inv_freq, module.original_inv_freq)
            assert twin.original_inv_freq.device == twin.inv_freq.device
    tied = normal.get_output_embeddings().weight is normal.get_input_embeddings().weight
    assert (meta.get_output_embeddings().weight is meta.get_input_embeddings().weight) == tied
    parameters = dict(meta.named_parameters())
    assert parameters.keys() == dict(normal.named_parameters()).keys()
    for name, expected in normal.named_parameters():
        actual = parameters[name]
        assert torch.isfinite(actual).all(), f"{key}: {name} is not finite"
        if expected.dim() > 1:  # initialized as the normal build is: the same spread, not memory left by to_empty
            ratio = actual.float().std().item() / expected.float().std().item()
            assert 0.8 < ratio < 1.25, f"{key}: {name} std {ratio:.3g}x the normal build's"


def test_a_tensor_the_initialization_misses_is_named(monkeypatch):
    """to_empty() memory is NaN-filled first, so a missed tensor is an error, never silent garbage or zeros."""
    monkeypatch.setattr(models, "_INITIAL_STATE", {})
    model_class = type(build_base_model(FULL_SIZE[0], num_layers=1, config_overrides=SMALL))
    monkeypatch.setattr(model_class, "init_weights", lambda self: None)
    with pytest.raises(UninitializedTensors, match=r"tensor\(s\) not initialized: .*embed_tokens"):
        models._INITIAL_STATE.clear()  # built above: the session's copy would stand in for the initialization
        build_base_model(FULL_SIZE[0], num_layers=1, config_overrides=SMALL)


def test_a_second_build_in_the_session_copies_the_first_ones_weights(monkeypatch):
    monkeypatch.setattr(models, "_INITIAL_STATE", {})
    first = build_base_model(FULL_SIZE[0], num_layers=1, config_overrides=SMALL)
    calls = []
    monkeypatch.setattr(models, "_reinitialize", lambda model, seed: calls.append(seed))
    second = build_base_model(FULL_SIZE[0], num_layers=1, config_overrides=SMALL)
    assert calls == []  # not initialized again
    for (name, expected), actual in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(actual, expected), name
    assert torch.equal(dict(second.named_buffers())["model.rotary_emb.inv_freq"], first.model.rotary_emb.inv_freq)
    tied = first.get_output_embeddings().weight is first.get_input_embeddings().weight
    assert (second.get_output_embeddings().weight is second.get_input_embeddings().weight) == tied
    build_base_model(FULL_SIZE[0], num_layers=1, config_overrides=SMALL, seed=1)
    assert calls == [1]  # another seed: initialized anew
