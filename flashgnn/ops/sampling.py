"""The in-edges a mini-batch hop keeps: for each destination a uniform random subset of
min(fanout, in-degree) of its in-edges, without replacement. On CUDA for fanouts up to
MAX_FANOUT one kernel (``kernels/sample_neighbors.cu``); otherwise torch."""

from __future__ import annotations

import torch

from .._cuda.sample_neighbors import MAX_FANOUT, sample_in_edges_cuda


def sample_in_edges(
    indptr: torch.Tensor,
    dst: torch.Tensor,
    start: torch.Tensor,
    degree: torch.Tensor,
    kept_end: torch.Tensor,
    total: int,
    n_kept: int,
    fanout: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, pos) int64 [n_kept], grouped by row: the kept in-edges of destination i (node
    ``dst[i]`` of the CSR ``indptr``) at CSR positions ``pos`` with ``row`` = i.

    start, degree: int64 [len(dst)], each destination's first CSR position and in-degree;
    kept_end: the inclusive prefix sum of the kept counts, min(degree, fanout) (all of them
    for fanout -1); total: sum(degree); n_kept: kept_end[-1]. All on the device of ``indptr``;
    ``generator`` (on that device) makes a draw reproducible."""
    device = dst.device
    if device.type == "cuda" and 1 <= fanout <= MAX_FANOUT:
        seed = torch.randint(0, 1 << 62, (1,), device=device, generator=generator)
        return sample_in_edges_cuda(indptr, dst, kept_end, n_kept, seed)
    return _sample_in_edges(start, degree, total, n_kept, fanout, generator)


def _sample_in_edges(start, degree, total: int, n_kept: int, fanout: int, generator):
    """(row, pos) of the kept in-edges, grouped by destination row (torch: every in-edge gets a
    random key, one sort by (row, key), the first ``fanout`` of each row kept)."""
    device = start.device
    rows = torch.arange(degree.numel(), device=device)
    row = torch.repeat_interleave(rows, degree, output_size=total)
    row_first = torch.cumsum(degree, 0) - degree
    pos = torch.arange(total, device=device) - row_first[row] + start[row]
    if n_kept == total:
        return row, pos
    key = (row << 31) | torch.randint(0, 1 << 31, (total,), device=device, generator=generator)
    key, order = torch.sort(key)
    rank = torch.arange(total, device=device) - row_first[key >> 31]
    chosen = order[torch.nonzero_static(rank < fanout, size=n_kept).flatten()]
    return row[chosen], pos[chosen]
