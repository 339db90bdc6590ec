"""Steps replayed from a CUDA graph: once captured, all of a step's kernels start with one
graph launch, without the host's per-op cost (on graphs of up to about a million edges a
layer step spends several times its GPU time on the host).

A captured step must not synchronise with the host (no ``.item()``, no boolean-mask indexing,
no host-to-device copy) and must read its inputs from the same tensors on every call (update
them in place). Every flashgnn op is capturable once warmed up; torch's optimizers need
``capturable=True`` and loss scaling needs a fused optimizer (``training.loop.make_optimizer``).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

WARMUP_CALLS = 2  # eager calls before the capture (torch's recipe), which fill every lazy cache


class CudaGraphStep:
    """``CudaGraphStep(fn)()`` returns what ``fn()`` returns. The first ``warmup`` calls run
    ``fn`` eagerly on a side stream (real calls: a training step trains); the next one
    captures ``fn`` in a CUDA graph on that stream and replays it, and every later call
    replays it on the current stream. After the capture each call returns the same output
    tensors, overwritten by each replay. ``fn`` works on the current CUDA device."""

    def __init__(self, fn: Callable[[], Any], warmup: int = WARMUP_CALLS):
        if warmup < 1:
            raise ValueError(f"a CUDA graph capture needs at least one eager warm-up call, got warmup={warmup}")
        self.fn, self.warmup = fn, warmup
        self.calls = 0
        self.stream = torch.cuda.Stream()
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
        self.stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=self.stream):
                self.outputs = self.fn()
        except RuntimeError as e:
            raise RuntimeError(
                "capturing the step in a CUDA graph failed: something in it synchronises with the host "
                "(.item(), boolean-mask indexing, a host-to-device copy, an optimizer without "
                f"capturable=True); run it without the CUDA graph (flashgnn train: train.cuda_graph=false). "
                f"The error was: {e}") from e
        self.graph = graph
        return self

    def _eager(self):
        current = torch.cuda.current_stream()
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            out = self.fn()
        current.wait_stream(self.stream)
        self.calls += 1
        return out


def graphed(fn: Callable[[], Any]) -> CudaGraphStep:
    """``fn`` warmed up and captured: every call of the result replays it."""
    return CudaGraphStep(fn).capture()
