"""The benchmarks' timers (``flashgnn.benchmarking.timing``): what each one calls and counts, on
the CPU; the CUDA timers against each other on the GPU."""

from __future__ import annotations

import time

import pytest
import torch

from flashgnn.benchmarking import timing
from tests.helpers import needs_gpu


def counting(seconds: float = 0.0):
    calls = []

    def fn():
        calls.append(None)
        if seconds:
            time.sleep(seconds)
        return len(calls)

    return fn, calls


def test_wall_timers_count_the_host_s_clock_per_call():
    fn, calls = counting(0.002)
    ms = timing.wall_per_call(fn, 5, "cpu")
    assert len(calls) == 5 and 2.0 <= ms < 50.0
    assert 2.0 <= timing.wall_median_ms(fn, 3, "cpu") < 50.0 and len(calls) == 8
    result, seconds = timing.timed_call(fn)
    assert result == 9 and 0.002 <= seconds < 0.05


def test_host_time_is_the_median_loop_per_call_in_microseconds():
    fn, calls = counting(0.001)
    us = timing.host_us_per_call(fn, "cpu", calls=3, loops=2)
    assert len(calls) == 6 and 1000.0 <= us < 50_000.0


def test_the_cold_timer_on_the_cpu_times_single_calls():
    fn, calls = counting()
    m = timing.Timer("cpu", warmup=2, iters=3)(fn)
    assert len(calls) == 5 and len(m.samples) == 3 and m.result == 5 and m.extra_bytes is None
    assert m.ms == sorted(m.samples)[1]


def test_the_profiler_timer_is_for_cuda_only():
    with pytest.raises(ValueError, match="CUDA"):
        timing.ProfilerTimer("cpu")


def test_free_device_memory_runs_on_the_cpu():
    timing.free_device_memory(torch.device("cpu"))


@pytest.mark.parametrize("timer", ["cold", "back-to-back", "profiler", "events"])
@needs_gpu
def test_cuda_timers_agree_on_a_large_copy(timer):
    """A 256 MiB device-to-device copy: memory-bound, long enough that every timer's overhead
    is small, and no cache holds it: each timer's figure is within 2x of the cold timer's."""
    src = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def copy():
        return dst.copy_(src)

    cold = timing.Timer("cuda", warmup=2, iters=10, head_start=timing.KERNEL_HEAD_START)(copy).ms
    ms = {
        "cold": lambda: cold,
        "back-to-back": lambda: timing.BackToBackTimer("cuda", warmup=2, iters=10)(copy).ms,
        "profiler": lambda: timing.ProfilerTimer("cuda", warmup=2, iters=5)(copy).ms,
        "events": lambda: timing.event_median_ms(copy, 2, 10),
    }[timer]()
    assert cold / 2 < ms < cold * 2


@needs_gpu
def test_the_profiler_timer_sums_every_kernel_of_a_call():
    x = torch.randn(4096, 4096, device="cuda")
    one = timing.ProfilerTimer("cuda", warmup=1, iters=3)(lambda: x.mul(2)).ms
    three = timing.ProfilerTimer("cuda", warmup=1, iters=3)(lambda: (x.mul(2), x.mul(3), x.mul(4)))
    three = three.ms
    nothing = timing.ProfilerTimer("cuda", warmup=0, iters=2)(lambda: None).ms
    assert one > 0 and 2 < three / one < 4 and nothing == 0
