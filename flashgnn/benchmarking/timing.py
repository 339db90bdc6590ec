"""Every timer of the benchmarks, each stating what it counts.

GPU time, host cost hidden:
- ``Timer`` (cold): CUDA events around single calls, each on a cold L2 and behind a GPU sleep.
- ``BackToBackTimer``: one CUDA graph of many calls in a row, replayed; time per call.
- ``ProfilerTimer``: the summed device time of the kernels a call launches (torch.profiler).
Host and GPU together, by the host's clock:
- ``wall_per_call``: calls back to back (a loop's time per step); ``wall_median_ms``: single
  calls, synchronised around each; ``timed_call``: one call, such as a format build.
Others: ``event_median_ms``, CUDA events around single calls on warm caches, each started on
an idle GPU; ``host_us_per_call``, the host's time alone; ``HostMarks``, the host's time between
named points inside a call.

``Timer``: on CUDA every timed call is preceded by a read of four times the L2 size, so each
call starts with a cold cache (a read, not a write: evicting dirty lines would charge their
write-back to the timed call), as on a graph larger than L2 (rotating input buffers would leave
the format arrays and the output cached), and by a short GPU sleep; both keep the GPU busy
while the host prepares the call, so the events around the call measure GPU time, not the
host's launch overhead. Its floor is the events' own: a microsecond kernel's time is mostly
that of an empty kernel under it.

``BackToBackTimer``: the median over replays of one CUDA graph holding many calls in a row,
divided by the calls; the operands stay in L2 from call to call where they fit. This is how
the public reference implementation of FlashSparse timed its kernels (a loop of launches
between two events, divided by the launches), here without the host's launch cost: it
measures what a call costs inside a longer run of GPU work, as in a training step.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .._torch_private import gpu_sleep
from ..cuda_graphs import CudaGraphStep

# GPU sleep ahead of each timed call, in clock cycles. KERNEL_HEAD_START (about 1 ms at 2 GHz)
# outlasts the host's launch path of one op, so the events see GPU time only. The layer and
# training benchmarks keep LAYER_HEAD_START (about 0.2 ms), which hides part of a layer step's
# host time only, so that their figures stay comparable over time (docs/TUNING.md).
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


def _warm_up(timer, fn: Callable[[], Any], warmup: int | None, iters: int | None) -> int:
    """The start of a timer's call: ``fn()`` called ``warmup`` times untimed (the timer's own
    count when None); returns the number of timed calls, ``iters`` or the timer's own."""
    for _ in range(timer.warmup if warmup is None else warmup):
        fn()
    return timer.iters if iters is None else iters


