"""CSR -> ME-BCRS on the GPU."""
from __future__ import annotations

import numpy as np
import torch

from .runtime import launch, ptr
from .sources import register

SOURCE = register("mebcrs_build.cu", ["scatter_values<float>", "scatter_values<double>"])
_TYPE = {torch.float32: "float", torch.float64: "double"}


def scatter_values(values: torch.Tensor, perm: torch.Tensor, n_slots: int) -> torch.Tensor:
    """out[perm[i]] = values[i] in a zero-filled [n_slots] tensor, on the GPU."""
    out = torch.zeros(n_slots, dtype=values.dtype, device=values.device)
    if values.dtype not in _TYPE:
        return out.index_copy_(0, perm, values)
    nnz = values.numel()
    if nnz:
        launch(SOURCE, f"scatter_values<{_TYPE[values.dtype]}>", values.device,
               (min((nnz + 255) // 256, 65535),), (256,),
               ptr(values.contiguous()), ptr(perm), ptr(out), np.int64(nnz))
    return out


def build_mebcrs_cuda(indptr, indices, values, n_cols: int, k: int, device: torch.device):
    """ME-BCRS of a CSR matrix, built on ``device``; the same arrays as the CPU reference."""
    from ..format import MEBCRS, WINDOW, build_pattern

    row_ptr, col_idx, perm, vec_mask = build_pattern(indptr.to(device), indices.to(device), n_cols, k)
    out = scatter_values(values.to(device), perm, WINDOW * col_idx.numel())
    return MEBCRS(row_ptr, col_idx, out, perm, vec_mask, indptr.numel() - 1, n_cols, k)
