"""Launchers of the 16x1 baseline SpMM and SDDMM (kernels/blocked16.cu), fp16 and bf16.

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

import torch

from .runtime import aligned16, launch, ptr, warp_blocks
from .sddmm import sddmm_operands
from .sources import register
from .spmm import STORAGE, TAG, dense_operands

PRECISION_ID = {"fp16": 0, "bf16": 1}
_RUNS = (4, 8)  # E: features per lane and gathered row (a warp covers 8 E feature columns)
_WARPS = 4  # warps per thread block


def _spmm_name(precision: str, e: int, out_dtype: torch.dtype) -> str:
    return f"fg::b16::spmm16<{PRECISION_ID[precision]}, {e}, {TAG[out_dtype]}>"


SOURCE = register(
    "blocked16.cu",
    [_spmm_name(p, e, d) for p in PRECISION_ID for e in _RUNS for d in TAG]
    + [f"fg::b16::sddmm16<{i}>" for i in PRECISION_ID.values()],
)


def spmm16_cuda(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    n_rows: int,
    precision: str,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """Y = A @ X for A in the 16x1 format, on tensor cores with fp32 accumulation.

    row_ptr int64 [n_windows + 1], col_idx int32 [8 * n_blocks], values [128 * n_blocks]
    (read as float32); x [n_cols, N] of any float dtype, rounded to ``precision`` ("fp16" or
    "bf16"). Returns [n_rows, N] in ``out_dtype`` (float16, bfloat16 or float32)."""
    n = x.shape[1]
    xs, vals, out = dense_operands(x, values, n_rows, precision, out_dtype)
    if n == 0 or n_rows == 0:
        return out
    n_windows = row_ptr.numel() - 1
    e = 4 if n <= 32 else 8
    warps = n_windows * -(-n // (8 * e))
    launch(
        SOURCE,
        _spmm_name(precision, e, out_dtype),
        x.device,
        warp_blocks(warps, _WARPS),
        (32 * _WARPS,),
        ptr(row_ptr),
        ptr(col_idx),
        ptr(vals),
        n_windows,
        n_rows,
        n,
        n % 8 == 0 and aligned16(xs, out),
        ptr(xs),
        ptr(out),
    )
    return out


def sddmm16_cuda(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    vec_mask: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    precision: str,
) -> torch.Tensor:
    """(x @ y^T) on the pattern of a 16x1 matrix, in its value layout: float32 [128 * n_blocks],
    0 on every slot that is not a nonzero. vec_mask int16 [8 * n_blocks]; x [n_rows, K],
    y [n_cols, K] of any float dtype, rounded to ``precision`` ("fp16" or "bf16")."""
    kdim = x.shape[1]
    xs, ys, out, empty = sddmm_operands(x, y, STORAGE[precision], 16 * col_idx.numel())
    if empty:
        return out
    n_windows = row_ptr.numel() - 1
    launch(
        SOURCE,
        f"fg::b16::sddmm16<{PRECISION_ID[precision]}>",
        x.device,
        warp_blocks(n_windows, _WARPS),
        (32 * _WARPS,),
        ptr(row_ptr),
        ptr(col_idx),
        ptr(vec_mask),
        n_windows,
        x.shape[0],
        kdim,
        kdim % 8 == 0 and aligned16(xs, ys),
        ptr(xs),
        ptr(ys),
        ptr(out),
    )
    return out
