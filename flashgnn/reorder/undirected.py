"""The undirected pattern an ordering works on: A + A^T without self-loops, as a CSR."""

from __future__ import annotations

import torch


def csr_rows(indptr: torch.Tensor, nnz: int) -> torch.Tensor:
    """The row of every CSR position, int64 [nnz] (no host synchronisation)."""
    n = indptr.numel() - 1
    return torch.repeat_interleave(
        torch.arange(n, device=indptr.device), indptr[1:] - indptr[:-1], output_size=nnz
    )


def undirected(indptr: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR (int64 [n + 1], int64 [m]) of the pattern of A + A^T without its diagonal, each
    row sorted and duplicate-free, of a square CSR (indptr int64 [n + 1], indices [nnz]): node u
    neighbours v when an edge joins them either way."""
    n = indptr.numel() - 1
    rows = csr_rows(indptr, indices.numel())
    cols = indices.to(torch.int64)
    off_diagonal = rows != cols
    rows, cols = rows[off_diagonal], cols[off_diagonal]
    keys = torch.unique(torch.cat([rows * n + cols, cols * n + rows]))  # sorted
    starts = torch.searchsorted(keys, torch.arange(n + 1, device=keys.device) * n)
    return starts, keys - torch.div(keys, n, rounding_mode="floor") * n


def within_groups(
    indptr: torch.Tensor, indices: torch.Tensor, group: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR of the edges of (indptr, indices) whose two ends share a group (``group``: int64
    [n], a label per node), rows still sorted."""
    rows = csr_rows(indptr, indices.numel())
    keep = group[rows] == group[indices]
    counts = torch.zeros(indptr.numel() - 1, dtype=torch.int64, device=indptr.device)
    counts.index_add_(0, rows[keep], torch.ones_like(rows[keep]))
    starts = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return starts, indices[keep]
