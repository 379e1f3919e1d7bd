"""A warm start: the compile artifacts one process saved, loaded by a fresh one, which then compiles nothing anew.

``torch.compiler.save_cache_artifacts()`` bundles what inductor's FX-graph cache, AOTAutograd's cache and the
autotuner stored in this process; ``load_cache_artifacts()`` puts them into another process's caches. A user who
deploys a compiled PEFT model (or loads adapters into one) starts warm only if every graph the warm process compiles
is found there: any miss means a compile from scratch, which is what a change that alters the traced graphs, the
guards' specializations or the cache keys does. Dynamo still traces in the warm process; only the backends' work is
saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch


class WarmStartError(RuntimeError):
    """Nothing to save, or a file that cannot be loaded as compile artifacts."""


def save_artifacts(path: Path) -> int:
    """This process's compile artifacts written to ``path``; returns their size in bytes."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        raise WarmStartError(f"{path}: nothing to save: no cacheable compile artifact was recorded in this process")
    data, _info = saved
    path.write_bytes(data)
    return len(data)


def load_artifacts(path: Path) -> None:
    """The artifacts ``save_artifacts`` wrote, put into this process's compile caches (before anything compiles)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise WarmStartError(f"{path}: cannot read the saved compile artifacts: {error}") from None
    if torch.compiler.load_cache_artifacts(data) is None:
        raise WarmStartError(f"{path}: holds no compile artifact torch can load")


def warm_start_problems(counts: Mapping[str, int], restarts: int = 0) -> list[str]:
    """What keeps a warm process from starting warm, from its cache counters (``CacheWatch.counts``): a miss is a
    graph compiled anew, and no hit at all means nothing was served from the artifacts.

    ``restarts``: the compile attempts Dynamo threw away in that span (``CompileCost.restarts``). An attempt Dynamo
    restarts from inside the backend (a Python float it could not turn into a tensor, under ``dynamic=True``) looked
    AOTAutograd's cache up and never stored an entry, so its lookup misses in every process, cold or warm: up to that
    many AOTAutograd misses are those attempts, not graphs compiled anew."""
    problems = []
    fx_misses = counts.get("fx_graph_misses", 0)
    aot_misses = max(0, counts.get("aot_autograd_misses", 0) - restarts)
    if fx_misses or aot_misses:
        discounted = f" ({restarts} more: attempts Dynamo restarted)" if restarts else ""
        problems.append(
            f"{fx_misses} inductor FX-graph and {aot_misses} AOTAutograd cache miss(es){discounted} after loading the"
            " saved artifacts: those graphs compiled from scratch (the cold process saved other graphs or other"
            " cache keys)"
        )
    if counts.get("fx_graph_hits", 0) + counts.get("aot_autograd_hits", 0) == 0:
        problems.append("no cache hit after loading the saved artifacts: nothing started warm")
    return problems
