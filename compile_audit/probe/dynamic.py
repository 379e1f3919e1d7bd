"""Dynamo config equivalent to ``torch.compile(dynamic=...)``, for calls that cannot take the flag."""

from __future__ import annotations

import contextlib

import torch._dynamo


def dynamic_shapes(dynamic: bool | None) -> contextlib.AbstractContextManager:
    """Patch Dynamo's shape config the way ``torch.compile(dynamic=dynamic)`` does."""
    if dynamic is None:
        return contextlib.nullcontext()
    if dynamic:
        return torch._dynamo.config.patch(assume_static_by_default=False)
    return torch._dynamo.config.patch(automatic_dynamic_shapes=False, assume_static_by_default=True)
