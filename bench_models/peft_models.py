"""A method's PEFT model: the seeded base model wrapped by get_peft_model, and a second adapter added to it."""

from __future__ import annotations

import peft
import torch

from .methods import Operation
from .models import build_base_model, get_spec
from .registry import get_method
from .skip_reasons import skip_reason


def build_peft_model(
    model_key: str,
    method_name: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
    adapter_name: str = "default",
    rank: int | None = None,
    dropout: float | None = None,
    num_layers: int | None = None,
):
    """Base model (``num_layers`` overrides its depth) + get_peft_model, seeded (the adapter init too), in train
    mode."""
    spec = get_spec(model_key)
    method = get_method(method_name)
    reason = skip_reason(model_key, method_name)
    if reason:
        raise ValueError(f"cannot build {method_name} on {model_key}: {reason}")
    base = build_method_base(model_key, method_name, device=device, dtype=dtype, seed=seed, num_layers=num_layers)
    config = method.make_config(spec, rank=rank, dropout=dropout)
    torch.manual_seed(seed)
    model = peft.get_peft_model(base, config, adapter_name=adapter_name)
    add_companions(model, spec, method, seed=seed)
    model.to(device)
    return model.train()


def add_companions(peft_model, spec, method, *, seed: int) -> None:
    """The adapters the method's adapter reads beside it (``Method.companions``), each seeded; the adapter under test
    stays the active one."""
    if method.companions is None:
        return
    active = peft_model.active_adapter
    for offset, (name, kwargs) in enumerate(method.companions(spec).items(), 1):
        torch.manual_seed(seed + offset)
        peft_model.add_adapter(name, peft.LoraConfig(**kwargs))
    peft_model.set_adapter(active)


def build_method_base(
    model_key: str,
    method_name: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
    num_layers: int | None = None,
):
    """The base model as the method needs it (its ``base_config_overrides``, X-LoRA's use_cache off): every base an
    adapter of this method is built on or loaded into, so that a fresh base for reloading matches the trained one."""
    base = build_base_model(model_key, device=device, dtype=dtype, seed=seed, num_layers=num_layers)
    for attr, value in get_method(method_name).base_config_overrides.items():
        setattr(base.config, attr, value)
    return base


def add_adapter(peft_model, model_key: str, method_name: str, adapter_name: str, *, seed=1, rank=None, dropout=None):
    """Add a second adapter of the same method (multi-adapter scenarios); the active adapter is unchanged."""
    method = get_method(method_name)
    if not method.supports("multi-adapter"):
        why = method.limits.get(Operation("multi-adapter"), method.note)
        raise NotImplementedError(f"PEFT does not support multiple {method_name} adapters ({why})")
    config = method.make_config(get_spec(model_key), rank=rank, dropout=dropout)
    torch.manual_seed(seed)
    peft_model.add_adapter(adapter_name, config)
    return peft_model
