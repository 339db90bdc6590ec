"""Launcher of kernels/column_sums.cu: a matrix's column sums and its 16-bit copy in one pass
(the bias gradient and the 16-bit operand of graph convolution's backward)."""

from __future__ import annotations

import torch

from .runtime import current_stream, launch, operand, ptr
from .sources import register
from .spmm import TAG

SOURCE = register(
    "column_sums.cu",
    [f"fg::colsum::cast_and_sum_columns<{TAG[t]}>" for t in (torch.float16, torch.bfloat16)],
)
_THREADS = 256  # kernels/column_sums.cu: THREADS
# 8 blocks of 256 threads per SM on 128 SMs; the last block adds this many partials a column
MAX_BLOCKS = 1024
ROWS_PER_THREAD = 8  # at least, before the block count grows
_FINISHED: dict[tuple[int, int], torch.Tensor] = {}  # (device, stream) -> the kernel's zero counter


def cast_and_sum_columns_cuda(
    x: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x in ``dtype``, x's column sums in fp32): x float32 [n, f] on a CUDA device, dtype
    float16 or bfloat16; ``out``: a contiguous [n, f] tensor of ``dtype`` to write the copy
    into. The sums are the same bits on every call."""
    if (
        x.dtype != torch.float32
        or x.dim() != 2
        or not x.is_cuda
        or dtype not in (torch.float16, torch.bfloat16)
    ):
        raise ValueError(
            f"need a 2-D float32 CUDA tensor and a 16-bit dtype, got {x.dtype} {tuple(x.shape)} on "
            f"{x.device} and {dtype}"
        )
    x = operand(x, torch.float32)
    n, f = x.shape
    if out is None:
        out = torch.empty(n, f, dtype=dtype, device=x.device)
    elif (
        out.dtype != dtype
        or out.shape != x.shape
        or not out.is_contiguous()
        or out.device != x.device
    ):
        raise ValueError(
            f"out must be a contiguous {dtype} tensor of shape {tuple(x.shape)} on {x.device}, got "
            f"{out.dtype} {tuple(out.shape)} on {out.device}"
        )
    if n == 0 or f == 0:
        return out, torch.zeros(f, dtype=torch.float32, device=x.device)
    columns = min(max(32, 1 << (f - 1).bit_length()), _THREADS)
    rows = _THREADS // columns
    blocks = min(-(-n // (rows * ROWS_PER_THREAD)), MAX_BLOCKS)
    rows_per_block = -(-n // blocks)
    sums = torch.empty(f, dtype=torch.float32, device=x.device)
    partial = torch.empty(blocks * f, dtype=torch.float32, device=x.device)
    stream = current_stream(x.device)
    finished = _FINISHED.get((x.device.index, stream))  # a CUDA tensor's device has its index
    if finished is None:
        finished = _FINISHED[x.device.index, stream] = torch.zeros(
            1, dtype=torch.int32, device=x.device
        )
    launch(
        SOURCE,
        f"fg::colsum::cast_and_sum_columns<{TAG[dtype]}>",
        x.device,
        (blocks,),
        (_THREADS,),
        ptr(x),
        n,
        f,
        columns,
        rows_per_block,
        ptr(out),
        ptr(partial),
        ptr(finished),
        ptr(sums),
        stream=stream,
    )
    return out, sums
