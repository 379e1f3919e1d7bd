"""Methods whose PEFT tuner has a layer for ``nn.Embedding`` besides its default targets, run on the input embedding
as methods of their own (``oft`` -> ``oft-embedding``): an embedding layer's forward is other code than a linear
layer's (a lookup, no matmul on the input), and only a case that targets the embedding compiles it.

``EMBEDDING_LAYERS`` (in ``methods``) names each such method and the PEFT class it reaches; LoRA's own embedding case is
the registry's ``lora-embedding``. Each embedding method keeps its method's limits and adds the embedding's: an image
model has no token embedding, and where the input embedding is tied to the output layer, merging changes both. The
method's limits on an architecture (its default targets' layer kind) do not carry over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from . import config_builders as options
from .methods import _NO_MERGE_TIED, EMBEDDING_HOTSWAP, Architecture, Method, Operation, Selector, Task
from .models import IMAGE_CLS

SUFFIX = "-embedding"
_NO_TOKEN_EMBEDDING = "an image classifier has no token embedding to adapt"
# Added to every embedding method's limits: what lora-embedding cannot run for the same reasons.
EMBEDDING_LIMITS: Mapping[Selector, str] = {
    Task(IMAGE_CLS): _NO_TOKEN_EMBEDDING,
    Operation("hotswap"): EMBEDDING_HOTSWAP,
    **{Operation("merge-unmerge").on(Architecture(arch)): _NO_MERGE_TIED for arch in ("qwen2", "opt", "gpt2")},
}


def embedding_method(method: Method, reached: str, cannot_run: Mapping[Selector, str]) -> Method:
    """``method`` with its adapter on the input embedding (PEFT's ``reached`` class adapts it)."""
    # An architecture's limits speak of the method's default targets (a layer kind it has no class for); the
    # embedding is another layer.
    kept = {
        selector: reason for selector, reason in method.cannot_run.items() if not isinstance(selector, Architecture)
    }
    kept = {selector: reason for selector, reason in kept.items() if selector not in method.lifts}
    lifts = {selector: reason for selector, reason in method.lifts.items() if selector not in EMBEDDING_LIMITS}
    return replace(
        method,
        name=method.name + SUFFIX,
        options=options.on_embedding(method.options),
        cannot_run={**kept, **EMBEDDING_LIMITS, **cannot_run},
        lifts=lifts,
        note=f"{method.note}; on the input embedding only ({reached})",
    )


def embedding_methods(
    methods: Mapping[str, Method], layers: Mapping[str, tuple[str, Mapping[Selector, str]]]
) -> dict[str, Method]:
    """An embedding method for each method ``layers`` names that ``methods`` has (a variant the installed peft lacks
    has none)."""
    found = {}
    for name, (reached, cannot_run) in layers.items():
        if name in methods:
            method = embedding_method(methods[name], reached, cannot_run)
            found[method.name] = method
    return found