class Timer:
    """``Timer(device, warmup, iters, head_start)(fn)`` -> Measurement of ``fn()``, cold: after
    ``warmup`` untimed calls, each sample is the CUDA-event time of one call, from an event
    recorded right before it to one right after it, ms the median. Included: the call's GPU
    work and any GPU idle time inside it. Excluded: the L2 flush and the GPU sleep of
    ``head_start`` cycles queued before the start event, and so the host's launch cost as far
    as the sleep outlasts it. Each call's output is freed before the next call. On the CPU a
    sample is one call by the host's clock. ``peak_bytes`` is the peak device memory allocated
    over the timer's life (None on the CPU)."""

    def __init__(
        self,
        device: torch.device,
        warmup: int = 5,
        iters: int = 30,
        head_start: int = LAYER_HEAD_START,
    ):
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

    def __call__(
        self, fn: Callable[[], Any], warmup: int | None = None, iters: int | None = None
    ) -> Measurement:
        """Time ``fn()``; ``warmup`` and ``iters`` override the timer's own for this call."""
        iters = _warm_up(self, fn, warmup, iters)
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
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(iters)
        ]
        result = None
        for start, end in events:
            torch.amax(self._scratch)
            gpu_sleep(self.head_start)
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
    ms their median (``extra_bytes`` is not measured: None). Included: the calls' GPU work and
    the GPU's gaps between kernels inside the graph. Excluded: the host's launch cost (one graph
    launch per sample) and cold caches (operands stay in L2 from call to call where they fit).
    ``fn`` must be capturable (no host synchronisation); a capture failure is raised. On the CPU
    a sample is a loop of ``calls`` calls timed by the host clock."""

    def __init__(
        self,
        device: torch.device,
        warmup: int = 5,
        iters: int = 30,
        sample_ms: float = 2.0,
        max_calls: int = 100,
    ):
        if warmup < 0 or iters < 1 or max_calls < 1 or not sample_ms > 0:
            raise ValueError(
                f"need warmup >= 0, iters >= 1, max_calls >= 1 and sample_ms > 0, got "
                f"{warmup}, {iters}, {max_calls} and {sample_ms}"
            )
        self.device = torch.device(device)
        self.warmup, self.iters, self.sample_ms, self.max_calls = (
            warmup,
            iters,
            sample_ms,
            max_calls,
        )

    @property
    def peak_bytes(self) -> int | None:
        return torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None

    def __call__(
        self, fn: Callable[[], Any], warmup: int | None = None, iters: int | None = None
    ) -> Measurement:
        iters = _warm_up(self, fn, warmup, iters)
        sample = self._samples_cuda if self.device.type == "cuda" else self._samples_cpu
        probe, _ = sample(fn, 1, 3)
        calls = max(
            1, min(self.max_calls, math.ceil(self.sample_ms / max(statistics.median(probe), 1e-6)))
        )
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
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(iters)
        ]
        step()  # the first replay uploads the graph
        for start, end in events:
            start.record()
            result = step()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / calls for start, end in events], result


class ProfilerTimer:
    """``ProfilerTimer(device, warmup, iters)(fn)`` -> Measurement of ``fn()`` by the profiler:
    after ``warmup`` untimed calls, each sample is the device time of the GPU activities one
    call launched (kernels, memory copies and sets), summed, as torch.profiler records them
    (CUPTI), ms the median. Excluded: the host's time, the GPU's idle gaps between kernels and
    the profiler's own cost; kernels that overlap (several streams) count in full. Caches are as
    the previous call left them. CUDA only."""

    def __init__(self, device: torch.device, warmup: int = 5, iters: int = 30):
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"the profiler timer measures CUDA kernels, got device {self.device}")
        if warmup < 0 or iters < 1:
            raise ValueError(f"need warmup >= 0 and iters >= 1, got {warmup} and {iters}")
        self.warmup, self.iters = warmup, iters

    @property
    def peak_bytes(self) -> int | None:
        return torch.cuda.max_memory_allocated(self.device)

    def __call__(
        self, fn: Callable[[], Any], warmup: int | None = None, iters: int | None = None
    ) -> Measurement:
        from torch.profiler import ProfilerActivity, profile

        samples, result = [], None
        for _ in range(_warm_up(self, fn, warmup, iters)):
            torch.cuda.synchronize(self.device)
            result = None
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                result = fn()
                torch.cuda.synchronize(self.device)
            samples.append(device_time_ms(prof.events()))
        return Measurement(statistics.median(samples), samples, None, result)


def device_time_ms(events) -> float:
    """The summed duration of the GPU activities among profiler ``events`` (FunctionEvents),
    in ms; user annotations, which span other activities, are left out."""
    from torch.autograd import DeviceType

    gpu = [
        e
        for e in events
        if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
    ]
    return sum(e.time_range.elapsed_us() for e in gpu) / 1e3


TIMERS = ("cold", "back-to-back")


def kernel_timer(
    kind: str, device: torch.device, warmup: int, iters: int
) -> Timer | BackToBackTimer:
    """The kernel benchmarks' timer named ``kind`` (one of TIMERS): "cold", a Timer with the
    kernel head start, or "back-to-back"."""
    if kind == "cold":
        return Timer(device, warmup, iters, KERNEL_HEAD_START)
    if kind == "back-to-back":
        return BackToBackTimer(device, warmup, iters)
    raise ValueError(f"timer must be one of {', '.join(TIMERS)}, got {kind!r}")


def _synchronizer(device: torch.device | str | None) -> Callable[[], None]:
    device = None if device is None else torch.device(device)
    if device is None or device.type != "cuda":
        return lambda: None
    return lambda: torch.cuda.synchronize(device)


def wall_per_call(fn: Callable[[], Any], calls: int, device: torch.device | str) -> float:
    """ms per call of ``calls`` calls of ``fn`` back to back by the host's clock, the GPU of
    ``device`` synchronised before the first and after the last. Included: everything a loop
    of steps costs, the host's launch path and the GPU's work, whichever bounds the loop, and
    one synchronisation. Caches are as the previous call left them."""
    sync = _synchronizer(device)
    sync()
    tic = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - tic) / calls * 1e3


def wall_median_ms(fn: Callable[[], Any], reps: int, device: torch.device | str = "cuda") -> float:
    """The median over ``reps`` single calls of ``fn`` of ``wall_per_call(fn, 1, device)``: the
    host's launch path and the GPU's work of one call added up (nothing overlaps them), and one
    synchronisation. For host-bound steps, where the host's time is the cost."""
    return statistics.median(wall_per_call(fn, 1, device) for _ in range(reps))


