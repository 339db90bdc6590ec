"""Launchers of the CVSE SpMM and SDDMM (kernels/cvse.cu): tensor cores for fp16, bf16 and
tf32, CUDA cores for exact fp32.

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

import torch

from .runtime import aligned16, launch, operand, ptr, warp_blocks
from .sddmm import sddmm_operands
from .sources import register
from .spmm import STORAGE, TAG, dense_operands

PRECISION_ID = {"fp16": 0, "bf16": 1, "tf32": 2}
VECTORS = (2, 4, 8)
WARPS = 4  # per block (kernels/cvse.cu: WARPS)
ROWS = 8  # rows of a tensor-core window
# MMA tiles per warp of the tensor-core SpMM (16 features each): 2 up to N = 32, where 4 would
# leave half of every warp's lanes without features, else 4 (16-byte gathers of fp16/bf16 rows)
_TILES = (2, 4)
# features per lane of the fp32 SpMM (a warp covers 32 times as many), by the smallest N they fit
_FP32_FEATURES = ((32, 1), (64, 2), (None, 4))


def _spmm_name(precision: str, vector: int, tiles: int, out_dtype: torch.dtype) -> str:
    return f"fg::cvse::cvse_spmm_tc<{PRECISION_ID[precision]}, {vector}, {tiles}, {TAG[out_dtype]}>"


SOURCE = register(
    "cvse.cu",
    [_spmm_name(p, v, t, d) for p in PRECISION_ID for v in VECTORS for t in _TILES for d in TAG]
    + [f"fg::cvse::cvse_sddmm_tc<{i}, {v}>" for i in PRECISION_ID.values() for v in VECTORS]
    + [f"fg::cvse::cvse_spmm_fp32<{v}, {f}>" for v in VECTORS for _, f in _FP32_FEATURES]
    + [f"fg::cvse::cvse_sddmm_fp32<{v}>" for v in VECTORS],
)


def _values_operand(values: torch.Tensor) -> torch.Tensor:
    """float32, contiguous and 16-byte aligned (the fp32 kernel reads a vector's values in
    16-byte loads; a view may start anywhere)."""
    vals = operand(values, torch.float32)
    return vals if aligned16(vals) else vals.clone()


def _windows(n_strips: int, vector: int) -> int:
    return -(-n_strips // (ROWS // vector))


def cvse_spmm_cuda(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    vec_mask: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    n_rows: int,
    vector: int,
    precision: str,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """Y = A @ X for A in CVSE with V = ``vector``: row_ptr int32 [n_strips + 1], col_idx int32
    [n_vectors], vec_mask uint8 [n_vectors], values [V * n_vectors] (read as float32; slots
    that vec_mask does not mark are ignored), x [n_cols, N] of any float dtype, rounded to
    ``precision``. fp16/bf16/tf32 on tensor cores, fp32 exactly on CUDA cores; fp32
    accumulation. Returns [n_rows, N] in ``out_dtype`` (float32 always for fp32)."""
    n = x.shape[1]
    n_strips = row_ptr.numel() - 1
    if precision == "fp32":
        xs, vals = operand(x, torch.float32), _values_operand(values)
        out = torch.empty(n_rows, n, dtype=torch.float32, device=x.device)
        if n == 0 or n_strips == 0:
            return out.zero_()
        features = next(f for limit, f in _FP32_FEATURES if limit is None or n <= limit)
        kernel = f"fg::cvse::cvse_spmm_fp32<{vector}, {features}>"
        warps = n_strips * -(-n // (32 * features))
    else:
        xs, vals, out = dense_operands(x, values, n_rows, precision, out_dtype)
        if n == 0 or n_strips == 0:
            return out.zero_()
        tiles = 2 if n <= 32 else 4
        kernel = _spmm_name(precision, vector, tiles, out_dtype)
        warps = _windows(n_strips, vector) * -(-n // (16 * tiles))
    launch(
        SOURCE,
        kernel,
        x.device,
        warp_blocks(warps, WARPS),
        (32 * WARPS,),
        ptr(row_ptr),
        ptr(col_idx),
        ptr(vec_mask),
        ptr(vals),
        n_strips,
        n_rows,
        n,
        n % 8 == 0 and aligned16(xs, out),
        ptr(xs),
        ptr(out),
    )
    return out


def cvse_sddmm_cuda(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    vec_mask: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    n_rows: int,
    vector: int,
    precision: str,
) -> torch.Tensor:
    """(x @ y^T) on the pattern of a CVSE matrix with V = ``vector``, in its value layout:
    float32 [V * n_vectors], 0 on every slot that is not a nonzero. x [n_rows, K], y [n_cols, K]
    of any float dtype, rounded to ``precision`` (fp32: exact, on CUDA cores)."""
    kdim = x.shape[1]
    n_strips = row_ptr.numel() - 1
    dtype = torch.float32 if precision == "fp32" else STORAGE[precision]
    xs, ys, out, empty = sddmm_operands(x, y, dtype, vector * col_idx.numel())
    if empty:
        return out
    if precision == "fp32":
        kernel, warps = f"fg::cvse::cvse_sddmm_fp32<{vector}>", n_strips
    else:
        kernel = f"fg::cvse::cvse_sddmm_tc<{PRECISION_ID[precision]}, {vector}>"
        warps = _windows(n_strips, vector)
    # whole 16-byte runs of every row: 4 fp32/tf32 or 8 fp16/bf16 features
    aligned = kdim % (16 // dtype.itemsize) == 0
    launch(
        SOURCE,
        kernel,
        x.device,
        warp_blocks(warps, WARPS),
        (32 * WARPS,),
        ptr(row_ptr),
        ptr(col_idx),
        ptr(vec_mask),
        n_strips,
        n_rows,
        kdim,
        aligned and aligned16(xs, ys),
        ptr(xs),
        ptr(ys),
        ptr(out),
    )
    return out
