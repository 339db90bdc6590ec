"""SpMM and SDDMM on CVSE (flashgnn.formats.CVSE), registered with ``flashgnn.ops.dispatch``.

The reference computes on the real slots' coordinates (inputs rounded to the precision, fp32
accumulation; float64 kept), in plain differentiable torch, on any device.
"""

from __future__ import annotations

from torch import Tensor

from ..formats.cvse import CVSE
from ._pattern import check_values
from .dispatch import register_format
from .reference import sddmm_on_coords, spmm_on_coords


def cvse_spmm(a: CVSE, x: Tensor, precision: str, *, values: Tensor | None, out_fp32: bool):
    """Y = A @ X: values [V * n_vectors] (slots outside the pattern ignored), x [n_cols, N];
    [n_rows, N] in x's dtype, or float32 when ``out_fp32``. Differentiable in values and x."""
    values = a.values if values is None else values
    check_values("values", values, a)
    return spmm_on_coords(a.slot_coords(), values, x, a.n_rows, precision, out_fp32)


def cvse_sddmm(a: CVSE, x: Tensor, y: Tensor, precision: str) -> Tensor:
    """(x @ y^T) on A's pattern, [V * n_vectors] float32 (float64 for float64 inputs); x
    [n_rows, K], y [n_cols, K]. Differentiable in x and y."""
    return sddmm_on_coords(a.slot_coords(), a.n_slots, x, y, precision)


register_format(CVSE, spmm=cvse_spmm, sddmm=cvse_sddmm)
