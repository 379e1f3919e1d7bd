"""Wrapping a zoo model for data-parallel training on the local ranks: DDP or FSDP2 (``fully_shard``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel


def without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Every dropout of the model (the base model's too: BERT's are 0.1) at 0: each rank would draw its own masks on
    its share of the batch, which a single-process run on the whole batch cannot reproduce."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def trainable_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


@contextlib.contextmanager
def ddp_buckets_of(bucket_bytes: int) -> Iterator[None]:
    """Let Dynamo's DDPOptimizer use buckets below 1 MiB: it takes its first bucket's size from
    ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB) and refuses a DDP whose ``bucket_cap_mb`` is
    smaller (AssertionError "First bucket should be smaller/equal to other buckets"), while a tiny model's
    adapter has a few KiB of trainable weights."""
    previous = dist._DEFAULT_FIRST_BUCKET_BYTES
    dist._DEFAULT_FIRST_BUCKET_BYTES = min(previous, bucket_bytes)
    try:
        yield
    finally:
        dist._DEFAULT_FIRST_BUCKET_BYTES = previous


def wrap_ddp(model: torch.nn.Module, bucket_bytes: int, device: str) -> DistributedDataParallel:
    device_ids = [torch.device(device).index] if device.startswith("cuda") else None
    return DistributedDataParallel(model, bucket_cap_mb=bucket_bytes / 2**20, device_ids=device_ids)


def shard_fsdp2(model: torch.nn.Module) -> torch.nn.Module:
    """``fully_shard`` on every decoder layer (the model's ``_no_split_modules`` classes), then on the root."""
    layer_classes = set(getattr(model.get_base_model(), "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in layer_classes:
            fully_shard(module)
    fully_shard(model)
    return model


def full_trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every trainable parameter, whole (an FSDP2 shard gathered with ``full_tensor``), on the CPU."""
    state = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            tensor = param.full_tensor() if hasattr(param, "full_tensor") else param
            state[name] = tensor.detach().float().cpu()
    return state


def shard_batch(batch: dict[str, torch.Tensor], rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """This rank's equal share of a global batch (rows ``rank::world_size``)."""
    return {key: value[rank::world_size] for key, value in batch.items()}
