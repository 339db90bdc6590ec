"""One entry point per sparse product for every format: ``spmm(a, x)`` and ``sddmm(a, x, y)``
look up the implementation that ``a``'s format module registered (its CPU reference, CUDA
kernels and autograd), after the checks that hold for every format."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from ._pattern import check_dense
from .precision import check_precision

SpmmImpl = Callable[..., Tensor]
"""``impl(a, x, precision, *, values, out_fp32) -> Tensor [a.n_rows, N]``, x [a.n_cols, N]
already checked (a float tensor on a's device)."""
SddmmImpl = Callable[..., Tensor]
"""``impl(a, x, y, precision) -> Tensor``, the products on a's pattern in its value layout;
x [a.n_rows, K] and y [a.n_cols, K] already checked."""

_SPMM: dict[type, SpmmImpl] = {}
_SDDMM: dict[type, SddmmImpl] = {}


def register_format(
    fmt: type, *, spmm: SpmmImpl | None = None, sddmm: SddmmImpl | None = None
) -> None:
    """Make ``spmm`` / ``sddmm`` serve matrices of type ``fmt`` (and its subclasses)."""
    if spmm is not None:
        _SPMM[fmt] = spmm
    if sddmm is not None:
        _SDDMM[fmt] = sddmm


def _implementation(table: dict[type, Callable], op: str, a) -> Callable:
    impl = table.get(type(a))  # the registered type itself: one lookup on every eager call
    if impl is not None:
        return impl
    for cls in type(a).__mro__:
        impl = table.get(cls)
        if impl is not None:
            return impl
    served = ", ".join(sorted(cls.__name__ for cls in table)) or "none"
    raise TypeError(f"{op} has no implementation for {type(a).__name__} (formats served: {served})")


def spmm(
    a, x: Tensor, precision: str = "fp32", *, values: Tensor | None = None, out_fp32: bool = False
) -> Tensor:
    """Y = A @ X for A in any registered format (``flashgnn.formats``).

    a: a sparse matrix [n_rows, n_cols]; x: [n_cols, N] float16/bfloat16/float32/float64 on a's
    device; values: A's values in the format's value layout to use instead of ``a.values``
    (differentiable where the format has a backward). Returns [n_rows, N] in x's dtype, or
    float32 when ``out_fp32``. Inputs are rounded to ``precision``'s storage type
    (``flashgnn.ops.PRECISIONS``); products accumulate in fp32.
    """
    impl = _implementation(_SPMM, "spmm", a)
    check_precision(precision)
    check_dense("x", x, a.n_cols, a.device)
    return impl(a, x, precision, values=values, out_fp32=out_fp32)


def sddmm(a, x: Tensor, y: Tensor, precision: str = "fp32") -> Tensor:
    """out[slot(i, j)] = x[i] . y[j] for every nonzero (i, j) of A, in A's value layout (other
    slots 0), for A in any registered format.

    a: [n_rows, n_cols]; x: [n_rows, K]; y: [n_cols, K], float16/bfloat16/float32/float64.
    Returns float32 (float64 for float64 inputs). A's values are not used.
    """
    impl = _implementation(_SDDMM, "sddmm", a)
    check_precision(precision)
    check_dense("x", x, a.n_rows, a.device)
    check_dense("y", y, a.n_cols, a.device)
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"x and y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}"
        )
    return impl(a, x, y, precision)
