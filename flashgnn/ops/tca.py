"""SpMM on TCA-SpMM's CSR (flashgnn.formats.TCACSR), registered with ``flashgnn.ops.dispatch``;
the paper defines no SDDMM, so none is registered.

On the CPU, and for float64 inputs, the reference on the CSR's coordinates (inputs rounded to
the precision, fp32 accumulation), plain differentiable torch. On CUDA, forward only (the
backward would need A^T's CSR and schedule; ops/gcoo.py's error says so): fp16, bf16 and tf32
on the tensor cores by the trace construction (kernels/tca.cu); fp32, which tensor cores do not
compute, on the GCOO kernel, through a GCOO built once from the same CSR (strip height by
``choose_group``) and cached while the CSR's indices live.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda.tca import tca_spmm_cuda
from ..formats.gcoo import GCOO, choose_group
from ..formats.tca import TCACSR
from ..tensor_cache import TensorCache, built_for_reuse
from ._pattern import check_values
from .dispatch import register_format
from .gcoo import forward_only, gcoo_cuda
from .precision import on_kernels
from .reference import spmm_on_coords

_GCOO = TensorCache()  # TCACSR.indices -> (its indptr, the GCOO of that pattern)


def fp32_gcoo(a: TCACSR) -> GCOO:
    """The GCOO of a's pattern (values in CSR order are moved by its perm), cached."""
    hit = _GCOO.get(a.indices)
    if hit is None or hit[0] is not a.indptr:

        def build() -> GCOO:
            group = choose_group(a.indptr, a.indices)
            return GCOO.from_csr(a.indptr, a.indices, None, a.n_cols, group=group)

        hit = _GCOO.set(a.indices, (a.indptr, built_for_reuse(build)))
    return hit[1]


def tca_spmm(a: TCACSR, x: Tensor, precision: str, *, values: Tensor | None, out_fp32: bool):
    """Y = A @ X: values [nnz] in CSR order, x [n_cols, N]; [n_rows, N] in x's dtype, or
    float32 when ``out_fp32``. Differentiable in values and x on the reference."""
    values = a.values if values is None else values
    check_values("values", values, a)
    if not on_kernels(values, x):
        return spmm_on_coords(a.slot_coords(), values, x, a.n_rows, precision, out_fp32)
    forward_only("TCACSR", values, x)
    if precision == "fp32":
        g = fp32_gcoo(a)
        y = gcoo_cuda(g, g.values_from_csr(values), x, precision)
        return y if out_fp32 else y.to(x.dtype)
    out_dtype = torch.float32 if out_fp32 else x.dtype
    return tca_spmm_cuda(
        a.indptr, a.indices, values, a.warp_row, a.warp_rank, a.row_warps, x, precision, out_dtype
    )


register_format(TCACSR, spmm=tca_spmm)
