"""The statistics behind the GPU tier's figures: percentiles, step-time and memory summaries, shown right
on known inputs and refusing bad ones; the samplers' CPU behaviour (no counters: no figures)."""

from __future__ import annotations

import math

import pytest
import torch

from compile_audit.probe.memory import MemorySample, MemorySampler, format_bytes, summarize_memory
from compile_audit.probe.timing import StepTimer, percentile, summarize_times, synchronize

pytestmark = pytest.mark.selftest


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 0, 1),
        ([1, 2, 3, 4], 100, 4),
        ([4, 1, 3, 2], 25, 1.75),  # order of the samples does not matter
        (list(range(1, 101)), 99, 99.01),
        ([7], 99, 7),
    ],
)
def test_percentile_interpolates_like_numpy(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("values", "q", "message"),
    [
        ([], 50, "no samples"),
        ([1, 2], 101, "q must be"),
        ([1, 2], -1, "q must be"),
        ([1, 2], True, "q must be"),
        ([1, math.nan], 50, "finite"),
        ([1, math.inf], 50, "finite"),
        ([1, "2"], 50, "finite"),
    ],
)
def test_percentile_refuses_bad_input(values, q, message):
    with pytest.raises(ValueError, match=message):
        percentile(values, q)


def test_time_summary_median_and_spread():
    stats = summarize_times([0.010, 0.012, 0.011, 0.100])  # one slow outlier
    assert stats.rounds == 4
    assert stats.median == pytest.approx(0.0115)
    assert stats.min == pytest.approx(0.010) and stats.max == pytest.approx(0.100)
    assert stats.iqr == pytest.approx(0.034 - 0.01075)  # p75 34 ms, p25 10.75 ms
    figures = stats.to_dict("compiled_step")
    assert figures["compiled_step_ms"] == pytest.approx(11.5)  # the key the report diff reads
    assert figures["compiled_step_rounds"] == 4
    assert summarize_times([0.5]).stdev == 0.0


@pytest.mark.parametrize(
    ("samples", "message"), [([], "no samples"), ([0.1, -0.1], "negative"), ([math.nan], "finite")]
)
def test_time_summary_refuses_bad_input(samples, message):
    with pytest.raises(ValueError, match=message):
        summarize_times(samples)


def test_memory_summary_rows():
    samples = [MemorySample(reserved=r, allocated_peak=a) for r, a in [(100, 50), (300, 70), (200, 90), (400, 60)]]
    stats = summarize_memory(samples)
    assert (stats.steps, stats.reserved_max, stats.reserved_mean, stats.allocated_max) == (4, 400, 250, 90)
    assert stats.reserved_p99 == round(percentile([100, 200, 300, 400], 99)) == 397
    figures = stats.to_dict()
    assert set(figures) == {"reserved_max_bytes", "reserved_mean_bytes", "reserved_p99_bytes", "allocated_max_bytes"}
    assert all(key.endswith("_bytes") for key in stats.to_dict("eager_"))  # the diff's memory suffix


@pytest.mark.parametrize(
    "samples",
    [[], [MemorySample(-1, 0)], [MemorySample(1, 2.5)], [MemorySample(True, 0)]],
    ids=["empty", "negative", "float", "bool"],
)
def test_memory_summary_refuses_bad_input(samples):
    with pytest.raises(ValueError, match="memory"):
        summarize_memory(samples)


def test_format_bytes():
    assert format_bytes(3 * 2**30) == "3.00 GiB"
    assert format_bytes(512 * 2**20) == "512.0 MiB"
    assert format_bytes(None, "n/a (CPU)") == "n/a (CPU)"


def test_cpu_sampler_records_nothing_and_timer_times():
    sampler = MemorySampler("cpu")
    sampler.before_step()
    sampler.after_step()
    assert not sampler.available and sampler.samples == [] and sampler.summary() is None
    timer = StepTimer("cpu")
    assert timer.time(lambda x: x + 1, 1) == 2
    synchronize("cpu")
    assert len(timer.samples) == 1 and timer.samples[0] >= 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA sampler needs a GPU")
def test_cuda_sampler_sees_an_allocation():
    sampler = MemorySampler("cuda")
    sampler.before_step()
    x = torch.empty(64 * 2**20, dtype=torch.uint8, device=sampler.device)
    sampler.after_step()
    del x
    stats = sampler.summary()
    assert stats.allocated_max >= 64 * 2**20 and stats.reserved_max >= 64 * 2**20
