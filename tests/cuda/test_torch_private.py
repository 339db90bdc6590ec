"""The private torch APIs flashgnn relies on (``flashgnn._torch_private``), checked against the
installed torch: a torch that drops or changes one fails here, saying what breaks."""

from __future__ import annotations

import inspect

import pytest
import torch

from flashgnn._torch_private import gpu_sleep, storage_use_counter
from tests.helpers import needs_gpu


def test_storage_use_counts_see_every_tensor_on_the_storage():
    assert callable(getattr(torch._C, "_storage_Use_Count", None)), (
        f"torch {torch.__version__} has no torch._C._storage_Use_Count: ops.replay cannot tell "
        "whether a replayed layer's buffers are held elsewhere"
    )
    t = torch.randn(4)
    count = storage_use_counter(t.untyped_storage())
    alone = count()
    alias, view = t.detach(), t[1:]
    assert count() == alone + 2, (
        "torch._C._storage_Use_Count no longer counts the tensors sharing a storage (a detach() "
        "alias and a view): ops.replay would overwrite buffers its callers hold"
    )
    del alias, view
    assert count() == alone, "torch._C._storage_Use_Count no longer drops a freed tensor"
    other = torch.randn(4)
    assert storage_use_counter(other.untyped_storage())() == alone, "a fresh tensor's count differs"


def test_storage_use_counts_see_what_autograd_keeps():
    """A tensor autograd saves for the backward, or keeps as ``.grad``, holds the storage."""
    w = torch.nn.Parameter(torch.randn(3))
    g = torch.randn(3)
    count = storage_use_counter(g.untyped_storage())
    alone = count()

    class KeepsGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(g.detach())
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return g.detach()

    y = KeepsGradient.apply(w)
    assert count() > alone, "a tensor saved for the backward is not counted"
    y.sum().backward()
    assert w.grad.untyped_storage().data_ptr() == g.untyped_storage().data_ptr()
    assert count() == alone + 1, "the gradient AccumulateGrad keeps as .grad is not counted"
    w.grad = None
    assert count() == alone


def test_gpu_sleep_is_torch_s_sleep_kernel():
    sleep = getattr(torch.cuda, "_sleep", None)
    assert callable(sleep), f"torch {torch.__version__} lacks torch.cuda._sleep (the timers use it)"
    assert list(inspect.signature(sleep).parameters) == ["cycles"], (
        f"torch.cuda._sleep takes {inspect.signature(sleep)} now, not (cycles)"
    )


@needs_gpu
def test_gpu_sleep_keeps_the_gpu_busy():
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    gpu_sleep(2_000_000)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0.1  # about 1 ms at 2 GHz


def test_a_missing_use_count_fails_with_the_reason(monkeypatch):
    monkeypatch.delattr(torch._C, "_storage_Use_Count")
    with pytest.raises(RuntimeError, match="_storage_Use_Count"):
        storage_use_counter(torch.randn(2).untyped_storage())


def test_dispatch_mode_query_sees_a_tracing_mode():
    """``dispatch_mode_active`` is what decides whether ops enter through the dispatcher."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from flashgnn._torch_private import dispatch_mode_active

    assert dispatch_mode_active() is False
    with TorchDispatchMode():
        assert dispatch_mode_active() is True, (
            "torch.utils._python_dispatch._get_current_dispatch_mode no longer reports an "
            "active dispatch mode: traced ops would skip the dispatcher"
        )


@needs_gpu
def test_current_raw_stream_is_the_current_streams_handle():
    from flashgnn._torch_private import current_raw_stream

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        assert current_raw_stream(torch.cuda.current_device()) == stream.cuda_stream, (
            "torch._C._cuda_getCurrentRawStream no longer returns the current stream's handle: "
            "kernels would launch on the wrong stream"
        )
