"""Launcher of kernels/sample_neighbors.cu: the in-edges a mini-batch hop keeps, drawn on the
GPU."""

from __future__ import annotations

import torch

from .runtime import launch, ptr, stride_blocks
from .sources import register

SOURCE = register("sample_neighbors.cu", ["fg::sample_in_edges"])
MAX_FANOUT = 64  # kernels/sample_neighbors.cu: MAX_FANOUT
_THREADS = 128


def sample_in_edges_cuda(
    indptr: torch.Tensor, dst: torch.Tensor, kept_end: torch.Tensor, n_kept: int, seed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, pos) int64 [n_kept]: for destination i (node ``dst[i]`` of the CSR ``indptr``), its
    kept in-edges' CSR positions ``pos`` and ``row`` = i, from ``kept_end[i - 1]`` (0) to
    ``kept_end[i]`` (the inclusive prefix sum of min(in-degree, fanout), fanout <= MAX_FANOUT), a
    uniform random subset of its in-edges. seed: int64 [1] on the device. All int64 on one GPU."""
    device = dst.device
    row = torch.empty(n_kept, dtype=torch.int64, device=device)
    pos = torch.empty(n_kept, dtype=torch.int64, device=device)
    if dst.numel():
        launch(
            SOURCE,
            "fg::sample_in_edges",
            device,
            stride_blocks(dst.numel(), _THREADS),
            (_THREADS,),
            ptr(indptr),
            ptr(dst),
            ptr(kept_end),
            dst.numel(),
            ptr(seed),
            ptr(row),
            ptr(pos),
        )
    return row, pos
