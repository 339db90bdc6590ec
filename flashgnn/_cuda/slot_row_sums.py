"""Launcher of kernels/slot_row_sums.cu: row sums of values kept in a value layout, in CSR order."""

from __future__ import annotations

import torch

from .runtime import launch, ptr
from .sources import register

SOURCE = register("slot_row_sums.cu", ["fg::slot_row_sums"])
_WARPS = 8  # per block, one row each


def slot_row_sums_cuda(
    indptr: torch.Tensor, slot: torch.Tensor, values: torch.Tensor
) -> torch.Tensor:
    """out[r] = sum of values[slot[e]] over e in [indptr[r], indptr[r + 1]) on the GPU.

    indptr int64 [n_rows + 1] and slot int64 [nnz] (in range: the formats guarantee it), values
    float32 (any length the slots index), all on one CUDA device. Returns float32 [n_rows]."""
    if indptr.dtype != torch.int64 or slot.dtype != torch.int64:
        raise ValueError(f"indptr and slot must be int64, got {indptr.dtype} and {slot.dtype}")
    if values.dtype != torch.float32:
        raise ValueError(f"values must be float32, got {values.dtype}")
    if not (indptr.device == slot.device == values.device) or values.device.type != "cuda":
        raise ValueError(
            f"indptr, slot and values must be on one CUDA device, got {indptr.device}, "
            f"{slot.device} and {values.device}"
        )
    n_rows = indptr.numel() - 1
    indptr, slot, values = (
        indptr.contiguous(),
        slot.contiguous(),
        values.contiguous(),
    )  # alive through the launch
    out = torch.empty(n_rows, dtype=torch.float32, device=values.device)
    if n_rows > 0:
        launch(
            SOURCE,
            "fg::slot_row_sums",
            values.device,
            (-(-n_rows // _WARPS),),
            (32 * _WARPS,),
            ptr(indptr),
            ptr(slot),
            ptr(values),
            n_rows,
            ptr(out),
        )
    return out
