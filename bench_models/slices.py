"""Named selections of the registry that several parts of the suite share."""

from __future__ import annotations

# The methods every tiny architecture and the GPU tier run by default (the whole registry runs on
# llama-tiny; everything everywhere with --full-matrix): LoRA and its most used variant, a scaling
# method, a Kronecker-style method with data-dependent code, and a prompt-learning method.
CORE_METHODS = ("lora", "lora-dora", "ia3", "loha", "prompt-tuning")
