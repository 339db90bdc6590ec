"""CUDA-graph capture, the one mechanism behind steps replayed whole (``CudaGraphStep``) and
a layer's kernels replayed (``ops.replay``): once captured, all of a call's kernels start with
one graph launch, without the host's per-op cost (on graphs of up to about a million edges a
layer step spends several times its GPU time on the host).

``capture`` is the recipe: warm-up runs on a side stream, then the capture on that stream. A
captured call must not synchronise with the host (no ``.item()``, no boolean-mask indexing,
no host-to-device copy) and must read its inputs from the same tensors on every call (update
them in place). Every flashgnn op is capturable once warmed up; torch's optimizers need
``capturable=True`` and loss scaling needs a fused optimizer (``training.loop.make_optimizer``).

Nesting: while a thread captures or warms up a capture (``capturing``), a replay mechanism
called inside runs eagerly: the outer graph records its kernels, and graphs of its own would
only hold memory. A model whose layers replay their kernels is captured whole as it is.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

T = TypeVar("T")

WARMUP_CALLS = 2  # a step's eager calls before its capture (torch's recipe): they fill lazy caches

# (device, caller's stream) -> capture stream
_CAPTURE_STREAMS: dict[tuple[int, int], torch.cuda.Stream] = {}


class _Depth(threading.local):
    value = 0


_WARMING = _Depth()  # per thread: how many of this module's warm-ups or captures are running


def capturing() -> bool:
    """Whether this thread is inside a CUDA-graph capture or its warm-up: a stream capture on
    the current stream (this module's or the caller's own ``torch.cuda.graph``), or the eager
    runs of this module's captures (``CudaGraphStep``'s warm-up calls, ``capture``'s). A replay
    mechanism called there runs eagerly. Needs a CUDA build of torch."""
    return _WARMING.value > 0 or torch.cuda.is_current_stream_capturing()


def _capture_stream(caller: torch.cuda.Stream) -> torch.cuda.Stream:
    """The side stream that captures for ``caller``: one per (device, caller's stream).
    Launchers keep scratch per stream, so the graphs replayed on one stream share the scratch
    of one capture stream, and later warm-ups find it made."""
    key = (caller.device_index, caller.cuda_stream)
    stream = _CAPTURE_STREAMS.get(key)
    if stream is None:
        stream = _CAPTURE_STREAMS[key] = torch.cuda.Stream(caller.device)
    return stream


@contextmanager
def on_capture_stream(device: torch.device) -> Iterator[torch.cuda.Stream]:
    """Run the block on the capture stream of ``device``'s current stream (the caller's), with
    ``capturing()`` true: the capture stream first waits for the caller's stream; afterwards,
    even when the block fails, the caller's stream is current again and waits for it."""
    with torch.cuda.device(device):
        caller = torch.cuda.current_stream()
        stream = _capture_stream(caller)
        stream.wait_stream(caller)
        _WARMING.value += 1
        try:
            torch.cuda.set_stream(stream)
            yield stream
        finally:
            _WARMING.value -= 1
            torch.cuda.set_stream(caller)
            caller.wait_stream(stream)


@contextmanager
def rng_kept(device: torch.device | str) -> Iterator[None]:
    """Run the block, then set ``device``'s default generator back to its state before it:
    runs that stand outside a step's sequence of draws (a capture's warm-up, a replay that
    only fills buffers) leave the numbers an eager call would draw next to that call."""
    device = torch.device(device)
    get, set_ = (
        (torch.get_rng_state, torch.set_rng_state)
        if device.type == "cpu"
        else (
            lambda: torch.cuda.get_rng_state(device),
            lambda s: torch.cuda.set_rng_state(s, device),
        )
    )
    state = get()
    yield
    # set only where the block drew numbers: setting also resets cuDNN's RNN dropout state
    if not torch.equal(get(), state):
        set_(state)


class CaptureError(RuntimeError):
    """A capture failed; ``__cause__`` is torch's error."""


