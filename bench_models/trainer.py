"""A ``transformers.Trainer`` for a zoo model: synthetic datasets and lean ``TrainingArguments``.

The Trainer compiles the model itself (``torch_compile=True``) and evaluates during training
(``eval_strategy="steps"``); nothing is saved, logged to a tracker or downloaded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .workloads import make_batch


def synthetic_dataset(
    model_key: str, method_name: str | None, *, size: int, seq_len: int = 8, seed: int = 0
) -> list[dict[str, torch.Tensor]]:
    """``size`` seeded examples of one length (the Trainer's default collator stacks them), from ``make_batch``:
    token ids and labels (class ids for sequence classification), plus what the method's forward needs."""
    batch = make_batch(model_key, method_name, batch_size=size, seq_len=seq_len, seed=seed)
    return [{key: value[row] for key, value in batch.items()} for row in range(size)]


@contextlib.contextmanager
def _keeping_tf32() -> Iterator[None]:
    """``TrainingArguments(torch_compile=True)`` turns TF32 on, process-wide, where CUDA supports it: keep the
    process's setting so that the cases that run after this one are unaffected."""
    new_api = hasattr(torch.backends, "fp32_precision")  # torch >= 2.9
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = torch.backends.fp32_precision if new_api else (matmul.allow_tf32, cudnn.allow_tf32)
    try:
        yield
    finally:
        if new_api:
            torch.backends.fp32_precision = saved
        else:
            matmul.allow_tf32, cudnn.allow_tf32 = saved


def make_trainer(
    model,
    model_key: str,
    method_name: str,
    *,
    output_dir: str,
    backend: str,
    device: str = "cpu",
    max_steps: int = 5,
    eval_steps: int = 2,
    batch_size: int = 2,
    seq_len: int = 8,
    callbacks: list | None = None,
    seed: int = 0,
):
    """A Trainer that compiles ``model`` with ``backend`` and evaluates it every ``eval_steps`` optimizer steps.

    One epoch of ``max_steps`` batches, one eval batch; no checkpoints, no logging, no progress bar, no printed
    metrics, no worker processes. Every batch key is kept (``remove_unused_columns=False``: some methods take
    ``task_ids``). A NaN or infinite step loss stays in the training loss (``logging_nan_inf_filter=False``)."""
    from transformers import PrinterCallback, Trainer, TrainingArguments

    with _keeping_tf32():
        args = TrainingArguments(
            output_dir=output_dir,
            torch_compile=True,
            torch_compile_backend=backend,
            use_cpu=device == "cpu",
            max_steps=max_steps,
            eval_strategy="steps",
            eval_steps=eval_steps,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=batch_size,
            learning_rate=1e-3,
            save_strategy="no",
            logging_strategy="no",
            logging_nan_inf_filter=False,
            report_to=[],
            disable_tqdm=True,
            dataloader_num_workers=0,
            remove_unused_columns=False,
            prediction_loss_only=True,
            seed=seed,
        )
    train = synthetic_dataset(model_key, method_name, size=batch_size * max_steps, seq_len=seq_len, seed=seed)
    evaluation = synthetic_dataset(model_key, method_name, size=batch_size, seq_len=seq_len, seed=seed + 1)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation, callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # it prints every evaluation's metrics
    return trainer
