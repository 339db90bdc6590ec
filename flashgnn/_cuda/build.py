"""CSR -> ME-BCRS on the GPU (kernels/mebcrs_build.cu explains the algorithm)."""

from __future__ import annotations

import torch

from .move_values import move_values_cuda
from .runtime import launch, ptr, require_device, stride_blocks
from .segments import remember_totals, segment_totals_cuda
from .sources import register

SOURCE = register("mebcrs_build.cu", ["fg::mark_first", "fg::window_starts", "fg::place_nonzeros"])
_THREADS = 256
_TILE = 256 * 4  # nonzeros per block of mark_first / place_nonzeros (BUILD_TILE)


def build_pattern_cuda(indptr: torch.Tensor, indices: torch.Tensor, k: int):
    """(row_ptr int64, col_idx int32, perm int64, vec_mask uint8) of a canonical CSR pattern
    (indptr int64 [n_rows + 1], indices int64 [nnz], both on one GPU): the arrays of
    flashgnn.formats.mebcrs.build_pattern. One host synchronisation, for n_vectors and the segment
    totals."""
    device = indices.device
    n_rows, nnz = indptr.numel() - 1, indices.numel()
    n_windows = (n_rows + 7) // 8
    offs = torch.zeros(nnz + 1, dtype=torch.int64, device=device)
    if nnz:
        first = torch.empty(nnz, dtype=torch.uint8, device=device)
        blocks = ((nnz + _TILE - 1) // _TILE,)
        launch(
            SOURCE,
            "fg::mark_first",
            device,
            blocks,
            (_THREADS,),
            ptr(indptr),
            ptr(indices),
            ptr(first),
            n_rows,
            nnz,
        )
        torch.cumsum(first, 0, dtype=torch.int64, out=offs[1:])
    row_ptr = torch.empty(n_windows + 1, dtype=torch.int64, device=device)
    launch(
        SOURCE,
        "fg::window_starts",
        device,
        stride_blocks(n_windows + 1, _THREADS),
        (_THREADS,),
        ptr(indptr),
        ptr(offs),
        n_rows,
        n_windows,
        ptr(row_ptr),
    )
    totals = segment_totals_cuda(
        row_ptr
    )  # read with n_vectors, so segments need no read of their own
    n_vectors, *counts = torch.cat([row_ptr[-1:], totals]).tolist()
    remember_totals(row_ptr, counts)
    col_idx = torch.empty(n_vectors, dtype=torch.int32, device=device)
    vec_mask = torch.empty(n_vectors, dtype=torch.uint8, device=device)
    perm = torch.empty(nnz, dtype=torch.int64, device=device)
    if nnz:
        launch(
            SOURCE,
            "fg::place_nonzeros",
            device,
            blocks,
            (_THREADS,),
            ptr(indptr),
            ptr(indices),
            ptr(offs),
            ptr(col_idx),
            ptr(vec_mask),
            ptr(perm),
            n_rows,
            nnz,
            k.bit_length() - 1,
        )
    return row_ptr, col_idx, perm, vec_mask


def build_mebcrs_cuda(indptr, indices, values, n_cols: int, k: int, device: torch.device):
    """(row_ptr, col_idx, values, perm, vec_mask) of the ME-BCRS of a canonical CSR matrix,
    built on ``device``: the arrays of the CPU reference (flashgnn.formats.mebcrs.build_reference).
    indptr, indices: int64 (any device); values: float [nnz]; n_cols is the reference's (its
    sort key needs it), not read here."""
    require_device(device)
    indptr = indptr.to(device=device, dtype=torch.int64).contiguous()
    indices = indices.to(device=device, dtype=torch.int64).contiguous()
    row_ptr, col_idx, perm, vec_mask = build_pattern_cuda(indptr, indices, k)
    values = values.to(device)
    out = move_values_cuda(values, None, perm, values.new_zeros(8 * col_idx.numel()))
    return row_ptr, col_idx, out, perm, vec_mask