def capture(
    fn: Callable[[], T],
    device: torch.device,
    *,
    warmup: int = 1,
    what: str = "the step",
    remedy: str = "",
    capture_error_mode: str = "global",
) -> tuple[torch.cuda.CUDAGraph, T]:
    """(a CUDA graph of ``fn()``'s kernels on ``device``, what ``fn()`` returned: its tensors,
    in the graph's own memory pool, are what each replay writes). Replay the graph on the
    stream that was current here.

    ``fn`` first runs ``warmup`` times eagerly, on the capture stream (``on_capture_stream``),
    so that whatever this thread and stream make lazily (a cuBLAS handle, workspaces,
    launchers' per-stream scratch) exists before the capture, where making it would fail; a
    caller whose earlier eager calls ran on the capture stream passes 0. Random numbers: these
    runs leave the device's default generator as they found it, and the capture registers that
    generator (torch does), so each replay draws the numbers an eager call would draw next.
    ``capture_error_mode``: ``torch.cuda.graph``'s ("thread_local" lets other threads use the
    GPU meanwhile). A failed capture raises ``CaptureError`` naming ``what`` (and ``remedy``,
    what the user can do); a caller that runs eagerly instead says so with ``warn_eager``."""
    graph = torch.cuda.CUDAGraph()
    with on_capture_stream(device) as stream:
        if warmup > 0:
            with rng_kept(device):
                for _ in range(warmup):
                    fn()
        try:
            with torch.cuda.graph(graph, stream=stream, capture_error_mode=capture_error_mode):
                result = fn()
        except RuntimeError as e:
            raise CaptureError(
                f"capturing {what} in a CUDA graph failed: something in it synchronises with the "
                "host (.item(), boolean-mask indexing, a host-to-device copy, an optimizer without "
                f"capturable=True){'; ' + remedy if remedy else ''}. The error was: {e}"
            ) from e
    return graph, result


def warn_eager(what: str, error: BaseException) -> None:
    """Warn that capturing ``what`` failed with ``error`` and that it runs eagerly instead."""
    cause = error.__cause__ if isinstance(error, CaptureError) and error.__cause__ else error
    warnings.warn(f"flashgnn: capturing {what} in a CUDA graph failed, it runs eagerly: {cause}")


class CudaGraphStep:
    """``CudaGraphStep(fn)()`` returns what ``fn()`` returns. The first ``warmup`` calls run
    ``fn`` eagerly on the capture stream (real calls: a training step trains); the next one
    captures ``fn`` there (``capture``) and replays it, and every later call replays it on the
    current stream. After the capture each call returns the same output tensors, overwritten
    by each replay. ``fn`` works on the CUDA device current at construction; a failed capture
    raises ``CaptureError``."""

    def __init__(self, fn: Callable[[], Any], warmup: int = WARMUP_CALLS):
        if warmup < 1:
            raise ValueError(
                f"a CUDA graph capture needs at least one eager warm-up call, got warmup={warmup}"
            )
        self.fn, self.warmup = fn, warmup
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs = None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self):
        if self.graph is None and self.calls < self.warmup:
            return self._eager()
        if self.graph is None:
            self.capture()
        self.graph.replay()
        return self.outputs

    def capture(self) -> CudaGraphStep:
        """Run the remaining warm-up calls and capture ``fn`` (the capture runs nothing)."""
        while self.calls < self.warmup:
            self._eager()
        self.graph, self.outputs = capture(
            self.fn,
            self.device,
            warmup=0,
            what="the step",
            remedy="run it without the CUDA graph (flashgnn train: train.cuda_graph=false)",
        )
        return self

    def _eager(self):
        with on_capture_stream(self.device):
            out = self.fn()
        self.calls += 1
        return out


def graphed(fn: Callable[[], Any]) -> CudaGraphStep:
    """``fn`` warmed up and captured: every call of the result replays it."""
    return CudaGraphStep(fn).capture()
