"""Launcher of TCA-SpMM (kernels/tca.cu): CSR on m16n8k8 tensor-core MMAs by the trace
construction, fp16, bf16 and tf32 operands, fp32 accumulators.

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

import torch

from .runtime import launch, operand, ptr
from .sources import register
from .spmm import STORAGE, TAG

PRECISION_ID = {"fp16": 0, "bf16": 1, "tf32": 2}  # fg::Precision (mma.cuh)
WARPS = 8  # per block: the paper's 256 threads


def _kernel(precision: str, out_dtype: torch.dtype) -> str:
    return f"fg::tca::tca_spmm<{PRECISION_ID[precision]}, {TAG[out_dtype]}>"


SOURCE = register("tca.cu", [_kernel(p, d) for p in PRECISION_ID for d in TAG])


def tca_spmm_cuda(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    values: torch.Tensor,
    warp_row: torch.Tensor,
    warp_rank: torch.Tensor,
    row_warps: torch.Tensor,
    x: torch.Tensor,
    precision: str,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """Y = A @ X for A in CSR with TCA-SpMM's warp schedule (flashgnn.formats.TCACSR's arrays).

    indptr int64 [n_rows + 1], indices int32 [nnz], values [nnz] (read as float32), warp_row,
    warp_rank, row_warps int32 [n_warps]; x [n_cols, N] of any float dtype but float64, rounded
    to ``precision`` ("fp16", "bf16" or "tf32"). Returns [n_rows, N] in ``out_dtype`` (float16,
    bfloat16 or float32); rows without nonzeros are 0.
    """
    if precision not in PRECISION_ID:
        raise ValueError(f"tca_spmm_cuda: precision must be fp16, bf16 or tf32, got {precision!r}")
    if out_dtype not in TAG:
        raise ValueError(f"out_dtype must be float16, bfloat16 or float32, got {out_dtype}")
    if indptr.dtype != torch.int64 or indices.dtype != torch.int32:
        raise ValueError(
            f"indptr and indices must be int64 and int32, got {indptr.dtype} and {indices.dtype}"
        )
    schedule = (warp_row, warp_rank, row_warps)
    if any(t.dtype != torch.int32 for t in schedule):
        raise ValueError("warp_row, warp_rank and row_warps must be int32")
    if x.dim() != 2 or x.dtype == torch.float64 or not x.is_floating_point():
        raise ValueError(f"x must be 2-D float16/bfloat16/float32, got {x.dtype} {tuple(x.shape)}")
    tensors = (indptr, indices, values, *schedule, x)
    if any(t.device != x.device for t in tensors) or x.device.type != "cuda":
        raise ValueError("the CSR arrays, the schedule and x must be on one CUDA device")
    n_rows, n = indptr.numel() - 1, x.shape[1]
    # rows without nonzeros have no warp: their outputs are the zeros written here
    out = torch.zeros(n_rows, n, dtype=out_dtype, device=x.device)
    n_warps = warp_row.numel()
    if n == 0 or n_warps == 0:
        return out
    xs = operand(x, STORAGE[precision])
    vals = operand(values, torch.float32)
    launch(
        SOURCE,
        _kernel(precision, out_dtype),
        x.device,
        (-(-n_warps // WARPS),),
        (32 * WARPS,),
        ptr(indptr),
        ptr(indices),
        ptr(vals),
        ptr(warp_row),
        ptr(warp_rank),
        ptr(row_warps),
        n_warps,
        n,
        ptr(xs),
        ptr(out),
    )
    return out
