"""SpMM and SDDMM on CVSE (flashgnn.formats.CVSE), registered with ``flashgnn.ops.dispatch``.

Each is a ``torch.library`` custom op on the format's tensors, with the fake and autograd
kernels that ME-BCRS's ops have too (``PatternOps``, ops/_pattern_ops.py: A^T in the backward).
CUDA inputs up to float32 go to the kernels of kernels/cvse.cu (tensor cores for fp16, bf16 and
tf32, CUDA cores for exact fp32); CPU and float64 inputs to the reference, which computes on the
real slots' coordinates (inputs rounded to the precision, fp32 accumulation; float64 kept).
A^T is a CVSE of its own (the same V), built from A's coordinates once per pattern and cached.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda.cvse import cvse_sddmm_cuda, cvse_spmm_cuda
from ..formats.cvse import CVSE, decode_cvse_slots
from ..formats.slot_layout import csr_order
from ..formats.windowed import SlotCoords
from ..tensor_cache import TensorCache, built_for_reuse, tensor_version
from ._pattern import NO_TRANSPOSE, check_values
from ._pattern_ops import PatternOps
from .dispatch import register_format
from .precision import on_kernels
from .reference import sddmm_on_coords, spmm_on_coords

_COORDS = TensorCache()  # col_idx -> (row_ptr, vec_mask, (V, versions), SlotCoords)
_TRANSPOSES = TensorCache()  # col_idx -> (row_ptr, vec_mask, (V, versions), A^T's tensors)


def _cached(cache: TensorCache, row_ptr, col_idx, vec_mask, vector: int, build):
    """``build()`` for this pattern, kept while col_idx lives with the same row_ptr, vec_mask
    and V (none modified in place)."""
    key = (vector, tensor_version(row_ptr), tensor_version(vec_mask))
    hit = cache.get(col_idx)
    if hit is None or hit[0] is not row_ptr or hit[1] is not vec_mask or hit[2] != key:
        hit = cache.set(col_idx, (row_ptr, vec_mask, key, built_for_reuse(build)))
    return hit[3]


def _coords(row_ptr, col_idx, vec_mask, vector: int) -> SlotCoords:
    return _cached(
        _COORDS,
        row_ptr,
        col_idx,
        vec_mask,
        vector,
        lambda: decode_cvse_slots(row_ptr, col_idx, vec_mask, vector),
    )


def transpose_args(a: CVSE, needed: bool) -> tuple:
    """(t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src) of A^T in CVSE with A's V: its
    pattern, then for each of its nonzeros (in A^T's CSR order) its slot in A^T's value layout
    and its slot in A's. Five Nones when no gradient needs it; built once per pattern."""
    if not needed:
        return NO_TRANSPOSE

    def build():
        c = _coords(a.row_ptr, a.col_idx, a.vec_mask, a.vector)
        indptr, order = csr_order(c.col, c.row, a.n_cols, a.n_rows)  # A^T's CSR
        t = CVSE.from_csr(indptr, c.row[order], None, a.n_rows, vector=a.vector)
        return t.row_ptr, t.col_idx, t.vec_mask, t.perm, c.slot[order]

    return _cached(_TRANSPOSES, a.row_ptr, a.col_idx, a.vec_mask, a.vector, build)


def _spmm(row_ptr, col_idx, vec_mask, values, x, n_rows, vector, precision, out_fp32, *transpose):
    """The op's implementation (arguments: ``SPMM_SCHEMA``, k = V): the kernels for CUDA inputs
    up to float32, else the reference. The A^T tensors ``transpose`` are only for the
    backward."""
    out_dtype = torch.float32 if out_fp32 else x.dtype
    if not on_kernels(values, x):
        c = _coords(row_ptr, col_idx, vec_mask, vector)
        return spmm_on_coords(c, values, x, n_rows, precision, out_fp32)
    y = cvse_spmm_cuda(row_ptr, col_idx, vec_mask, values, x, n_rows, vector, precision, out_dtype)
    return y.to(out_dtype)


CVSE_OPS = PatternOps(vector_rows=lambda vector: vector)
spmm_call = CVSE_OPS.spmm("flashgnn::cvse_spmm", _spmm)


def _sddmm(row_ptr, col_idx, vec_mask, x, y, vector, precision, *transpose):
    """The op's implementation (arguments: ``SDDMM_SCHEMA``, k = V): the kernels for CUDA inputs
    up to float32, else the reference. The A^T tensors ``transpose`` are only for the
    backward."""
    if not on_kernels(x, y):
        c = _coords(row_ptr, col_idx, vec_mask, vector)
        return sddmm_on_coords(c, vector * col_idx.numel(), x, y, precision)
    return cvse_sddmm_cuda(row_ptr, col_idx, vec_mask, x, y, x.shape[0], vector, precision)


sddmm_call = CVSE_OPS.sddmm("flashgnn::cvse_sddmm", _sddmm)


def cvse_spmm(a: CVSE, x: Tensor, precision: str, *, values: Tensor | None, out_fp32: bool):
    """Y = A @ X: values [V * n_vectors] (slots outside the pattern ignored), x [n_cols, N];
    [n_rows, N] in x's dtype, or float32 when ``out_fp32``. Differentiable in values and x."""
    values = a.values if values is None else values
    check_values("values", values, a)
    need_t = torch.is_grad_enabled() and x.requires_grad
    return spmm_call(
        a.row_ptr,
        a.col_idx,
        a.vec_mask,
        values,
        x,
        a.n_rows,
        a.vector,
        precision,
        out_fp32,
        *transpose_args(a, need_t),
    )


def cvse_sddmm(a: CVSE, x: Tensor, y: Tensor, precision: str) -> Tensor:
    """(x @ y^T) on A's pattern, [V * n_vectors] float32 (float64 for float64 inputs), 0 on
    slots outside the pattern; x [n_rows, K], y [n_cols, K]. Differentiable in x and y."""
    need_t = torch.is_grad_enabled() and y.requires_grad
    return sddmm_call(
        a.row_ptr, a.col_idx, a.vec_mask, x, y, a.vector, precision, *transpose_args(a, need_t)
    )


register_format(CVSE, spmm=cvse_spmm, sddmm=cvse_sddmm)
