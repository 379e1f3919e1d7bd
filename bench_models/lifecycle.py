"""Helpers for adapter-lifecycle scenarios (multi-adapter, disable, merge, mixed batch, hotswap).

Freshly initialized adapters are often the identity (LoRA's B is zero), so an output "under the adapter" would
equal the base output and every parity check against it would pass vacuously. `randomize_adapter` gives an adapter
seeded non-trivial weights, as a trained checkpoint has. `build_lora_adapter` builds adapters whose scalings differ
(their own alpha, per-module ranks) and `load_adapter_model` loads one as users load the first adapter of a hot-swap.
This module never imports compile_audit or pytest.
"""

from __future__ import annotations

import dataclasses

import peft
import torch

from .models import get_spec
from .peft_models import build_method_base
from .registry import get_method

# The name components PEFT inserts where it wraps a module, so that the original weight moves: a tuner layer
# (`q_proj.weight` -> `q_proj.base_layer.weight`, twice when stacked), modules_to_save and trainable tokens
# (`classifier.original_module.weight`, `embed_tokens.token_adapter.base_layer.weight`), adaption prompt around the
# attention (`self_attn.model.q_proj.weight`), SHADOW around a decoder layer (`layers.0.base_layer.self_attn...`).
_WRAPPER_COMPONENTS = frozenset({"base_layer", "original_module", "token_adapter", "model"})


def _unwrapped_names(name: str) -> set[str]:
    """The names the weight called ``name`` in a PEFT model may have had in the base model: up to two wrapper
    components removed."""
    names = {name}
    for _ in range(2):
        names |= {
            ".".join(parts[:i] + parts[i + 1 :])
            for parts in [n.split(".") for n in names]
            for i, part in enumerate(parts)
            if part in _WRAPPER_COMPONENTS
        }
    return names


def adapter_parameters(peft_model, adapter_name: str) -> dict[str, torch.nn.Parameter]:
    """The parameters that belong to one adapter: every parameter with `adapter_name` as a component of its name, or,
    for adaption prompt, whose names carry no adapter name, that adapter's `adaption_*` parameters."""
    named = {name: p for name, p in peft_model.named_parameters() if adapter_name in name.split(".")}
    return named or _adaption_prompt_parameters(peft_model, adapter_name)


def _adaption_prompt_parameters(peft_model, adapter_name: str) -> dict[str, torch.nn.Parameter]:
    # Adaption prompt swaps one adapter's attention wrappers into the model at a time; the others (and the active one
    # while disabled) wait outside it in the tuner's `_cached_adapters`. PEFT has no public accessor for them.
    tuner = peft_model.base_model
    cached = getattr(tuner, "_cached_adapters", None)
    if cached is None:
        return {}
    if adapter_name in cached:
        named = {
            f"{adapter_name}.{i}.{name}": p
            for i, module in enumerate(cached[adapter_name])
            for name, p in module.named_parameters()
        }
    elif adapter_name == getattr(tuner, "_active_adapter", None):
        named = dict(peft_model.named_parameters())
    else:
        return {}
    return {name: p for name, p in named.items() if name.rsplit(".", 1)[-1].startswith("adaption_")}


@torch.no_grad()
def randomize_adapter(peft_model, adapter_name: str = "default", *, seed: int = 0, scale: float = 0.05) -> int:
    """Add seeded noise (std `scale`) to every floating parameter of one adapter; returns how many were changed.

    Deterministic in the parameter order, so two identically built models randomized with the same seed stay twins.
    """
    gen = torch.Generator().manual_seed(seed)
    changed = 0
    for _, param in sorted(adapter_parameters(peft_model, adapter_name).items()):
        if not param.is_floating_point():
            continue
        noise = torch.randn(param.shape, generator=gen, dtype=torch.float32) * scale
        param.add_(noise.to(device=param.device, dtype=param.dtype))
        changed += 1
    return changed


def base_weight_mismatches(peft_model, base_model) -> tuple[list[str], list[str]]:
    """Compare the PEFT model's base weights with an unwrapped base model's: (differing names, names not found)."""
    wrapped = peft_model.get_base_model().state_dict()
    by_base_name = dict(wrapped)  # a name the PEFT model kept as it was wins over any unwrapped one
    for name, tensor in wrapped.items():
        for candidate in _unwrapped_names(name):
            by_base_name.setdefault(candidate, tensor)
    differ, missing = [], []
    for name, expected in base_model.state_dict().items():
        found = by_base_name.get(name)
        if found is None:
            missing.append(name)
        elif found.shape != expected.shape or not torch.equal(found.cpu(), expected.cpu()):
            differ.append(name)
    return differ, missing


def build_lora_adapter(
    model_key: str,
    method_name: str,
    *,
    rank: int,
    lora_alpha: float,
    rank_pattern: dict[str, int] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
):
    """The method's PEFT model (a LoRA-family method) as ``build_peft_model`` builds it, in eval mode, with its own
    ``lora_alpha`` and per-module ranks (``rank_pattern``, module name -> rank): adapters whose scalings (alpha / r,
    rsLoRA's alpha / sqrt(r)) differ from each other and from module to module, as the adapters users hot-swap do."""
    config = get_method(method_name).make_config(get_spec(model_key), rank=rank)
    config = dataclasses.replace(config, lora_alpha=lora_alpha, rank_pattern=dict(rank_pattern or {}))
    base = build_method_base(model_key, method_name, device=device, dtype=dtype, seed=seed)
    torch.manual_seed(seed)
    return peft.get_peft_model(base, config).to(device).eval()


def load_adapter_model(model_key: str, method_name: str, path, *, device="cpu", dtype=None, seed: int = 0):
    """A saved adapter loaded onto a fresh base with ``PeftModel.from_pretrained``, as users load the first adapter
    of a hot-swap (in eval mode, its weights frozen)."""
    base = build_method_base(model_key, method_name, device=device, dtype=dtype, seed=seed)
    return peft.PeftModel.from_pretrained(base, str(path)).to(device).eval()


def lora_scalings(peft_model, adapter_name: str = "default") -> dict[str, float]:
    """Each LoRA layer's scaling of one adapter (a float, or the value of the tensor prepare_model_for_compiled_hotswap
    made of it), by module name."""
    return {
        name: float(module.scaling[adapter_name])
        for name, module in peft_model.named_modules()
        if isinstance(getattr(module, "scaling", None), dict) and adapter_name in module.scaling
    }
