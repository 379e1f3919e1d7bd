"""Synthetic batches and one-step train/eval loops."""

from __future__ import annotations

import weakref

import torch

from .config_builders import NUM_TASKS
from .models import CAUSAL_LM, IMAGE_CLS, get_spec
from .registry import get_method

# Token ids below this are kept free for pad/bos/eos.
_FIRST_TOKEN_ID = 3
# An image batch's side in pixels per unit of sequence length: a multiple of the zoo's image models' total stride.
IMAGE_SCALE = 4
# The batch keys a model's forward takes as input (not the labels, not a method's extras).
MODEL_INPUTS = ("input_ids", "attention_mask", "pixel_values")


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch without its labels and a method's extras: what the base model alone is called with."""
    return {key: value for key, value in batch.items() if key in MODEL_INPUTS}


def make_batch(
    model_key: str,
    method_name: str | None = None,
    *,
    batch_size: int = 2,
    seq_len: int = 8,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict[str, torch.Tensor]:
    """A seeded synthetic batch: input_ids, attention_mask, labels, plus what the method's forward needs. An image
    model's batch is pixel_values and labels, its images ``IMAGE_SCALE * seq_len`` pixels square, so that a length
    that changes between phases changes the spatial size (dynamic shapes) as it changes a text model's."""
    spec = get_spec(model_key)
    gen = torch.Generator().manual_seed(seed)
    if spec.task == IMAGE_CLS:
        side = IMAGE_SCALE * seq_len
        pixels = torch.randn(batch_size, spec.image_channels, side, side, generator=gen)
        labels = torch.randint(0, spec.num_labels, (batch_size,), generator=gen)
        return {"pixel_values": pixels.to(device), "labels": labels.to(device)}
    input_ids = torch.randint(_FIRST_TOKEN_ID, spec.vocab_size, (batch_size, seq_len), generator=gen)
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    method = get_method(method_name) if method_name is not None else None
    if method is not None and method.batch_token_ids:
        # Put the adapter's trainable token ids right after the first token of every row.
        token_ids = torch.tensor(method.batch_token_ids[: seq_len - 1])
        input_ids[:, 1 : 1 + len(token_ids)] = token_ids
    if spec.task == CAUSAL_LM:
        batch["labels"] = input_ids.clone()
    else:
        batch["labels"] = torch.randint(0, spec.num_labels, (batch_size,), generator=gen)
    if method is not None and "task_ids" in method.batch_keys:
        batch["task_ids"] = torch.arange(batch_size) % NUM_TASKS
    return {k: v.to(device) for k, v in batch.items()}


def make_optimizer(model) -> torch.optim.Optimizer:
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)


# Steps taken per optimizer, for methods whose per-step hook needs a global step (AdaLoRA).
_STEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _rank_allocator(model):
    """The tuner's `update_and_allocate` (AdaLoRA, AdaMSS), looking through a torch.compile wrapper."""
    model = getattr(model, "_orig_mod", model)
    tuner = getattr(model, "base_model", None)
    return getattr(tuner, "update_and_allocate", None)


def set_kv_cache(model, on: bool):
    """The PEFT model's base ``config.use_cache``, where it has one; returns ``model``. A training step needs no KV
    cache; with one, each decoder layer writes its own slot, a guard per layer, so regional compilation compiles
    every layer anew (docs/scenarios.md). The benchmarks turn it off for eager, whole and regional alike."""
    config = getattr(model.get_base_model(), "config", None)
    if config is not None and hasattr(config, "use_cache"):
        config.use_cache = on
    return model


def train_step(model, optimizer, batch: dict[str, torch.Tensor], on_gradients=None) -> torch.Tensor:
    """One optimizer step; ``on_gradients()`` is called after the backward, while the gradients are there."""
    model.train()
    loss = model(**batch).loss
    loss.backward()
    if on_gradients is not None:
        on_gradients()
    optimizer.step()
    # AdaLoRA's rank allocation is part of its training loop per PEFT's docs (after step, before zero_grad: it
    # reads the grads). It is eager bookkeeping outside forward, so it stays here, uncompiled, even when `model`
    # is compiled; its in-place masking of lora_E between steps is what a compiled forward must tolerate.
    update_and_allocate = _rank_allocator(model)
    if update_and_allocate is not None:
        step = _STEPS.get(optimizer, 0)
        update_and_allocate(step)
        _STEPS[optimizer] = step + 1
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def eval_step(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(**batch).logits.detach()
