"""The LoRA experts X-LoRA mixes. X-LoRA loads already-trained experts from disk, so two random LoRA experts are
written for a model once per process: their tensor names and shapes come from a LoRA model built on the meta
device, so even full-size experts cost no base-model memory."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import peft
import torch

from .models import ModelSpec, auto_model_class

_EXPERT_DIRS: dict[tuple[str, int, tuple[str, ...]], dict[str, str]] = {}


def expert_dirs(spec: ModelSpec, config: peft.LoraConfig) -> dict[str, str]:
    """Adapter name -> directory of a random LoRA expert of `config` for `spec`, written on first use."""
    key = (spec.key, config.r, tuple(sorted(config.target_modules)))
    if key not in _EXPERT_DIRS:
        from peft.utils import get_peft_model_state_dict
        from safetensors.torch import save_file

        root = Path(tempfile.mkdtemp(prefix=f"bench_models_xlora_{spec.key}_"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        with torch.device("meta"):
            base = auto_model_class(spec).from_config(spec.hf_config())
        shapes = {k: v.shape for k, v in get_peft_model_state_dict(peft.get_peft_model(base, config)).items()}
        # X-LoRA loads expert i under the adapter name str(i) and then activates the config's keys, so the keys
        # must be "0", "1", ...
        experts = {}
        for i in range(2):
            gen = torch.Generator().manual_seed(100 + i)
            expert_dir = root / f"expert_{i}"
            config.save_pretrained(expert_dir)
            tensors = {k: torch.randn(shape, generator=gen) * 0.02 for k, shape in shapes.items()}
            save_file(tensors, expert_dir / "adapter_model.safetensors")
            experts[str(i)] = str(expert_dir)
        _EXPERT_DIRS[key] = experts
    return _EXPERT_DIRS[key]
