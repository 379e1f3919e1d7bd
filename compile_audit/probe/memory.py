"""CUDA memory per step: reserved (what the caching allocator holds) and peak allocated.

:class:`MemorySampler` resets the device's peak statistics before a step and samples after it, so each
sample describes one step. On a CPU device it records nothing and its summary is ``None``: torch has no
equivalent counters there. :func:`summarize_memory` is pure and works on any list of samples.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Sequence

import torch

from compile_audit.probe.timing import percentile


@dataclasses.dataclass(frozen=True)
class MemorySample:
    reserved: int  # torch.cuda.memory_reserved() after the step
    allocated_peak: int  # torch.cuda.max_memory_allocated() over the step


@dataclasses.dataclass(frozen=True)
class MemoryStats:
    """Bytes over ``steps`` samples (the MetaMathQA rows: reserved max / mean / 99th, allocated max)."""

    steps: int
    reserved_max: int
    reserved_mean: int
    reserved_p99: int
    allocated_max: int

    def to_dict(self, prefix: str = "") -> dict[str, int]:
        """Keys ending in ``_bytes`` (the report diff treats those as memory), e.g. ``reserved_max_bytes``."""
        return {
            f"{prefix}reserved_max_bytes": self.reserved_max,
            f"{prefix}reserved_mean_bytes": self.reserved_mean,
            f"{prefix}reserved_p99_bytes": self.reserved_p99,
            f"{prefix}allocated_max_bytes": self.allocated_max,
        }


def summarize_memory(samples: Sequence[MemorySample]) -> MemoryStats:
    """Max, mean and 99th percentile of reserved bytes, and the highest allocated peak; ValueError when empty
    or when a sample is not a non-negative integer count of bytes."""
    samples = list(samples)
    if not samples:
        raise ValueError("memory: no samples")
    for sample in samples:
        for value in (sample.reserved, sample.allocated_peak):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"memory: byte counts must be non-negative integers, got {sample!r}")
    reserved = [s.reserved for s in samples]
    return MemoryStats(
        steps=len(samples),
        reserved_max=max(reserved),
        reserved_mean=round(sum(reserved) / len(reserved)),
        reserved_p99=round(percentile(reserved, 99)),
        allocated_max=max(s.allocated_peak for s in samples),
    )


def format_bytes(value: int | None, unavailable: str = "n/a") -> str:
    """``1.53 GiB`` / ``812.0 MiB``; ``unavailable`` for None (no counters on this device)."""
    if value is None:
        return unavailable
    if value >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    return f"{value / 2**20:.1f} MiB"


class MemorySampler:
    """Per-step memory of one device: ``before_step()`` resets the peak, ``after_step()`` samples.

    >>> sampler = MemorySampler("cuda:0")
    >>> sampler.before_step(); train_step(...); sampler.after_step()
    >>> sampler.summary()  # MemoryStats, or None on CPU
    """

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.samples: list[MemorySample] = []

    @property
    def available(self) -> bool:
        return self.device.type == "cuda"

    def before_step(self) -> None:
        if self.available:
            torch.cuda.reset_peak_memory_stats(self.device)

    def after_step(self) -> None:
        if self.available:
            self.samples.append(
                MemorySample(
                    reserved=int(torch.cuda.memory_reserved(self.device)),
                    allocated_peak=int(torch.cuda.max_memory_allocated(self.device)),
                )
            )

    def summary(self) -> MemoryStats | None:
        if not self.available or not self.samples:
            return None
        return summarize_memory(self.samples)


def release_memory(device: str | torch.device) -> None:
    """Between runs: return cached blocks to the driver and zero the peaks, so runs do not see each other."""
    gc.collect()
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


class ProcessPeak:
    """Peak resident memory of this process over a span, for CPU runs (torch keeps no CPU memory counters): Linux
    resets the high-water mark (VmHWM) when "5" is written to /proc/self/clear_refs. ``peak`` is None elsewhere.
    It counts everything the process holds (the model, the optimizer, activations, inductor's compile), not one
    device's tensors."""

    _STATUS, _CLEAR = "/proc/self/status", "/proc/self/clear_refs"

    def __init__(self) -> None:
        self.peak: int | None = None

    def __enter__(self) -> ProcessPeak:
        gc.collect()
        try:
            with open(self._CLEAR, "w") as clear:
                clear.write("5")
        except OSError:
            self._usable = False
        else:
            self._usable = True
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._usable:
            return
        with open(self._STATUS) as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    self.peak = int(line.split()[1]) * 1024
