"""Launcher of kernels/move_values.cu: values moved between two value layouts by slot maps."""
from __future__ import annotations

import numpy as np
import torch

from .runtime import launch, ptr
from .sources import register

_BITS = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
SOURCE = register("move_values.cu", [f"fg::move_values<{t}>" for t in _BITS.values()])
_THREADS = 256
_MAX_BLOCKS = 1 << 16


def move_values_cuda(values: torch.Tensor, src_slot: torch.Tensor, dst_slot: torch.Tensor,
                     n_out: int) -> torch.Tensor:
    """out [n_out] with out[dst_slot[e]] = values[src_slot[e]]; the other slots are left
    uninitialised. values: a contiguous CUDA tensor of 2, 4 or 8-byte elements; the slot maps
    int64 [nnz] on its device, in range (the format guarantees it)."""
    if values.element_size() not in _BITS or not values.is_cuda:
        raise ValueError(f"values must be a CUDA tensor of 2, 4 or 8-byte elements, got {values.dtype} on {values.device}")
    values = values.contiguous()
    out = values.new_empty(n_out)
    nnz = src_slot.numel()
    if nnz:
        blocks = min(-(-nnz // _THREADS), _MAX_BLOCKS)
        launch(SOURCE, f"fg::move_values<{_BITS[values.element_size()]}>", values.device, (blocks,), (_THREADS,),
               ptr(values), ptr(src_slot), ptr(dst_slot), np.int64(nnz), ptr(out))
    return out
