"""Launcher of kernels/move_values.cu: values moved between value layouts by slot maps."""

from __future__ import annotations

import torch

from .runtime import launch, ptr, stride_blocks
from .sources import register

_BITS = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
SOURCE = register("move_values.cu", [f"fg::move_values<{t}>" for t in _BITS.values()])
_THREADS = 256


def move_values_cuda(
    values: torch.Tensor, src_slot: torch.Tensor | None, dst_slot: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """out[dst_slot[e]] = values[src_slot[e]] (values[e] when ``src_slot`` is None) on the GPU;
    the other slots of ``out`` are left as they are. values and out: CUDA tensors of one dtype
    (2, 4 or 8-byte elements in one kernel, others by torch indexing), out contiguous; the slot
    maps int64 [nnz] on their device, in range (the formats guarantee it). Returns out."""
    if values.dtype != out.dtype or not out.is_contiguous():
        raise ValueError(
            f"out must be contiguous and of values' dtype {values.dtype}, got {out.dtype}"
        )
    nnz = dst_slot.numel()
    if values.element_size() not in _BITS:
        out[dst_slot] = values if src_slot is None else values[src_slot]
    elif nnz:
        values = values.contiguous()
        launch(
            SOURCE,
            f"fg::move_values<{_BITS[values.element_size()]}>",
            values.device,
            stride_blocks(nnz, _THREADS),
            (_THREADS,),
            ptr(values),
            0 if src_slot is None else ptr(src_slot),
            ptr(dst_slot),
            nnz,
            ptr(out),
        )
    return out
