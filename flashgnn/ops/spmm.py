"""SpMM: Y = A @ X with A in ME-BCRS."""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda import spmm as cuda_spmm
from .._cuda import spmm_fp32 as cuda_spmm_fp32
from ..formats.mebcrs import MEBCRS
from ._autograd import op_entry
from ._pattern import check_values, pattern_args, transpose_args, transposed_values
from .dispatch import register_format
from .precision import kernel_operands
from .reference import spmm_reference


def _spmm(
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    values: Tensor,
    x: Tensor,
    n_rows: int,
    k: int,
    precision: str,
    out_fp32: bool,
    t_row_ptr: Tensor | None,
    t_col_idx: Tensor | None,
    t_vec_mask: Tensor | None,
    t_perm: Tensor | None,
    t_src: Tensor | None,
) -> Tensor:
    """The op's implementation: the CUDA kernels for CUDA inputs up to float32 (fp32 on CUDA
    cores, tf32 too on large graphs), else the reference. The A^T tensors are only for the
    backward."""
    if x.device.type != "cuda" or torch.float64 in (values.dtype, x.dtype):
        return spmm_reference(row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_fp32)
    if precision == "fp32" or (
        precision == "tf32" and cuda_spmm_fp32.tf32_on_cuda_cores(x, col_idx.numel())
    ):
        y = cuda_spmm_fp32.spmm_fp32(
            row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision=precision
        )
        return y if out_fp32 else y.to(x.dtype)
    return cuda_spmm.spmm_tensor_core(
        row_ptr,
        col_idx,
        vec_mask,
        values,
        x,
        n_rows,
        k,
        precision,
        torch.float32 if out_fp32 else x.dtype,
    )


spmm_op = torch.library.custom_op("flashgnn::spmm", _spmm, mutates_args=())


@spmm_op.register_fake
def _(row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_fp32, *t):
    return x.new_empty((n_rows, x.shape[1]), dtype=torch.float32 if out_fp32 else x.dtype)


def _setup_context(ctx, inputs, output):
    row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_fp32, *t = inputs
    ctx.save_for_backward(row_ptr, col_idx, vec_mask, values, x, *t)
    ctx.k, ctx.precision = k, precision


def _backward(ctx, grad):
    row_ptr, col_idx, vec_mask, values, x, *t = ctx.saved_tensors
    grad_values = grad_x = None
    (grad,) = kernel_operands(ctx.precision, grad)  # converted once for both products below
    if ctx.needs_input_grad[3]:
        from .sddmm import sddmm_call

        grad_values = sddmm_call(row_ptr, col_idx, vec_mask, grad, x, ctx.k, ctx.precision, *t).to(
            values.dtype
        )
    if ctx.needs_input_grad[4]:
        t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = t
        if t_row_ptr is None:
            raise RuntimeError(
                "spmm: the gradient of X needs A^T; call flashgnn.ops.spmm, which builds it"
            )
        # constant values (GCN's normalised weights) are transposed once and cached
        t_values = transposed_values(
            values, t_col_idx, t_perm, t_src, cache=not ctx.needs_input_grad[3]
        )
        # A^T's own transpose is A, with the slot pairs swapped
        grad_x = spmm_call(
            t_row_ptr,
            t_col_idx,
            t_vec_mask,
            t_values,
            grad,
            x.shape[0],
            ctx.k,
            ctx.precision,
            x.dtype == torch.float32,
            row_ptr,
            col_idx,
            vec_mask,
            t_src,
            t_perm,
        ).to(x.dtype)
    return (None, None, None, grad_values, grad_x) + (None,) * 9


spmm_call = op_entry(spmm_op, _spmm, _setup_context, _backward)


def mebcrs_spmm(
    a: MEBCRS, x: Tensor, precision: str, *, values: Tensor | None, out_fp32: bool
) -> Tensor:
    """ME-BCRS's SpMM behind ``flashgnn.ops.spmm`` (which checks x and the precision): values
    [8 * n_vectors] in the value layout, slots outside the pattern ignored; differentiable in
    values and x."""
    values = a.values if values is None else values
    check_values("values", values, a)
    need_t = torch.is_grad_enabled() and x.requires_grad
    return spmm_call(
        *pattern_args(a), values, x, a.n_rows, a.k, precision, out_fp32, *transpose_args(a, need_t)
    )


register_format(MEBCRS, spmm=mebcrs_spmm)
