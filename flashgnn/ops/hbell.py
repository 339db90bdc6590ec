"""SpMM on HB-ELL (flashgnn.formats.HBELL), registered with ``flashgnn.ops.dispatch``. The paper
defines no SDDMM, so HB-ELL has none.

The reference computes on the real slots' coordinates (inputs rounded to the precision, fp32
accumulation; float64 kept), in plain differentiable torch, on any device: it serves the CPU,
float64 and every call that needs gradients. Other CUDA calls run the emulation of HB-ELL's
hybrid hardware: the sparse (ELL) blocks' nonzeros as an ME-BCRS matrix on the 8x1 kernels
(fp32 partial sums), then the dense blocks on dense MMAs (kernels/hbell.cu), which add the two.
What the emulation needs is built once per value tensor and cached: the dense blocks of each
block row, and the ME-BCRS of the sparse blocks per block width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .._cuda.hbell import spmm_dense_cuda
from ..formats.hbell import BLOCK, HBELL
from ..formats.mebcrs import MEBCRS
from ..formats.slot_layout import csr_order
from ..tensor_cache import TensorCache, built_for_reuse
from ._pattern import check_values
from .dispatch import register_format, spmm
from .precision import on_kernels
from .reference import spmm_on_coords

_PLANS = TensorCache()  # HBELL.values -> _Plan


@dataclass
class _Plan:
    """The emulation's operands of one HB-ELL matrix: dense_ptr int64 [n_brows + 1], dense_col
    int32 [n_dense], dense_val int64 [n_dense] (the dense blocks of each block row: first column,
    first value), dense_padding int64: the slots of dense blocks outside the pattern (their
    MMAs read them, so a caller's values there are zeroed first); the sparse blocks' nonzeros
    in CSR order (indptr, indices) and their value slots ``sparse_slot`` int64; ``sparse``:
    their ME-BCRS per block width k, built on demand."""

    dense_ptr: Tensor
    dense_col: Tensor
    dense_val: Tensor
    dense_padding: Tensor
    indptr: Tensor
    indices: Tensor
    sparse_slot: Tensor
    sparse: dict[int, MEBCRS] = field(default_factory=dict)

    @property
    def n_dense(self) -> int:
        return self.dense_col.numel()

    @property
    def n_sparse(self) -> int:
        return self.sparse_slot.numel()


def _plan(a: HBELL) -> _Plan:
    hit = _PLANS.get(a.values)
    if hit is None:
        hit = _PLANS.set(a.values, built_for_reuse(lambda: _build_plan(a)))
    return hit


def _build_plan(a: HBELL) -> _Plan:
    device = a.device
    dense = a.dense
    (ids,) = torch.nonzero(dense, as_tuple=True)
    per_brow = torch.bincount(a.bridx[ids].to(torch.int64) // BLOCK, minlength=a.n_brows)
    dense_ptr = torch.zeros(a.n_brows + 1, dtype=torch.int64, device=device)
    dense_ptr[1:] = torch.cumsum(per_brow, 0)

    c = a.slot_coords()
    block = torch.searchsorted(a.brow_valptr, c.slot, right=True) - 1
    in_sparse = ~dense[block]
    row, col, slot = c.row[in_sparse], c.col[in_sparse], c.slot[in_sparse]
    indptr, order = csr_order(row, col, a.n_rows, a.n_cols)
    dense_slots = (a.brow_valptr[ids][:, None] + torch.arange(BLOCK * BLOCK, device=device)).ravel()
    dense_padding = dense_slots[~torch.isin(dense_slots, c.slot)]
    return _Plan(
        dense_ptr,
        a.bcidx[ids].contiguous(),
        a.brow_valptr[ids].contiguous(),
        dense_padding,
        indptr,
        col[order],
        slot[order],
    )


def _sparse_part(a: HBELL, plan: _Plan, k: int) -> MEBCRS:
    fmt = plan.sparse.get(k)
    if fmt is None:
        fmt = built_for_reuse(
            lambda: MEBCRS.from_csr(
                plan.indptr,
                plan.indices,
                a.values[plan.sparse_slot],
                n_cols=a.n_cols,
                k=k,
                device=a.device,
            )
        )
        plan.sparse[k] = fmt
    return fmt


def hbell_spmm(a: HBELL, x: Tensor, precision: str, *, values: Tensor | None, out_fp32: bool):
    """Y = A @ X: values [n_slots] (the value layout; slots outside the pattern ignored), x
    [n_cols, N]; [n_rows, N] in x's dtype, or float32 when ``out_fp32``. Differentiable in
    values and x (through the reference)."""
    values = a.values if values is None else values
    check_values("values", values, a)
    needs_grad = torch.is_grad_enabled() and (values.requires_grad or x.requires_grad)
    if not on_kernels(values, x) or needs_grad:
        return spmm_on_coords(a.slot_coords(), values, x, a.n_rows, precision, out_fp32)
    out_dtype = torch.float32 if out_fp32 else x.dtype
    plan = _plan(a)
    base = None
    if plan.n_sparse:
        sparse = _sparse_part(a, plan, 4 if precision == "tf32" else 8)  # m16n8k4 for tf32
        own = None if values is a.values else sparse.values_from_csr(values[plan.sparse_slot])
        if not plan.n_dense:
            return spmm(sparse, x, precision, values=own, out_fp32=out_fp32)
        base = spmm(sparse, x, precision, values=own, out_fp32=True)
    if values is not a.values and plan.dense_padding.numel():
        values = values.index_fill(0, plan.dense_padding, 0)
    y = spmm_dense_cuda(
        plan.dense_ptr,
        plan.dense_col,
        plan.dense_val,
        values,
        x,
        base,
        a.n_rows,
        precision,
        out_dtype,
    )
    return y if y.dtype == out_dtype else y.to(out_dtype)


register_format(HBELL, spmm=hbell_spmm)
