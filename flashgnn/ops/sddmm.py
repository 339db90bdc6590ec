"""SDDMM: (X @ Y^T) sampled on A's nonzeros, in A's value layout."""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda import sddmm as cuda_sddmm
from ..formats.mebcrs import MEBCRS
from ._pattern import pattern_args, transpose_args
from .dispatch import register_format
from .reference import sddmm_reference
from .spmm import MEBCRS_OPS


def _sddmm(row_ptr, col_idx, vec_mask, x, y, k, precision, *transpose):
    """The op's implementation (arguments: ``SDDMM_SCHEMA``): the CUDA kernels for CUDA inputs
    up to float32 (CUDA cores for fp32 and where ``tf32_on_cuda_cores``, tensor cores
    otherwise), else the reference. The A^T tensors ``transpose`` are only for the backward."""
    if x.device.type != "cuda" or torch.float64 in (x.dtype, y.dtype):
        return sddmm_reference(row_ptr, col_idx, vec_mask, x, y, k, precision)
    if precision == "fp32" or (
        precision == "tf32"
        and cuda_sddmm.tf32_on_cuda_cores(x, y, col_idx.numel(), row_ptr.numel() - 1)
    ):
        return cuda_sddmm.sddmm_cuda_cores(row_ptr, col_idx, vec_mask, x, y, k, precision)
    return cuda_sddmm.sddmm_tensor_core(row_ptr, col_idx, vec_mask, x, y, k, precision)


sddmm_call = MEBCRS_OPS.sddmm("flashgnn::sddmm", _sddmm)


def mebcrs_sddmm(a: MEBCRS, x: Tensor, y: Tensor, precision: str) -> Tensor:
    """ME-BCRS's SDDMM behind ``flashgnn.ops.sddmm`` (which checks the inputs): [8 * n_vectors]
    float32 (float64 for float64 inputs), differentiable in x and y."""
    need_t = torch.is_grad_enabled() and y.requires_grad
    return sddmm_call(*pattern_args(a), x, y, a.k, precision, *transpose_args(a, need_t))


register_format(MEBCRS, sddmm=mebcrs_sddmm)