def timed_call(
    fn: Callable[[], Any], device: torch.device | str | None = None
) -> tuple[Any, float]:
    """(``fn()``, the seconds it took by the host's clock, the GPU of ``device`` synchronised
    after it when ``device`` is CUDA, not before): a one-off cost such as building a format or
    generating a graph, queued GPU work included."""
    sync = _synchronizer(device)
    tic = time.perf_counter()
    result = fn()
    sync()
    return result, time.perf_counter() - tic


def event_median_ms(fn: Callable[[], Any], warmup: int, repeats: int) -> float:
    """The median over ``repeats`` calls of ``fn`` (after ``warmup`` untimed ones) of the
    CUDA-event time of one call, the host waiting for each call's end event before the next.
    Each call starts on an idle GPU, so the time includes whatever the GPU waits for the host
    inside the call (its first launch at least) besides the call's GPU work; caches are warm
    from the previous call. Current CUDA device and stream."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_us_per_call(
    fn: Callable[[], Any],
    device: torch.device | str,
    calls: int = 200,
    loops: int = 7,
    head_start: int = KERNEL_HEAD_START,
) -> float:
    """The host's time alone of one call of ``fn``, in microseconds: the median over ``loops``
    loops of ``calls`` calls by the host's clock, per call. On CUDA a GPU sleep of
    ``head_start`` cycles is queued ahead of each loop and the GPU synchronised after it, so
    the host never waits for the GPU inside the loop: GPU time is excluded as long as the
    sleep outlasts the loop's launches."""
    cuda = torch.device(device).type == "cuda"
    per_loop = []
    for _ in range(loops):
        if cuda:
            gpu_sleep(head_start)
        tic = time.perf_counter()
        for _ in range(calls):
            fn()
        per_loop.append((time.perf_counter() - tic) / calls * 1e6)
        if cuda:
            torch.cuda.synchronize()
    return statistics.median(per_loop)


class HostMarks:
    """Timestamps by the host's clock at named points of the code, for where the host's time
    goes inside a step: ``mark(name)`` records one; ``span_us(a, b)`` is the median, over the
    marks of ``a`` and ``b`` paired in order, of the time from one to the other in microseconds.
    Nothing waits for the GPU: keep it busy (a GPU sleep ahead) so that only the host is timed."""

    def __init__(self):
        self.times: dict[str, list[float]] = {}

    def mark(self, name: str) -> None:
        self.times.setdefault(name, []).append(time.perf_counter())

    def clear(self) -> None:
        self.times.clear()

    def span_us(self, a: str, b: str) -> float:
        return statistics.median((t1 - t0) * 1e6 for t0, t1 in zip(self.times[a], self.times[b]))


def free_device_memory(device: torch.device) -> None:
    """Collect garbage and, on CUDA, return the allocator's cached blocks: between
    measurements, so that one's leftovers neither fill the next one's memory nor its peak."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
