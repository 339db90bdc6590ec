"""AGNN's attention forward in one pass (FlashAttention-2 style): out = softmax(beta * cos) @ X
on A's pattern without an edge-sized tensor, keeping per row only the softmax's max and sum.

The switch: ``flashgnn.ops.agnn_propagate`` takes this path when ``ONE_PASS`` is True, or, while
it is None, when the environment sets FLASHGNN_AGNN_ONE_PASS=1 (off by default: it keeps no
edge-sized tensor, but the three tensor-core kernels are faster; docs/TUNING.md). On CUDA the
forward is one kernel per window segment (kernels/agnn_one_pass.cu); elsewhere (and for float64)
``one_pass_reference`` runs the same algorithm in torch: an online softmax over blocks of each
row's nonzeros, the maxima and sums rescaled block after block. The backward recomputes the
scores (nothing of the forward's is stored per edge): ``probabilities`` gives P again.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from .._cuda.agnn_one_pass import agnn_one_pass_cuda
from .edge_softmax import scaled_edge_softmax
from .precision import compute_dtype, round_to_precision
from .reference import _coords

ONE_PASS: bool | None = None  # None: FLASHGNN_AGNN_ONE_PASS decides
ENV = "FLASHGNN_AGNN_ONE_PASS"
BLOCK = 32  # nonzeros of a row per step of the reference's online softmax (a warp's vectors)


def one_pass_enabled() -> bool:
    """Whether ``agnn_propagate`` takes the one-pass path."""
    return os.environ.get(ENV, "0") == "1" if ONE_PASS is None else ONE_PASS


def one_pass_attention(
    pattern: tuple,
    unit_dst: Tensor,
    unit: Tensor,
    x: Tensor,
    beta: Tensor,
    n_rows: int,
    k: int,
    precision: str,
    out_dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor]:
    """(out [n_rows, F] in ``out_dtype``, row max, row sum of exp(s - max)), s_ij = beta *
    unit_dst_i . unit_j on the pattern (row_ptr, col_idx, vec_mask), out_i = sum_j softmax_j(s)
    x_j. unit_dst [n_rows, F], unit and x [n_cols, F] as the kernels of ``precision`` read them
    (``agnn._normalize``), beta [1]. The statistics are fp32 (float64 for float64 inputs)
    [n_rows]; a row without a nonzero has max -inf, sum 0 and output 0."""
    if x.is_cuda and torch.float64 not in (x.dtype, unit.dtype, beta.dtype):
        return agnn_one_pass_cuda(
            *pattern, unit_dst, unit, x, beta.to(torch.float32), n_rows, precision, out_dtype
        )
    out, row_max, row_sum = one_pass_reference(
        *pattern, unit_dst, unit, x, beta, n_rows, k, precision
    )
    return out.to(out_dtype), row_max, row_sum


def _row_order(row_ptr, col_idx, vec_mask, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """(row, column, place among its row's nonzeros) of every nonzero, in CSR order."""
    c = _coords(row_ptr, col_idx, vec_mask, k)
    order = torch.argsort(c.row * (int(col_idx.max()) + 1 if col_idx.numel() else 1) + c.col)
    row, col = c.row[order], c.col[order]
    starts = torch.zeros(row.numel(), dtype=torch.int64, device=row.device)
    if row.numel():
        first = torch.ones_like(row, dtype=torch.bool)
        first[1:] = row[1:] != row[:-1]
        starts = torch.cummax(
            torch.where(first, torch.arange(row.numel(), device=row.device), 0), 0
        ).values
    return row, col, torch.arange(row.numel(), device=row.device) - starts


def one_pass_reference(
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    unit_dst: Tensor,
    unit: Tensor,
    x: Tensor,
    beta: Tensor,
    n_rows: int,
    k: int,
    precision: str,
    block: int = BLOCK,
) -> tuple[Tensor, Tensor, Tensor]:
    """The one-pass algorithm in torch: (out [n_rows, F], row max [n_rows], row sum [n_rows]) in
    the compute dtype (float64 for float64 inputs, else float32). Each row's nonzeros go by in
    column order, ``block`` at a time: the block's scores (operands rounded to ``precision``),
    the new row max, the sum and accumulator rescaled by exp(old max - new max), then the
    block's exp(s - max) added to the sum and, times X's rows, to the accumulator."""
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    dtype = compute_dtype(unit_dst, unit, x, beta)
    ur = round_to_precision(unit_dst, precision, dtype)
    uc = round_to_precision(unit, precision, dtype)
    xr = round_to_precision(x, precision, dtype)
    scale = beta.to(dtype)
    row, col, place = _row_order(row_ptr, col_idx, vec_mask, k)
    row_max = torch.full((n_rows,), float("-inf"), dtype=dtype, device=x.device)
    row_sum = torch.zeros(n_rows, dtype=dtype, device=x.device)
    acc = torch.zeros(n_rows, x.shape[1], dtype=dtype, device=x.device)
    n_blocks = -(-(int(place.max()) + 1) // block) if place.numel() else 0
    for b in range(n_blocks):
        here = (place >= b * block) & (place < (b + 1) * block)
        r, c = row[here], col[here]
        s = scale * (ur[r] * uc[c]).sum(1)
        new_max = row_max.scatter_reduce(0, r, s, "amax")
        factor = torch.where(new_max == row_max, 1.0, torch.exp(row_max - new_max)).to(dtype)
        p = torch.exp(s - new_max[r])
        row_sum = (row_sum * factor).index_add_(0, r, p)
        acc = (acc * factor[:, None]).index_add_(0, r, p[:, None] * xr[c])
        row_max = new_max
    out = torch.where(row_sum[:, None] > 0, acc / row_sum[:, None], 0.0).to(dtype)
    return out, row_max, row_sum


def probabilities(
    pattern: tuple,
    cos: Tensor,
    beta: Tensor,
    row_max: Tensor,
    row_sum: Tensor,
    n_rows: int,
    k: int,
) -> Tensor:
    """P in A's value layout [8 * n_vectors] from the recomputed cosines ``cos`` (the value
    layout): on the CPU exp(beta * cos - max_i) / sum_i from the forward's row statistics; on
    CUDA the edge softmax kernels, which compute the statistics again."""
    if cos.is_cuda and torch.float64 not in (cos.dtype, beta.dtype):
        return scaled_edge_softmax(*pattern, cos, beta, n_rows, k)
    c = _coords(*pattern, k)
    dtype = compute_dtype(cos, beta, row_max)
    prob = torch.zeros(cos.numel(), dtype=dtype, device=cos.device)
    s = beta.to(dtype) * cos[c.slot].to(dtype)
    prob[c.slot] = torch.exp(s - row_max[c.row].to(dtype)) / row_sum[c.row].to(dtype)
    return prob
