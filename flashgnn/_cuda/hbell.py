"""Launchers of HB-ELL's dense-block SpMM (kernels/hbell.cu): tensor cores for fp16, bf16 and
tf32, CUDA cores for fp32, each adding the sparse blocks' product when given.

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

import torch

from .runtime import aligned16, launch, operand, ptr, warp_blocks
from .sources import register
from .spmm import STORAGE, TAG

PRECISION_ID = {"fp16": 0, "bf16": 1, "tf32": 2}
_RUNS = {"fp16": (4, 8), "bf16": (4, 8), "tf32": (4,)}  # E: features per lane and gathered row
_WARPS = 4  # warps per thread block


def _name(precision: str, e: int, out_dtype: torch.dtype) -> str:
    return f"fg::hbell::spmm_dense<{PRECISION_ID[precision]}, {e}, {TAG[out_dtype]}>"


SOURCE = register(
    "hbell.cu",
    [_name(p, e, d) for p, runs in _RUNS.items() for e in runs for d in TAG]
    + ["fg::hbell::spmm_dense_fp32"],
)


def spmm_dense_cuda(
    dense_ptr: torch.Tensor,
    dense_col: torch.Tensor,
    dense_val: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    base: torch.Tensor | None,
    n_rows: int,
    precision: str,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """Y = base + A_dense @ X, A_dense the dense blocks of an HB-ELL matrix, fp32 accumulation.

    dense_ptr int64 [n_brows + 1] (first dense block of each block row), dense_col int32
    [n_dense] (first column of each), dense_val int64 [n_dense] (its first value in
    ``values``, 256 row-major); values float [n_slots] (read as float32); x [n_cols, N] of any
    float dtype, rounded to ``precision``; base float32 [n_rows, N] or None. Returns [n_rows, N]
    in ``out_dtype`` (float16, bfloat16 or float32; float32 for precision "fp32")."""
    n_cols, n = x.shape
    vals = operand(values, torch.float32)
    base = None if base is None else operand(base, torch.float32)
    n_brows = dense_ptr.numel() - 1
    if precision == "fp32":
        xs = operand(x, torch.float32)
        out = torch.empty(n_rows, n, dtype=torch.float32, device=x.device)
        if n and n_rows:
            launch(
                SOURCE,
                "fg::hbell::spmm_dense_fp32",
                x.device,
                warp_blocks(n_rows * -(-n // 32), _WARPS),
                (32 * _WARPS,),
                ptr(dense_ptr),
                ptr(dense_col),
                ptr(dense_val),
                ptr(vals),
                0 if base is None else ptr(base),
                n_rows,
                n_cols,
                n,
                ptr(xs),
                ptr(out),
            )
        return out
    xs = operand(x, STORAGE[precision])
    out = torch.empty(n_rows, n, dtype=out_dtype, device=x.device)
    if n == 0 or n_rows == 0:
        return out
    e = 4 if n <= 32 or precision == "tf32" else 8
    aligned = n % 8 == 0 and aligned16(xs, out)
    launch(
        SOURCE,
        _name(precision, e, out_dtype),
        x.device,
        warp_blocks(n_brows * -(-n // (8 * e)), _WARPS),
        (32 * _WARPS,),
        ptr(dense_ptr),
        ptr(dense_col),
        ptr(dense_val),
        ptr(vals),
        0 if base is None else ptr(base),
        n_brows,
        n_rows,
        n_cols,
        n,
        aligned,
        ptr(xs),
        ptr(out),
    )
    return out
