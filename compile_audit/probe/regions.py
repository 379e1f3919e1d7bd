"""Regional compilation: each repeated block of a model compiled, not the model as a whole.

A transformers model repeats one block (a decoder layer) N times in an ``nn.ModuleList``. Compiled whole, Dynamo
traces every layer's code in one frame; compiled per block, it traces the block once and the other N - 1 reuse that
compile (their parameters are inputs of the graph, not constants), which is what accelerate's ``compile_regions``
and diffusers' ``compile_repeated_blocks`` do. Everything outside the blocks (embeddings, the head, PEFT's own
wrappers) then runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn


class NoRepeatedBlocks(ValueError):
    """Regional compilation asked of a model with no repeated block: nothing would be compiled."""


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks of every ``nn.ModuleList`` whose two or more children are all of one class, outermost lists
    only (a block's own lists are compiled with it)."""
    blocks: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside or not isinstance(module, nn.ModuleList):
            continue
        children = list(module)
        if len(children) >= 2 and len({type(child) for child in children}) == 1:
            blocks.extend(children)
            inside.update(id(sub) for child in children for sub in child.modules())
    return blocks


def compile_regions(model: nn.Module, compile_block: Callable[[nn.Module], None]) -> nn.Module:
    """``compile_block`` applied to each repeated block (``lambda b: b.compile(backend=...)`` compiles it in
    place); returns ``model``, whose other modules stay eager. Raises NoRepeatedBlocks when there is none."""
    blocks = repeated_blocks(model)
    if not blocks:
        raise NoRepeatedBlocks(
            f"regional compilation: {type(model).__name__} has no nn.ModuleList of two or more blocks of one class"
        )
    for block in blocks:
        compile_block(block)
    return model


def compile_each_block(model: nn.Module, **compile_kwargs: Any) -> nn.Module:
    """Every repeated block compiled in place with ``torch.compile``'s ``compile_kwargs``; returns ``model``."""
    return compile_regions(model, lambda block: block.compile(**compile_kwargs))
