"""SpMM: Y = A @ X with A in ME-BCRS."""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda import hybrid
from .._cuda import spmm_fp32 as cuda_spmm_fp32
from ..formats.mebcrs import MEBCRS
from ._pattern import check_values, pattern_args, transpose_args
from ._pattern_ops import PatternOps
from .dispatch import register_format
from .reference import spmm_reference


def _spmm(row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_fp32, *transpose):
    """The op's implementation (arguments: ``SPMM_SCHEMA``): the CUDA kernels for CUDA inputs
    up to float32 (fp32 on CUDA cores, tf32 too on large graphs; fp16/bf16/tf32 on tensor
    cores, their sparse windows on CUDA cores where hybrid.py says), else the reference. The A^T
    tensors ``transpose`` are only for the backward."""
    if x.device.type != "cuda" or torch.float64 in (values.dtype, x.dtype):
        return spmm_reference(row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_fp32)
    if precision == "fp32" or (
        precision == "tf32" and cuda_spmm_fp32.tf32_on_cuda_cores(x, col_idx.numel())
    ):
        y = cuda_spmm_fp32.spmm_fp32(
            row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision=precision
        )
        return y if out_fp32 else y.to(x.dtype)
    return hybrid.spmm_hybrid(
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


MEBCRS_OPS = PatternOps(vector_rows=lambda k: 8)  # the SDDMM registers in sddmm.py
spmm_call = MEBCRS_OPS.spmm("flashgnn::spmm", _spmm)


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
