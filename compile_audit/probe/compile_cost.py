"""Where compile time goes: Dynamo, AOTAutograd, the backend, and how many attempts it took.

Dynamo keeps one compilation-metrics record per frame compile (``torch._dynamo.utils._compilation_metrics``), and
one per backward graph compiled lazily at the first backward. A :class:`CompileCostWatch` reads the records added
during a span of work and splits their time:

- ``dynamo_s``: the frame compiles less the backend calls in them (bytecode tracing, guards, graph building);
- ``aot_autograd_s``: the backend calls less inductor's part (for ``aot_eager``, all of the call: the joint graph);
- ``backend_s``: inductor's forward compiles and the lazy backward compiles;
- ``attempts``: frame compiles plus the restarts Dynamo made on them (``restarts`` names each restart's reason, and
  ``restart_s`` the Dynamo time thrown away by them).

A GPU stage's time limit is set from these figures, measured on the same model first (results/README.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch._dynamo.utils as dynamo_utils

_KEPT = 4096  # records kept while watching: a full-size model compiles far more frames than Dynamo's default 64


def _seconds(microseconds: int | None) -> float:
    return (microseconds or 0) / 1e6


@dataclasses.dataclass(frozen=True)
class CompileCost:
    frames: int = 0
    attempts: int = 0
    dynamo_s: float = 0.0
    aot_autograd_s: float = 0.0
    backend_s: float = 0.0
    restart_s: float = 0.0
    restarts: tuple[str, ...] = ()

    @property
    def total_s(self) -> float:
        return self.dynamo_s + self.aot_autograd_s + self.backend_s

    @classmethod
    def of(cls, records: Iterable[Any]) -> CompileCost:
        """The cost of Dynamo's compilation-metrics records."""
        frames = attempts = 0
        frame_us = backend_call_us = inductor_us = backward_us = restart_us = 0
        restarts: list[str] = []
        for record in records:
            backward_us += record.backward_cumulative_compile_time_us or 0
            if record.dynamo_cumulative_compile_time_us is None:
                continue  # a lazy backward compile: no frame of its own
            frames += 1
            reasons = sorted(record.restart_reasons or ())
            attempts += 1 + len(reasons)
            restarts.extend(reasons)
            frame_us += record.dynamo_cumulative_compile_time_us
            backend_call_us += record.aot_autograd_cumulative_compile_time_us or 0
            inductor_us += record.inductor_cumulative_compile_time_us or 0
            restart_us += record.dynamo_compile_time_before_restart_us or 0
        return cls(
            frames=frames,
            attempts=attempts,
            dynamo_s=_seconds(frame_us - backend_call_us),
            aot_autograd_s=_seconds(backend_call_us - inductor_us),
            backend_s=_seconds(inductor_us + backward_us),
            restart_s=_seconds(restart_us),
            restarts=tuple(restarts),
        )

    def to_dict(self, prefix: str = "") -> dict[str, Any]:
        """Seconds rounded to milliseconds, each key with ``prefix`` (``first_step_``)."""
        figures = {
            "dynamo_s": round(self.dynamo_s, 3),
            "aot_autograd_s": round(self.aot_autograd_s, 3),
            "backend_s": round(self.backend_s, 3),
            "compile_attempts": self.attempts,
            "restart_s": round(self.restart_s, 3),
            "restarts": list(self.restarts),
        }
        return {f"{prefix}{name}": value for name, value in figures.items()}


class CompileCostWatch:
    """``with CompileCostWatch() as watch: ...`` then ``watch.cost``: what the compiles of that span cost."""

    cost: CompileCost

    def __enter__(self) -> CompileCostWatch:
        self._limit = dynamo_utils._compilation_metrics.maxlen
        dynamo_utils.set_compilation_metrics_limit(max(_KEPT, self._limit or 0))
        self._seen = {id(record) for record in dynamo_utils._compilation_metrics}
        self._kept = list(dynamo_utils._compilation_metrics)  # the ids above stay those of live records
        self.cost = CompileCost()
        return self

    def __exit__(self, *exc: object) -> None:
        new = [record for record in dynamo_utils._compilation_metrics if id(record) not in self._seen]
        dynamo_utils.set_compilation_metrics_limit(self._limit or 64)
        self.cost = CompileCost.of(new)
        del self._kept
