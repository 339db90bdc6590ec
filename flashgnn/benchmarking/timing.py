"""Timing a callable on the GPU (CUDA events) or the CPU after warm-up, two ways.

``Timer``: the median of single calls, each on a cold L2. On CUDA every timed call is preceded
by a read of four times the L2 size, so each call starts with a cold cache (a read, not a
write: evicting dirty lines would charge their write-back to the timed call), as on a graph
larger than L2 (rotating input buffers would leave the format arrays and the output cached),
and by a short GPU sleep; both keep the GPU busy while the host prepares the call, so the
events around the call measure GPU time, not the host's launch overhead. Its floor is the
events' own: an empty kernel takes about 4 us under it (H100), so a microsecond kernel's time
is mostly that floor.

``BackToBackTimer``: the median over replays of one CUDA graph holding many calls in a row,
divided by the calls; the operands stay in L2 from call to call where they fit. This is how
the public reference implementation of FlashSparse timed its kernels (a loop of launches
between two events, divided by the launches), here without the host's launch cost: it
measures what a call costs inside a longer run of GPU work, as in a training step.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..cuda_graphs import CudaGraphStep

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
    calls: int = 1  # calls per sample (BackToBackTimer)


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



class BackToBackTimer:
    """``BackToBackTimer(device, warmup, iters)(fn)`` -> Measurement of ``fn()`` called many
    times in a row: ``calls`` calls (enough for a sample of about ``sample_ms``, at most
    ``max_calls``) captured in one CUDA graph, each sample the events' time of one replay / calls,
    ms their median (``extra_bytes`` is not measured: None). ``fn`` must be capturable (no host
    synchronisation); a capture failure is raised. On the CPU a sample is a loop of ``calls``
    calls timed by the host clock."""

    def __init__(self, device: torch.device, warmup: int = 5, iters: int = 30, sample_ms: float = 2.0,
                 max_calls: int = 100):
        if warmup < 0 or iters < 1 or max_calls < 1 or not sample_ms > 0:
            raise ValueError(f"need warmup >= 0, iters >= 1, max_calls >= 1 and sample_ms > 0, got "
                             f"{warmup}, {iters}, {max_calls} and {sample_ms}")
        self.device = torch.device(device)
        self.warmup, self.iters, self.sample_ms, self.max_calls = warmup, iters, sample_ms, max_calls

    @property
    def peak_bytes(self) -> int | None:
        return torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None

    def __call__(self, fn: Callable[[], Any], warmup: int | None = None,
                 iters: int | None = None) -> Measurement:
        for _ in range(self.warmup if warmup is None else warmup):
            fn()
        iters = self.iters if iters is None else iters
        sample = self._samples_cuda if self.device.type == "cuda" else self._samples_cpu
        probe, _ = sample(fn, 1, 3)
        calls = max(1, min(self.max_calls, math.ceil(self.sample_ms / max(statistics.median(probe), 1e-6))))
        samples, result = sample(fn, calls, iters)
        return Measurement(statistics.median(samples), samples, None, result, calls)

    @staticmethod
    def _samples_cpu(fn, calls: int, iters: int) -> tuple[list[float], Any]:
        samples, result = [], None
        for _ in range(iters):
            start = time.perf_counter()
            for _ in range(calls):
                result = fn()
            samples.append((time.perf_counter() - start) * 1e3 / calls)
        return samples, result

    @staticmethod
    def _samples_cuda(fn, calls: int, iters: int) -> tuple[list[float], Any]:
        def repeated():
            out = None
            for _ in range(calls):
                out = None  # the previous call's output is freed to the graph's pool for the next
                out = fn()
            return out

        step = CudaGraphStep(repeated, warmup=1).capture()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(iters)]
        step()  # the first replay uploads the graph
        for start, end in events:
            start.record()
            result = step()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / calls for start, end in events], result


TIMERS = ("cold", "back-to-back")


def kernel_timer(kind: str, device: torch.device, warmup: int, iters: int) -> Timer | BackToBackTimer:
    """The kernel benchmarks' timer named ``kind`` (one of TIMERS): "cold", a Timer with the
    kernel head start, or "back-to-back"."""
    if kind == "cold":
        return Timer(device, warmup, iters, KERNEL_HEAD_START)
    if kind == "back-to-back":
        return BackToBackTimer(device, warmup, iters)
    raise ValueError(f"timer must be one of {', '.join(TIMERS)}, got {kind!r}")
