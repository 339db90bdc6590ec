"""SDDMM: (X @ Y^T) sampled on A's nonzeros, in A's value layout."""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda import sddmm as cuda_sddmm
from ..formats.mebcrs import MEBCRS
from ._autograd import op_entry
from ._pattern import pattern_args, transpose_args, transposed_values
from .dispatch import register_format
from .precision import compute_dtype, kernel_operands
from .reference import sddmm_reference


def _sddmm(
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    x: Tensor,
    y: Tensor,
    k: int,
    precision: str,
    t_row_ptr: Tensor | None,
    t_col_idx: Tensor | None,
    t_vec_mask: Tensor | None,
    t_perm: Tensor | None,
    t_src: Tensor | None,
) -> Tensor:
    """The op's implementation: the CUDA kernels for CUDA inputs up to float32 (CUDA cores for
    fp32 and where ``tf32_on_cuda_cores``, tensor cores otherwise), else the reference. The A^T
    tensors are only for the backward."""
    if x.device.type != "cuda" or torch.float64 in (x.dtype, y.dtype):
        return sddmm_reference(row_ptr, col_idx, vec_mask, x, y, k, precision)
    if precision == "fp32" or (
        precision == "tf32"
        and cuda_sddmm.tf32_on_cuda_cores(x, y, col_idx.numel(), row_ptr.numel() - 1)
    ):
        return cuda_sddmm.sddmm_cuda_cores(row_ptr, col_idx, vec_mask, x, y, k, precision)
    return cuda_sddmm.sddmm_tensor_core(row_ptr, col_idx, vec_mask, x, y, k, precision)


sddmm_op = torch.library.custom_op("flashgnn::sddmm", _sddmm, mutates_args=())


@sddmm_op.register_fake
def _(row_ptr, col_idx, vec_mask, x, y, k, precision, *t):
    return x.new_empty((8 * col_idx.shape[0],), dtype=compute_dtype(x, y))


def _setup_context(ctx, inputs, output):
    row_ptr, col_idx, vec_mask, x, y, k, precision, *t = inputs
    ctx.save_for_backward(row_ptr, col_idx, vec_mask, x, y, *t)
    ctx.k, ctx.precision = k, precision


def _backward(ctx, grad):
    from .spmm import spmm_call

    row_ptr, col_idx, vec_mask, x, y, *t = ctx.saved_tensors
    t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = t
    grad_x = grad_y = None
    need_x, need_y = ctx.needs_input_grad[3:5]
    # dX reads y, dY reads x; AGNN passes one tensor as both, converted once
    yk, xk = kernel_operands(ctx.precision, y if need_x else None, x if need_y else None)
    if need_x:
        grad_x = spmm_call(
            row_ptr,
            col_idx,
            vec_mask,
            grad,
            yk,
            x.shape[0],
            ctx.k,
            ctx.precision,
            x.dtype == torch.float32,
            *t,
        ).to(x.dtype)
    if need_y:
        if t_row_ptr is None:
            raise RuntimeError(
                "sddmm: the gradient of Y needs A^T; call flashgnn.ops.sddmm, which builds it"
            )
        grad_t = transposed_values(grad, t_col_idx, t_perm, t_src)
        grad_y = spmm_call(
            t_row_ptr,
            t_col_idx,
            t_vec_mask,
            grad_t,
            xk,
            y.shape[0],
            ctx.k,
            ctx.precision,
            y.dtype == torch.float32,
            row_ptr,
            col_idx,
            vec_mask,
            t_src,
            t_perm,
        ).to(y.dtype)
    return (None, None, None, grad_x, grad_y) + (None,) * 7


sddmm_call = op_entry(sddmm_op, _sddmm, _setup_context, _backward)


def mebcrs_sddmm(a: MEBCRS, x: Tensor, y: Tensor, precision: str) -> Tensor:
    """ME-BCRS's SDDMM behind ``flashgnn.ops.sddmm`` (which checks the inputs): [8 * n_vectors]
    float32 (float64 for float64 inputs), differentiable in x and y."""
    need_t = torch.is_grad_enabled() and y.requires_grad
    return sddmm_call(*pattern_args(a), x, y, a.k, precision, *transpose_args(a, need_t))


register_format(MEBCRS, sddmm=mebcrs_sddmm)
