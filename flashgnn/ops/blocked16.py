"""SpMM and SDDMM on the 16x1 baseline format (flashgnn.formats.blocked16), reached through
``flashgnn.ops.spmm`` / ``sddmm``.

Forward only: the format exists to measure the design ME-BCRS improves on. On the CPU, and
for float64 inputs, the vectorised reference (inputs rounded to the precision, fp32
accumulation); on CUDA the tensor-core kernels of kernels/blocked16.cu (fp16 and bf16).
``flashgnn.ops.dispatch`` validates shapes, dtypes and devices first.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda.blocked16 import sddmm16_cuda, spmm16_cuda
from ..formats.blocked16 import Blocked16
from ._pattern import check_values
from .dispatch import register_format
from .precision import on_kernels
from .reference import sddmm_on_coords, spmm_on_coords

_KERNEL_PRECISIONS = ("fp16", "bf16")


def _forward_only(op: str, *tensors: Tensor) -> None:
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise RuntimeError(
            f"{op} on the 16x1 format is a forward-only benchmark baseline with no gradients: "
            "train on ME-BCRS (vector=8), or call it under torch.no_grad()"
        )


def _on_kernels(precision: str, *tensors: Tensor) -> bool:
    """True when the CUDA kernels compute the op; a clear error for precisions they lack."""
    if not on_kernels(*tensors):
        return False
    if precision not in _KERNEL_PRECISIONS:
        raise ValueError(
            f"the 16x1 baseline has CUDA kernels for fp16 and bf16 only, got precision "
            f"{precision!r}"
        )
    return True


def spmm16(
    a: Blocked16, x: Tensor, precision: str, *, values: Tensor | None, out_fp32: bool
) -> Tensor:
    """Y = A @ X; values [128 * n_blocks] (slots outside the pattern are ignored), x [n_cols, N].
    Returns [n_rows, N] in x's dtype, or float32 when ``out_fp32``."""
    values = a.values if values is None else values
    check_values("values", values, a)
    _forward_only("spmm", values, x)
    if not _on_kernels(precision, values, x):
        y = spmm_on_coords(a.slot_coords(), values, x, a.n_rows, precision, out_fp32)
        return y.to(torch.float32 if out_fp32 else x.dtype)
    if values is not a.values:  # the kernel multiplies every slot: zero what is not a nonzero
        values = torch.where(a.real_slots(), values, values.new_zeros(()))
    return spmm16_cuda(
        a.row_ptr, a.col_idx, values, x, a.n_rows, precision, torch.float32 if out_fp32 else x.dtype
    )


def sddmm16(a: Blocked16, x: Tensor, y: Tensor, precision: str) -> Tensor:
    """(x @ y^T) on A's pattern in its value layout [128 * n_blocks], float32 (float64 for
    float64 inputs); x [n_rows, K], y [n_cols, K]. Slots outside the pattern are 0."""
    _forward_only("sddmm", x, y)
    if not _on_kernels(precision, x, y):
        return sddmm_on_coords(a.slot_coords(), a.n_slots, x, y, precision)
    return sddmm16_cuda(a.row_ptr, a.col_idx, a.vec_mask, x, y, precision)


register_format(Blocked16, spmm=spmm16, sddmm=sddmm16)
