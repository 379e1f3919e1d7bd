"""Graph splits made by Dynamo's DDPOptimizer, counted apart from graph breaks.

Under ``DistributedDataParallel`` with ``torch._dynamo.config.optimize_ddp`` (the default), Dynamo hands each
graph it traced to ``DDPOptimizer``, which splits it at DDP's gradient bucket boundaries so that each bucket's
all-reduce can start while the backward of the earlier pieces still runs, and sends every piece to the backend.
The pieces carry a ``compile_subgraph_reason`` that says "graph-break", but nothing fell back to Python: these
are splits, not breaks. :func:`counting_ddp_splits` makes a counting backend see the traced graph once (with its
real break, if any) and record how many pieces DDPOptimizer cut it into.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch

_PIECE_FRAME = "DDPOptimizer"  # the frame name DDPOptimizer gives each piece's compile reason


@dataclasses.dataclass(frozen=True)
class GraphSplit:
    """One traced graph that DDPOptimizer cut into ``pieces`` at bucket boundaries."""

    pieces: int
    bucket_bytes_cap: int
    bucket_params: tuple[int, ...]  # trainable parameters per piece, in graph order

    @property
    def count(self) -> int:
        return self.pieces - 1

    def describe(self) -> str:
        return (
            f"1 graph split into {self.pieces} pieces at DDP bucket boundaries"
            f" (bucket cap {self.bucket_bytes_cap} bytes; trainable parameters per piece {list(self.bucket_params)})"
        )


def is_ddp_piece(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` is a piece of a graph DDPOptimizer split (its reason is DDPOptimizer's, not Dynamo's)."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    return any(getattr(frame, "name", None) == _PIECE_FRAME for frame in getattr(reason, "user_stack", None) or ())


@contextlib.contextmanager
def counting_ddp_splits(backend: Any) -> Iterator[None]:
    """While active, a graph DDPOptimizer splits is counted by ``backend.count_graph(gm)`` (once, as traced) and
    its split recorded with ``backend.record_split(GraphSplit)``; ``backend`` skips the pieces (``is_ddp_piece``)."""
    from torch._dynamo.backends.distributed import DDPOptimizer

    original = DDPOptimizer.compile_fn

    def compile_fn(optimizer: Any, gm: torch.fx.GraphModule, example_inputs: list[Any], **configs: Any) -> Any:
        compiled = original(optimizer, gm, example_inputs, **configs)
        buckets = optimizer.buckets
        if len(buckets) > 1:  # with one bucket DDPOptimizer handed the graph itself to the backend
            backend.count_graph(gm)
            backend.record_split(
                GraphSplit(len(buckets), optimizer.bucket_bytes_cap, tuple(len(b.params) for b in buckets))
            )
        return compiled

    with mock.patch.object(DDPOptimizer, "compile_fn", compile_fn):
        yield
