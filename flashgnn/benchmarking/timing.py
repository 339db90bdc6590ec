"""Timing a callable on the GPU (CUDA events) or the CPU: the median of per-call times after
warm-up.

On CUDA every timed call is preceded by a read of four times the L2 size, so each call
starts with a cold cache (a read, not a write: evicting dirty lines would charge their write-back
to the timed call), as on a graph larger than L2 (rotating input buffers would leave
the format arrays and the output cached), and by a short GPU sleep; both keep the GPU busy
while the host prepares the call, so the events around the call measure GPU time, not the
host's launch overhead.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

# GPU sleep ahead of each timed call, in clock cycles. KERNEL_HEAD_START (about 1 ms at H100/H200
# clocks) outlasts the host's launch path of one op, so the events see GPU time only: with
# 0.2 ms, host stalls sometimes started the timed kernels late (medians of 100-300 us on graphs
# that take 15-40 us, H100 2026-11-23). The layer and training benchmarks keep 0.2 ms, which
# hides part of a layer's host time only; their figures since session 1 use it.
KERNEL_HEAD_START = 2_000_000
LAYER_HEAD_START = 400_000
_FALLBACK_L2_BYTES = 64 << 20


@dataclass
class Measurement:
    """ms: median time of one call; samples: every timed call (ms); extra_bytes: peak device
    memory allocated during the calls beyond what was allocated before them (the op's output
    and workspace), None on the CPU; result: what the last call returned."""

    ms: float
    samples: list[float]
    extra_bytes: int | None
    result: Any


class Timer:
    """``Timer(device, warmup, iters, head_start)(fn)`` -> Measurement of ``fn()``; head_start:
    GPU sleep cycles before each call. ``peak_bytes`` is the peak device memory allocated over
    the timer's life (None on the CPU)."""

    def __init__(self, device: torch.device, warmup: int = 5, iters: int = 30,
                 head_start: int = LAYER_HEAD_START):
        if warmup < 0 or iters < 1:
            raise ValueError(f"need warmup >= 0 and iters >= 1, got {warmup} and {iters}")
        self.device = torch.device(device)
        self.warmup, self.iters, self.head_start = warmup, iters, head_start
        self._scratch = None
        self._peak = 0
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            l2 = getattr(props, "L2_cache_size", 0) or _FALLBACK_L2_BYTES
            self._scratch = torch.zeros(4 * l2, dtype=torch.uint8, device=self.device)

    @property
    def peak_bytes(self) -> int | None:
        if self._scratch is None:
            return None
        return max(self._peak, torch.cuda.max_memory_allocated(self.device))

    def __call__(self, fn: Callable[[], Any], warmup: int | None = None,
                 iters: int | None = None) -> Measurement:
        """Time ``fn()``; ``warmup`` and ``iters`` override the timer's own for this call."""
        for _ in range(self.warmup if warmup is None else warmup):
            fn()
        iters = self.iters if iters is None else iters
        if self._scratch is None:
            return self._time_cpu(fn, iters)
        return self._time_cuda(fn, iters)

    def _time_cpu(self, fn, iters: int) -> Measurement:
        samples = []
        result = None
        for _ in range(iters):
            start = time.perf_counter()
            result = fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return Measurement(statistics.median(samples), samples, None, result)

    def _time_cuda(self, fn, iters: int) -> Measurement:
        torch.cuda.synchronize(self.device)
        self._peak = self.peak_bytes
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(iters)]
        result = None
        for start, end in events:
            torch.amax(self._scratch)
            torch.cuda._sleep(self.head_start)
            result = None  # free the previous output before the next call allocates its own
            start.record()
            result = fn()
            end.record()
        torch.cuda.synchronize(self.device)
        extra = torch.cuda.max_memory_allocated(self.device) - before
        self._peak = self.peak_bytes
        samples = [start.elapsed_time(end) for start, end in events]
        return Measurement(statistics.median(samples), samples, extra, result)

