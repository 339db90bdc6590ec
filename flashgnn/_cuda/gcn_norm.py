"""Launcher of kernels/gcn_norm.cu: a graph's normalised GCN values in A's value layout."""

from __future__ import annotations

import torch

from .runtime import launch, ptr, stride_blocks
from .sources import register

SOURCE = register("gcn_norm.cu", ["fg::count_sources", "fg::gcn_values"])
# norm -> (power of the in-degree, of the out-degree): 0 none, 1 ^(-1/2), 2 ^-1
_POWERS = {"both": (1, 1), "right": (2, 0), "left": (0, 2), "none": (0, 0)}
_THREADS = 256


def gcn_values_cuda(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    n_src: int,
    slot: torch.Tensor,
    n_slots: int,
    norm: str,
    weight: torch.Tensor | None,
) -> torch.Tensor:
    """float32 [n_slots]: slot[e] of each CSR nonzero e holds its normalised value (degrees of
    the CSR: in-degrees of rows, out-degrees of the ``n_src`` columns, clamped to >= 1), times
    ``weight[e]`` (float32 [nnz] in CSR order) when given; the other slots 0. indptr, indices,
    slot: int64 on one GPU."""
    device = indices.device
    power_in, power_out = _POWERS[norm]
    nnz = indices.numel()
    out = torch.zeros(n_slots, dtype=torch.float32, device=device)
    if not nnz:
        return out
    blocks = stride_blocks(nnz, _THREADS)
    out_degree = torch.zeros(n_src if power_out else 1, dtype=torch.int32, device=device)
    if power_out:
        launch(
            SOURCE,
            "fg::count_sources",
            device,
            blocks,
            (_THREADS,),
            ptr(indices),
            nnz,
            ptr(out_degree),
        )
    launch(
        SOURCE,
        "fg::gcn_values",
        device,
        blocks,
        (_THREADS,),
        ptr(indptr),
        ptr(indices),
        ptr(out_degree),
        ptr(slot),
        0 if weight is None else ptr(weight),
        indptr.numel() - 1,
        nnz,
        power_in,
        power_out,
        ptr(out),
    )
    return out
