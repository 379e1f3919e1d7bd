"""Step timing: synchronized wall-clock samples and their summary (median and spread).

Pure statistics (:func:`percentile`, :func:`summarize_times`) plus :class:`StepTimer`, which times a
call on any device: CUDA work is asynchronous, so the timer synchronizes the device before starting
the clock and before stopping it. Timings are reported, never asserted.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def _checked(values: Sequence[float], what: str) -> list[float]:
    values = list(values)
    if not values:
        raise ValueError(f"{what}: no samples")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{what}: every sample must be a finite number, got {value!r}")
    return [float(v) for v in values]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's default).

    >>> percentile([1, 2, 3, 4], 50)
    2.5
    """
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 100:
        raise ValueError(f"percentile: q must be a number in [0, 100], got {q!r}")
    ordered = sorted(_checked(values, "percentile"))
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclasses.dataclass(frozen=True)
class TimingStats:
    """Seconds per step over ``rounds`` samples."""

    rounds: int
    median: float
    mean: float
    min: float
    max: float
    iqr: float  # interquartile range: the spread that one slow outlier does not move
    stdev: float

    def to_dict(self, prefix: str) -> dict[str, float | int]:
        """Milliseconds, e.g. ``{"eager_step_ms": ..., "eager_step_ms_iqr": ..., ...}`` for prefix "eager_step"."""
        return {
            f"{prefix}_ms": _ms(self.median),
            f"{prefix}_ms_mean": _ms(self.mean),
            f"{prefix}_ms_min": _ms(self.min),
            f"{prefix}_ms_max": _ms(self.max),
            f"{prefix}_ms_iqr": _ms(self.iqr),
            f"{prefix}_ms_stdev": _ms(self.stdev),
            f"{prefix}_rounds": self.rounds,
        }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def summarize_times(seconds: Sequence[float]) -> TimingStats:
    """Median, mean, extremes and spread of per-step times; ValueError on no samples or a negative one."""
    values = _checked(seconds, "step times")
    if any(v < 0 for v in values):
        raise ValueError(f"step times: negative duration in {values}")
    return TimingStats(
        rounds=len(values),
        median=statistics.median(values),
        mean=statistics.fmean(values),
        min=min(values),
        max=max(values),
        iqr=percentile(values, 75) - percentile(values, 25),
        stdev=statistics.stdev(values) if len(values) > 1 else 0.0,
    )


def synchronize(device: str | torch.device) -> None:
    """Wait for the device's queued work (CUDA); a no-op on CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepTimer:
    """Times calls on one device; ``samples`` holds the seconds of every call, in order.

    >>> timer = StepTimer("cpu")
    >>> loss = timer.time(train_step, model, optimizer, batch)
    >>> summarize_times(timer.samples[warmup:])
    """

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)
        self.samples: list[float] = []

    def time(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        synchronize(self.device)
        started = time.perf_counter()
        result = fn(*args, **kwargs)
        synchronize(self.device)
        self.samples.append(time.perf_counter() - started)
        return result
