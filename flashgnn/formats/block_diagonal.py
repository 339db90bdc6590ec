"""diag(A, ..., A): copies of one ME-BCRS pattern along the diagonal, so that an op with one
sparse matrix per attention head (same pattern, values per head) is one launch over all heads.

Each copy is padded to whole windows, [R, C] with R, C = n_rows, n_cols rounded up to
multiples of 8, so copy h holds rows h * R + i and columns h * C + j, and the windows of
every copy are A's windows. The value layout of the result is the copies' layouts one after
the other: values [copies, 8 * n_vectors(A)] flattened, slot s of copy h at h * 8 * n_vectors + s.
Dense operands are head-major: [copies * C, F], rows h * C .. h * C + n_cols - 1 for head h
(the padding rows are never read by a product, and come out 0)."""

from __future__ import annotations

import numbers

import torch

from .mebcrs import MEBCRS, WINDOW, Transpose
from .windowed import MAX_DIM


def padded(n: int) -> int:
    """``n`` rounded up to whole windows."""
    return -(-n // WINDOW) * WINDOW


def block_diagonal(a: MEBCRS, copies: int, with_values: bool = True) -> MEBCRS:
    """diag(A, ..., A) with ``copies`` blocks of [padded(n_rows), padded(n_cols)], values A's
    repeated; its A^T (diag(A^T, ...)) is set from A's, which is built if need be. Without
    values, the pattern only: every value 0, held by a stride-0 tensor (no memory), for ops
    given their own values (multi-head attention: on a 60M-edge graph with 4 heads the
    copies' values of A and A^T would take 15 GB)."""
    if isinstance(copies, bool) or not isinstance(copies, numbers.Integral):
        raise ValueError(f"copies must be an integer, got {type(copies).__name__}")
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    copies = int(copies)
    rows, cols = padded(a.n_rows), padded(a.n_cols)
    if copies * max(rows, cols) > MAX_DIM:
        raise ValueError(
            f"{copies} copies of a {a.n_rows} x {a.n_cols} matrix overflow the int32 column "
            "indices of ME-BCRS"
        )
    t = a.transpose()
    out = _repeat(a, copies, rows, cols, with_values)
    shift = torch.arange(copies, device=a.device)[:, None] * a.n_slots
    out._transpose = Transpose(
        _repeat(t.fmt, copies, cols, rows, with_values),
        (t.src_slot[None, :] + shift).flatten(),
        _repeat_indptr(t.indptr, copies, cols),
    )
    return out


def _repeat_indptr(indptr: torch.Tensor, copies: int, rows: int) -> torch.Tensor:
    """CSR row pointers of ``copies`` copies of a matrix along the diagonal, each padded to
    ``rows`` rows (the padding rows empty)."""
    nnz = indptr[-1:]
    one = torch.cat([indptr[:-1], nnz.expand(rows - indptr.numel() + 1)])  # [rows]
    copy = torch.arange(copies, device=indptr.device)[:, None]
    return torch.cat([(one[None, :] + copy * nnz).flatten(), copies * nnz])


def _repeat(a: MEBCRS, copies: int, rows: int, cols: int, with_values: bool) -> MEBCRS:
    copy = torch.arange(copies, device=a.device)[:, None]
    row_ptr = (a.row_ptr[None, :-1] + copy * a.n_vectors).flatten()
    return MEBCRS(
        row_ptr=torch.cat([row_ptr, row_ptr.new_full((1,), copies * a.n_vectors)]),
        col_idx=(a.col_idx[None, :] + (copy * cols).to(torch.int32)).flatten(),
        values=a.values.repeat(copies)
        if with_values
        else a.values.new_zeros(()).expand(copies * a.n_slots),
        perm=(a.perm[None, :] + copy * a.n_slots).flatten(),
        vec_mask=a.vec_mask.repeat(copies),
        n_rows=copies * rows,
        n_cols=copies * cols,
        k=a.k,
    )


def head_major(t: torch.Tensor, rows: int) -> torch.Tensor:
    """[N, heads, F] -> [heads * rows, F], head h in rows h * rows .. h * rows + N - 1 (the
    rest 0): a dense operand of a ``block_diagonal`` matrix whose blocks have ``rows`` rows
    or columns."""
    per_head = t.transpose(0, 1)
    return torch.nn.functional.pad(per_head, (0, 0, 0, rows - t.shape[0])).reshape(-1, t.shape[2])


def node_major(t: torch.Tensor, heads: int, n: int) -> torch.Tensor:
    """[heads * rows, F] (a ``block_diagonal`` product) -> [n, heads, F], the padding rows
    dropped."""
    return t.view(heads, -1, t.shape[1])[:, :n].transpose(0, 1)
