"""Whether a compile was served from inductor's caches: compile seconds mean little without it.

Inductor counts FX-graph cache hits and misses, and AOTAutograd its own, in ``torch._dynamo.utils.counters``. A
:class:`CacheWatch` reads them around a span of work and says whether the compiles in it were ``fresh`` (nothing
served from a cache), ``warm`` (everything served) or ``mixed``; ``none`` when no cached compile happened (a backend
without inductor).
"""

from __future__ import annotations

import os
from typing import Any

from torch._dynamo.utils import counters

_COUNTERS = {
    "fx_graph_hits": ("inductor", "fxgraph_cache_hit"),
    "fx_graph_misses": ("inductor", "fxgraph_cache_miss"),
    "aot_autograd_hits": ("aot_autograd", "autograd_cache_hit"),
    "aot_autograd_misses": ("aot_autograd", "autograd_cache_miss"),
}


def _read() -> dict[str, int]:
    return {name: int(counters[group][key]) for name, (group, key) in _COUNTERS.items()}


def cache_state(hits: int, misses: int) -> str:
    if hits == 0 and misses == 0:
        return "none"
    if hits == 0:
        return "fresh"
    return "warm" if misses == 0 else "mixed"


class CacheWatch:
    """``with CacheWatch() as watch: ...`` then ``watch.to_dict()``: the cache counters of that span."""

    def __enter__(self) -> CacheWatch:
        self._before = _read()
        self.counts: dict[str, int] = {}
        return self

    def __exit__(self, *exc: object) -> None:
        after = _read()
        self.counts = {name: after[name] - self._before[name] for name in after}

    @property
    def state(self) -> str:
        hits = self.counts["fx_graph_hits"] + self.counts["aot_autograd_hits"]
        return cache_state(hits, self.counts["fx_graph_misses"] + self.counts["aot_autograd_misses"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "inductor_cache": self.state,
            **{f"inductor_cache_{name}": count for name, count in self.counts.items()},
            "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "(default)"),
        }
