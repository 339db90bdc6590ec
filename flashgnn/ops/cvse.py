"""SpMM and SDDMM on CVSE (flashgnn.formats.CVSE), registered with ``flashgnn.ops.dispatch``.

Each is a ``torch.library`` custom op on the format's tensors with fake and autograd kernels,
called through ``op_entry`` as ME-BCRS's ops are. CUDA inputs up to float32 go to the kernels of
kernels/cvse.cu (tensor cores for fp16, bf16 and tf32, CUDA cores for exact fp32); CPU and
float64 inputs to the reference, which computes on the real slots' coordinates (inputs rounded
to the precision, fp32 accumulation; float64 kept).

Backward: for Y = A X, dvalues = SDDMM(dY, X) on A's pattern and dX = A^T dY; for the SDDMM
S = (X Y^T) on A's pattern, dX = G Y and dY = G^T X with G the gradient on A's pattern. A^T is
a CVSE of its own (the same V), built from A's coordinates once per pattern and cached, and
values move into it through a slot map; as A^T's transpose is A with the maps swapped, double
backward works too.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda.cvse import cvse_sddmm_cuda, cvse_spmm_cuda
from ..formats.cvse import CVSE, decode_cvse_slots
from ..formats.windowed import SlotCoords
from ..tensor_cache import TensorCache, built_for_reuse, tensor_version
from ._autograd import op_entry
from ._pattern import NO_TRANSPOSE, check_values
from .dispatch import register_format
from .precision import compute_dtype, kernel_operands
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
        order = torch.argsort(c.col * max(a.n_rows, 1) + c.row)
        indptr = torch.zeros(a.n_cols + 1, dtype=torch.int64, device=a.device)
        indptr[1:] = torch.cumsum(torch.bincount(c.col, minlength=a.n_cols), 0)
        t = CVSE.from_csr(indptr, c.row[order], None, a.n_rows, vector=a.vector)
        return t.row_ptr, t.col_idx, t.vec_mask, t.perm, c.slot[order]

    return _cached(_TRANSPOSES, a.row_ptr, a.col_idx, a.vec_mask, a.vector, build)


def _moved(values: Tensor, t_col_idx: Tensor, vector: int, perm: Tensor, src: Tensor) -> Tensor:
    """The value layout of the pattern of ``t_col_idx`` holding ``values[src]`` at slots
    ``perm`` (the other slots, which the ops ignore, 0)."""
    out = values.new_zeros(vector * t_col_idx.numel())
    out[perm] = values[src]
    return out


def _on_kernels(*tensors: Tensor) -> bool:
    return tensors[0].device.type == "cuda" and all(t.dtype != torch.float64 for t in tensors)


def _spmm(
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    values: Tensor,
    x: Tensor,
    n_rows: int,
    vector: int,
    precision: str,
    out_fp32: bool,
    t_row_ptr: Tensor | None,
    t_col_idx: Tensor | None,
    t_vec_mask: Tensor | None,
    t_perm: Tensor | None,
    t_src: Tensor | None,
) -> Tensor:
    """The op's implementation: the kernels for CUDA inputs up to float32, else the reference.
    The A^T tensors are only for the backward."""
    out_dtype = torch.float32 if out_fp32 else x.dtype
    if not _on_kernels(values, x):
        c = _coords(row_ptr, col_idx, vec_mask, vector)
        return spmm_on_coords(c, values, x, n_rows, precision, out_fp32)
    y = cvse_spmm_cuda(row_ptr, col_idx, vec_mask, values, x, n_rows, vector, precision, out_dtype)
    return y.to(out_dtype)


spmm_op = torch.library.custom_op("flashgnn::cvse_spmm", _spmm, mutates_args=())


@spmm_op.register_fake
def _(row_ptr, col_idx, vec_mask, values, x, n_rows, vector, precision, out_fp32, *t):
    return x.new_empty((n_rows, x.shape[1]), dtype=torch.float32 if out_fp32 else x.dtype)


def _spmm_setup(ctx, inputs, output):
    row_ptr, col_idx, vec_mask, values, x, n_rows, vector, precision, out_fp32, *t = inputs
    ctx.save_for_backward(row_ptr, col_idx, vec_mask, values, x, *t)
    ctx.vector, ctx.precision = vector, precision


def _spmm_backward(ctx, grad):
    row_ptr, col_idx, vec_mask, values, x, *t = ctx.saved_tensors
    t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = t
    grad_values = grad_x = None
    (grad,) = kernel_operands(ctx.precision, grad)  # converted once for both products
    if ctx.needs_input_grad[3]:
        grad_values = sddmm_call(
            row_ptr, col_idx, vec_mask, grad, x, ctx.vector, ctx.precision, *t
        ).to(values.dtype)
    if ctx.needs_input_grad[4]:
        if t_row_ptr is None:
            raise RuntimeError(
                "cvse spmm: the gradient of X needs A^T; call flashgnn.ops.spmm, which builds it"
            )
        t_values = _moved(values, t_col_idx, ctx.vector, t_perm, t_src)
        grad_x = spmm_call(
            t_row_ptr,
            t_col_idx,
            t_vec_mask,
            t_values,
            grad,
            x.shape[0],
            ctx.vector,
            ctx.precision,
            x.dtype == torch.float32,
            row_ptr,
            col_idx,
            vec_mask,
            t_src,
            t_perm,
        ).to(x.dtype)
    return (None, None, None, grad_values, grad_x) + (None,) * 9


spmm_call = op_entry(spmm_op, _spmm, _spmm_setup, _spmm_backward)


def _sddmm(
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    x: Tensor,
    y: Tensor,
    vector: int,
    precision: str,
    t_row_ptr: Tensor | None,
    t_col_idx: Tensor | None,
    t_vec_mask: Tensor | None,
    t_perm: Tensor | None,
    t_src: Tensor | None,
) -> Tensor:
    """The op's implementation: the kernels for CUDA inputs up to float32, else the reference.
    The A^T tensors are only for the backward."""
    if not _on_kernels(x, y):
        c = _coords(row_ptr, col_idx, vec_mask, vector)
        return sddmm_on_coords(c, vector * col_idx.numel(), x, y, precision)
    return cvse_sddmm_cuda(row_ptr, col_idx, vec_mask, x, y, x.shape[0], vector, precision)


sddmm_op = torch.library.custom_op("flashgnn::cvse_sddmm", _sddmm, mutates_args=())


@sddmm_op.register_fake
def _(row_ptr, col_idx, vec_mask, x, y, vector, precision, *t):
    return x.new_empty((vector * col_idx.shape[0],), dtype=compute_dtype(x, y))


def _sddmm_setup(ctx, inputs, output):
    row_ptr, col_idx, vec_mask, x, y, vector, precision, *t = inputs
    ctx.save_for_backward(row_ptr, col_idx, vec_mask, x, y, *t)
    ctx.vector, ctx.precision = vector, precision


def _sddmm_backward(ctx, grad):
    row_ptr, col_idx, vec_mask, x, y, *t = ctx.saved_tensors
    t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = t
    grad_x = grad_y = None
    need_x, need_y = ctx.needs_input_grad[3:5]
    # dX reads y, dY reads x; one tensor passed as both is converted once
    yk, xk = kernel_operands(ctx.precision, y if need_x else None, x if need_y else None)
    if need_x:
        grad_x = spmm_call(
            row_ptr,
            col_idx,
            vec_mask,
            grad,
            yk,
            x.shape[0],
            ctx.vector,
            ctx.precision,
            x.dtype == torch.float32,
            *t,
        ).to(x.dtype)
    if need_y:
        if t_row_ptr is None:
            raise RuntimeError(
                "cvse sddmm: the gradient of Y needs A^T; call flashgnn.ops.sddmm, which builds it"
            )
        grad_y = spmm_call(
            t_row_ptr,
            t_col_idx,
            t_vec_mask,
            _moved(grad, t_col_idx, ctx.vector, t_perm, t_src),
            xk,
            y.shape[0],
            ctx.vector,
            ctx.precision,
            y.dtype == torch.float32,
            row_ptr,
            col_idx,
            vec_mask,
            t_src,
            t_perm,
        ).to(y.dtype)
    return (None, None, None, grad_x, grad_y) + (None,) * 7


sddmm_call = op_entry(sddmm_op, _sddmm, _sddmm_setup, _sddmm_backward)


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
