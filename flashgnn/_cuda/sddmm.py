"""Launchers of the tensor-core SDDMM (kernels/sddmm.cu)."""
from __future__ import annotations

import numpy as np
import torch

from .runtime import launch, ptr
from .segments import segments_for
from .sources import register
from .spmm import STORAGE, WARPS_PER_BLOCK

_KERNEL = {"fp16": "fg::sddmm_kernel<0>", "bf16": "fg::sddmm_kernel<1>", "tf32": "fg::sddmm_kernel<2>"}
SOURCE = register("sddmm.cu", list(_KERNEL.values()))


SEG_VECTORS = 64  # segments.py: short segments suit the SDDMM at any size


def sddmm_tensor_core(row_ptr, col_idx, vec_mask, x, y, k: int, precision: str) -> torch.Tensor:
    """(x @ y^T) on A's pattern, in A's value layout [8 * n_vectors], fp32; precision in
    {"fp16", "bf16", "tf32"}. x [n_rows, K], y [n_cols, K] of any float dtype."""
    kdim = x.shape[1]
    xs = x.to(STORAGE[precision]).contiguous()
    ys = y.to(STORAGE[precision]).contiguous()
    out = torch.empty(8 * col_idx.numel(), dtype=torch.float32, device=x.device)
    if out.numel() == 0:
        return out
    if kdim == 0:
        return out.zero_()
    seg = segments_for(row_ptr, SEG_VECTORS)
    aligned = (kdim * xs.element_size()) % 16 == 0 and xs.data_ptr() % 16 == 0 and ys.data_ptr() % 16 == 0
    blocks = (seg.n_segments + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK
    launch(SOURCE, _KERNEL[precision], x.device, (blocks,), (32 * WARPS_PER_BLOCK,),
           ptr(col_idx), ptr(vec_mask), *seg.pointers("window", "first", "count"),
           np.int64(seg.n_segments), np.int32(seg.seg_vectors), np.int32(x.shape[0]), np.int32(kdim),
           np.int32(k), np.int32(aligned), ptr(out), ptr(xs), ptr(ys),
           shmem=5 * WARPS_PER_BLOCK * seg.seg_vectors)  # a column index and a mask per vector
    return out
