"""The garbage collector at fixed points: a phase runs with it paused, right after a collection.

Dynamo drops a cache entry when an object its guards hold by weak reference dies: Cartridge makes a class on every
call, and each dead class takes the entry that guards on it. Such classes die in reference cycles, so when they die
depends on when the cyclic collector happens to run, a matter of allocation counts across the whole process. Whether
a guard failed first or its entry was dropped first (and so the recompile's reason, its signature and whether it
counts as expected) varied from run to run. Collecting before each phase and pausing the collector during it puts
those deaths at the phase boundaries, the same in every run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collected_before() -> Iterator[None]:
    """Collect, then run the body with the collector paused (reference counting still frees everything else)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def freeze_survivors() -> None:
    """Collect, then move every object still alive (modules, the registry, what earlier cases left behind) out of the
    collector's reach, so that a collection before each phase looks at what was made since, not at the whole of torch.
    Called after collection and before each case: what is alive then lives for the session, or leaks anyway (a cycle
    among frozen objects is never collected)."""
    gc.collect()
    gc.freeze()
