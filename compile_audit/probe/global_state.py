"""Process-wide torch settings a case may change and must restore: a snapshot before, a comparison after.

A library that sets one of them for the whole process (torchao once set the float32 matmul precision to "high")
changes what every later case compiles and computes, so results depend on test order. ``leaks`` names each
setting that differs, with both values; ``restore`` puts a snapshot back so that the next case starts clean.
"""

from __future__ import annotations

from typing import Any

import torch
import torch._dynamo

_DYNAMO_CONFIG = "torch._dynamo.config."

# name -> (read it, set it back)
_SETTINGS = {
    "torch.get_float32_matmul_precision()": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    "torch.get_default_dtype()": (torch.get_default_dtype, torch.set_default_dtype),
    "torch.is_grad_enabled()": (torch.is_grad_enabled, torch.set_grad_enabled),
    "torch.are_deterministic_algorithms_enabled()": (
        torch.are_deterministic_algorithms_enabled,
        lambda on: torch.use_deterministic_algorithms(
            on, warn_only=torch.is_deterministic_algorithms_warn_only_enabled()
        ),
    ),
    "torch.is_deterministic_algorithms_warn_only_enabled()": (
        torch.is_deterministic_algorithms_warn_only_enabled,
        lambda warn_only: torch.use_deterministic_algorithms(
            torch.are_deterministic_algorithms_enabled(), warn_only=warn_only
        ),
    ),
    "torch.backends.cudnn.deterministic": (
        lambda: torch.backends.cudnn.deterministic,
        lambda value: setattr(torch.backends.cudnn, "deterministic", value),
    ),
    "torch.backends.cudnn.benchmark": (
        lambda: torch.backends.cudnn.benchmark,
        lambda value: setattr(torch.backends.cudnn, "benchmark", value),
    ),
}


def snapshot() -> dict[str, Any]:
    """Every setting watched, by the name a user would write to read it."""
    state = {name: read() for name, (read, _) in _SETTINGS.items()}
    for key, value in torch._dynamo.config.get_config_copy().items():
        state[_DYNAMO_CONFIG + key] = value
    return state


def leaks(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per setting that differs: ``name: before -> after``."""
    lines = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name, "(unset)"), after.get(name, "(unset)")
        if not _equal(old, new):
            lines.append(f"{name}: {old!r} -> {new!r}")
    return lines


def restore(state: dict[str, Any]) -> None:
    """Put every watched setting back to ``state`` (a :func:`snapshot`)."""
    current = torch._dynamo.config.get_config_copy()
    for key, value in state.items():
        name = key.removeprefix(_DYNAMO_CONFIG)
        if key.startswith(_DYNAMO_CONFIG) and not _equal(current.get(name), value):
            setattr(torch._dynamo.config, name, value)
    for name, (read, write) in _SETTINGS.items():
        if name in state and not _equal(read(), state[name]):
            write(state[name])


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values without a boolean ==
        return repr(a) == repr(b)
