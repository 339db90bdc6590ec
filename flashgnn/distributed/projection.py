"""X W for a GCN layer that narrows its input, X on the rank's device or in host memory.

Features that do not fit beside the rest of a step (IGB-large: 51 GB of fp16 features per rank
at 4 ranks, on 80 GB GPUs) stay in host memory, registered with CUDA (page-locked), and the
first layer streams them: blocks of rows go to the GPU on a copy stream, two buffers in turn,
each multiplied by W as the next one arrives; the backward streams them again for
dW = X^T dY. Nothing of X stays on the GPU between the two. Features on the device are
multiplied whole. dW is written in fp32 from the 16-bit operands (graph_conv's ``_product``).
"""

from __future__ import annotations

import weakref

import numpy as np
import torch
from torch import Tensor

from ..ops.graph_conv import _product

# bytes of X in one block copied from host memory
HOST_BLOCK_BYTES = 1 << 28
_REGISTERED: dict[int, int] = {}  # first byte -> length of each host_buffer's memory


def host_buffer(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """An empty CPU tensor of ``shape`` and ``dtype`` whose memory is registered with CUDA for
    asynchronous copies to ``device`` (plain memory when ``device`` is not CUDA). The exact
    size is registered (torch's pinned allocator would round it up to a power of two: 64 GB
    for IGB-large's 51), and unregistered when the memory is freed."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    array = np.empty(int(np.prod(shape)) * itemsize, dtype=np.uint8)
    tensor = torch.from_numpy(array).view(dtype).view(shape)
    if device.type == "cuda" and array.nbytes:
        cudart = torch.cuda.cudart()
        pointer = array.ctypes.data
        status = int(cudart.cudaHostRegister(pointer, array.nbytes, 0))
        if status != 0:
            raise RuntimeError(
                f"could not register {array.nbytes / 2**30:.1f} GiB of host memory with CUDA "
                f"(cudaError {status})"
            )
        _REGISTERED[pointer] = array.nbytes
        # the array owns the memory; it is unregistered before the array frees it
        weakref.finalize(array, _unregister, cudart, pointer)
    return tensor


def _unregister(cudart, pointer: int) -> None:
    _REGISTERED.pop(pointer, None)
    cudart.cudaHostUnregister(pointer)


def in_host_buffer(x: Tensor) -> bool:
    """Whether CPU tensor ``x`` lies in the memory of a live ``host_buffer`` (registered)."""
    if x.device.type != "cpu":
        return False
    first = x.data_ptr()
    end = first + x.numel() * x.element_size()
    return any(p <= first and end <= p + n for p, n in _REGISTERED.items())


def to_host_buffer(x: Tensor, device: torch.device, dtype: torch.dtype | None = None) -> Tensor:
    """``x`` (on the CPU, e.g. a memory map) copied block by block into a ``host_buffer`` in
    ``dtype`` (None: x's); no full-size temporary."""
    out = host_buffer(tuple(x.shape), dtype or x.dtype, device)
    for first, end in host_blocks(x):
        out[first:end] = x[first:end]
    return out


def host_blocks(x: Tensor) -> list[tuple[int, int]]:
    """(first, end) of the blocks of rows of ``x`` copied at once: HOST_BLOCK_BYTES each."""
    row_bytes = max(1, x[0].numel() * x.element_size()) if x.shape[0] else 1
    step = max(1, HOST_BLOCK_BYTES // row_bytes)
    return [(r, min(r + step, x.shape[0])) for r in range(0, x.shape[0], step)]


def streamed(x: Tensor, device: torch.device, dtype: torch.dtype, host: bool):
    """Yield (first, end, x[first:end] on ``device`` in ``dtype``): x whole unless ``host``;
    else its blocks, on CUDA copied on a side stream into two buffers used in turn (a buffer
    is refilled once the work the consumer queued on it has run)."""
    if not host:
        yield 0, x.shape[0], x.to(device=device, dtype=dtype)
        return
    blocks = host_blocks(x)
    if device.type != "cuda":
        for first, end in blocks:
            yield first, end, x[first:end].to(device=device, dtype=dtype)
        return
    rows = blocks[0][1] if blocks else 0
    buffers = [torch.empty((rows, *x.shape[1:]), dtype=x.dtype, device=device) for _ in range(2)]
    copies = torch.cuda.Stream(device)
    compute = torch.cuda.current_stream(device)
    # the buffers' memory may still be in use by work queued on the compute stream (the
    # allocator hands it out in that stream's order): the copies start after that work
    copies.wait_stream(compute)
    ready = [torch.cuda.Event() for _ in range(2)]
    free = [torch.cuda.Event() for _ in range(2)]

    def copy(i: int) -> None:
        first, end = blocks[i]
        with torch.cuda.stream(copies):
            copies.wait_event(free[i % 2])
            buffers[i % 2][: end - first].copy_(x[first:end], non_blocking=True)
            ready[i % 2].record(copies)

    copy(0)
    for i, (first, end) in enumerate(blocks):
        if i + 1 < len(blocks):
            copy(i + 1)
        compute.wait_event(ready[i % 2])
        yield first, end, buffers[i % 2][: end - first].to(dtype)
        free[i % 2].record(compute)


def project(
    x: Tensor, weight: Tensor, device: torch.device, dense: torch.dtype, host: bool = False
) -> Tensor:
    """x W, [N, F_out] in ``dense`` on ``device``. x [N, F_in]: on ``device``, or with ``host``
    in host memory, streamed by blocks (a ``host_buffer`` copies asynchronously); weight
    [F_in, F_out] on ``device``. Differentiable in weight, and in x when it is on ``device``."""
    if host and x.requires_grad:
        raise ValueError("features streamed from host memory take no gradient")
    return _Project.apply(x, weight, device, dense, host)


class _Project(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, device, dense, host):
        w = weight.to(dense)
        if not host:
            out = torch.mm(x.to(dense), w)
        else:
            out = torch.empty((x.shape[0], w.shape[1]), dtype=dense, device=device)
            for first, end, block in streamed(x, device, dense, True):
                out[first:end] = torch.mm(block, w)
        need_x, need_weight = ctx.needs_input_grad[:2]
        ctx.save_for_backward(x if need_weight else None, w if need_x else None)
        ctx.device, ctx.dense, ctx.host = device, dense, host
        ctx.types = (x.dtype, weight.dtype)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        need_x, need_weight = ctx.needs_input_grad[:2]
        x_dtype, weight_dtype = ctx.types
        d_x = d_weight = None
        if need_weight:
            for first, end, block in streamed(x, ctx.device, ctx.dense, ctx.host):
                part = _product(block.t(), grad[first:end], weight_dtype)
                d_weight = part if d_weight is None else d_weight.add_(part)
        if need_x:
            d_x = torch.mm(grad, w.t()).to(x_dtype)
        return d_x, d_weight, None, None, None
