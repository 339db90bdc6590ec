"""SpMM and SDDMM as custom ops on a pattern of column vectors, with A^T in their backward.

ME-BCRS and CVSE store A as the same three tensors (row_ptr over windows or strips, col_idx,
vec_mask) and a value layout of R slots per vector (R = 8 for ME-BCRS, V for CVSE), so their
ops share one signature and one autograd formula:

- ``spmm(row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_fp32, *t)``:
  Y = A X, [n_rows, N] in x's dtype (float32 when ``out_fp32``);
- ``sddmm(row_ptr, col_idx, vec_mask, x, y, k, precision, *t)``: (X Y^T) on A's pattern,
  [R * n_vectors] float32 (float64 for float64 inputs);

where k is the format's integer parameter (ME-BCRS's block width, CVSE's V) and
``t = (t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src)`` is A^T in the same format with the
maps of its nonzeros into A^T's and A's value layouts, five Nones when no gradient needs it.
For Y = A X, dvalues = SDDMM(dY, X) on A's pattern and dX = A^T dY; for S = SDDMM(X, Y),
dX = G Y and dY = G^T X with G the gradient on A's pattern. A's values move into A^T's layout
by the slot maps, and A^T's transpose is A with the maps swapped, so double backward works.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ._autograd import op_entry
from ._pattern import transposed_values
from .precision import compute_dtype, kernel_operands

# the ops' signatures (module docstring) in torch.library's schema language
_PATTERN = "Tensor row_ptr, Tensor col_idx, Tensor vec_mask"
_TRANSPOSE = (
    "Tensor? t_row_ptr, Tensor? t_col_idx, Tensor? t_vec_mask, Tensor? t_perm, Tensor? t_src"
)
SPMM_SCHEMA = (
    f"({_PATTERN}, Tensor values, Tensor x, SymInt n_rows, SymInt k, str precision, "
    f"bool out_fp32, {_TRANSPOSE}) -> Tensor"
)
SDDMM_SCHEMA = f"({_PATTERN}, Tensor x, Tensor y, SymInt k, str precision, {_TRANSPOSE}) -> Tensor"


def _spmm_fake(row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_fp32, *t):
    return x.new_empty((n_rows, x.shape[1]), dtype=torch.float32 if out_fp32 else x.dtype)


def _spmm_setup(ctx, inputs, output):
    row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_fp32, *t = inputs
    ctx.save_for_backward(row_ptr, col_idx, vec_mask, values, x, *t)
    ctx.k, ctx.precision = k, precision


def _sddmm_setup(ctx, inputs, output):
    row_ptr, col_idx, vec_mask, x, y, k, precision, *t = inputs
    ctx.save_for_backward(row_ptr, col_idx, vec_mask, x, y, *t)
    ctx.k, ctx.precision = k, precision


class PatternOps:
    """The SpMM and SDDMM custom ops of one format, each registered by its own module
    (``spmm`` and ``sddmm``), whose backwards call each other through the entries kept here.
    ``vector_rows(k)``: R, the slots per vector for the format's parameter k."""

    def __init__(self, vector_rows: Callable[[int], int]):
        self._vector_rows = vector_rows
        self._spmm_name = self._sddmm_name = ""
        self.spmm_call: Callable[..., Tensor] | None = None
        self.sddmm_call: Callable[..., Tensor] | None = None

    def spmm(self, name: str, impl: Callable[..., Tensor]) -> Callable[..., Tensor]:
        """Register ``impl``, taking the arguments of ``SPMM_SCHEMA`` in order, as the custom op
        ``name`` with its fake and autograd kernels; returns the entry the package calls it
        through."""
        op = torch.library.custom_op(name, impl, mutates_args=(), schema=SPMM_SCHEMA)
        op.register_fake(_spmm_fake)
        self._spmm_name = name
        self.spmm_call = op_entry(op, impl, _spmm_setup, self._spmm_backward)
        return self.spmm_call

    def sddmm(self, name: str, impl: Callable[..., Tensor]) -> Callable[..., Tensor]:
        """As ``spmm``, for the SDDMM (``SDDMM_SCHEMA``)."""
        op = torch.library.custom_op(name, impl, mutates_args=(), schema=SDDMM_SCHEMA)

        def fake(row_ptr, col_idx, vec_mask, x, y, k, precision, *t):
            n_slots = self._vector_rows(k) * col_idx.shape[0]
            return x.new_empty((n_slots,), dtype=compute_dtype(x, y))

        op.register_fake(fake)
        self._sddmm_name = name
        self.sddmm_call = op_entry(op, impl, _sddmm_setup, self._sddmm_backward)
        return self.sddmm_call

    def _product(self, ctx, pattern, t, values, dense, like: Tensor) -> Tensor:
        """A @ dense [n_rows, N] for A = (pattern, values) with A^T's tensors ``t``, in the
        dtype of ``like``."""
        fp32 = like.dtype == torch.float32
        out = self.spmm_call(*pattern, values, dense, like.shape[0], ctx.k, ctx.precision, fp32, *t)
        return out.to(like.dtype)

    def _transposed_product(
        self, ctx, pattern, t, values, dense, like: Tensor, op: str, cache: bool = False
    ) -> Tensor:
        """A^T @ dense for A = (pattern, values), A's values moved into A^T's layout (kept for
        as long as ``values`` lives unchanged with ``cache``), in the dtype of ``like``: the
        gradient of SpMM's X or SDDMM's Y (``op``, "spmm" or "sddmm")."""
        t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = t
        if t_row_ptr is None:
            name, operand = (self._spmm_name, "X") if op == "spmm" else (self._sddmm_name, "Y")
            raise RuntimeError(
                f"{name}: the gradient of {operand} needs A^T; call flashgnn.ops.{op}, which "
                "builds it"
            )
        vector = self._vector_rows(ctx.k)
        t_values = transposed_values(values, t_col_idx, t_perm, t_src, cache, vector)
        # A^T's own transpose is A, with the slot maps swapped
        return self._product(ctx, t[:3], (*pattern, t_src, t_perm), t_values, dense, like)

    def _spmm_backward(self, ctx, grad):
        row_ptr, col_idx, vec_mask, values, x, *t = ctx.saved_tensors
        pattern = (row_ptr, col_idx, vec_mask)
        grad_values = grad_x = None
        (grad,) = kernel_operands(ctx.precision, grad)  # converted once for both products
        if ctx.needs_input_grad[3]:
            grad_values = self.sddmm_call(*pattern, grad, x, ctx.k, ctx.precision, *t)
            grad_values = grad_values.to(values.dtype)
        if ctx.needs_input_grad[4]:
            # constant values (GCN's normalised weights) are transposed once and cached
            cache = not ctx.needs_input_grad[3]
            grad_x = self._transposed_product(ctx, pattern, t, values, grad, x, "spmm", cache)
        return (None, None, None, grad_values, grad_x) + (None,) * 9

    def _sddmm_backward(self, ctx, grad):
        row_ptr, col_idx, vec_mask, x, y, *t = ctx.saved_tensors
        pattern = (row_ptr, col_idx, vec_mask)
        grad_x = grad_y = None
        need_x, need_y = ctx.needs_input_grad[3:5]
        # dX reads y, dY reads x; one tensor passed as both (AGNN) is converted once
        yk, xk = kernel_operands(ctx.precision, y if need_x else None, x if need_y else None)
        if need_x:
            grad_x = self._product(ctx, pattern, t, grad, yk, x)
        if need_y:
            grad_y = self._transposed_product(ctx, pattern, t, grad, xk, y, "sddmm")
        return (None, None, None, grad_x, grad_y) + (None,) * 7
