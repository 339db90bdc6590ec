"""SpMM on GCOO (flashgnn.formats.GCOO), registered with ``flashgnn.ops.dispatch``; GCOOSpDM
defines no SDDMM, so none is registered.

On the CPU, and for float64 inputs, the reference on the nonzeros' coordinates (inputs rounded
to the precision, fp32 accumulation), plain differentiable torch. On CUDA the kernel of
kernels/gcoo.cu, forward only: fp32 and tf32 as the kernel computes them, fp16 and bf16 with the
inputs rounded to their storage type first and then summed in fp32, as the reference does. A
gradient on CUDA needs A^T's layout, which GCOO does not keep: it is refused with a clear error
(float64 inputs, on the reference, are differentiable on any device).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda.gcoo import gcoo_spmm_cuda
from ..formats.gcoo import GCOO
from ._pattern import check_values
from .dispatch import register_format
from .precision import half_storage, on_kernels
from .reference import spmm_on_coords


def forward_only(fmt: str, *tensors: Tensor) -> None:
    """RuntimeError when autograd would need a gradient through a CUDA kernel of ``fmt``."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise RuntimeError(
            f"spmm on {fmt} runs forward only on CUDA (its backward would need A^T's layout): "
            "call it under torch.no_grad(), pass float64 inputs (the differentiable reference) "
            "or train on ME-BCRS"
        )


def gcoo_cuda(a: GCOO, values: Tensor, x: Tensor, precision: str) -> Tensor:
    """A @ x in float32 [n_rows, N] by the GCOO kernel, in any precision: fp16 and bf16 inputs
    are rounded to their storage type, then computed exactly in fp32."""
    storage = half_storage(precision)
    if storage is not None:
        values, x = values.to(storage), x.to(storage)
    return gcoo_spmm_cuda(
        a.group_ptr,
        a.rows,
        a.cols,
        values,
        x,
        a.n_rows,
        a.group,
        precision="tf32" if precision == "tf32" else "fp32",
    )


def gcoo_spmm(a: GCOO, x: Tensor, precision: str, *, values: Tensor | None, out_fp32: bool):
    """Y = A @ X: values [nnz] in GCOO order, x [n_cols, N]; [n_rows, N] in x's dtype, or
    float32 when ``out_fp32``. Differentiable in values and x on the reference."""
    values = a.values if values is None else values
    check_values("values", values, a)
    if not on_kernels(values, x):
        return spmm_on_coords(a.slot_coords(), values, x, a.n_rows, precision, out_fp32)
    forward_only("GCOO", values, x)
    y = gcoo_cuda(a, values, x, precision)
    return y if out_fp32 else y.to(x.dtype)


register_format(GCOO, spmm=gcoo_spmm)
