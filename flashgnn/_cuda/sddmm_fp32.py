"""Launcher of the exact fp32 SDDMM on CUDA cores (kernels/sddmm_fp32.cu): the CUDA path of
``precision="fp32"``."""
from __future__ import annotations

import numpy as np
import torch

from .runtime import launch, ptr
from .sddmm import SEG_VECTORS
from .segments import segments_for
from .sources import register

SOURCE = register("sddmm_fp32.cu", [f"fg::sddmm32::sddmm_fp32<{vec}>" for vec in ("true", "false")])
_WARPS = 4  # per block, one segment each


def sddmm_fp32(row_ptr, col_idx, vec_mask, x, y, k: int) -> torch.Tensor:
    """(x @ y^T) on A's pattern in fp32, in A's value layout [8 * n_vectors] (padding slots 0).
    x [n_rows, K], y [n_cols, K] float16/bfloat16/float32 (widened to float32)."""
    xs = x.to(torch.float32).contiguous()
    ys = y.to(torch.float32).contiguous()
    kdim = xs.shape[1]
    out = torch.empty(8 * col_idx.numel(), dtype=torch.float32, device=x.device)
    if out.numel() == 0:
        return out
    if kdim == 0:
        return out.zero_()
    seg = segments_for(row_ptr, SEG_VECTORS)
    vec = kdim % 4 == 0 and ys.data_ptr() % 16 == 0
    launch(SOURCE, f"fg::sddmm32::sddmm_fp32<{'true' if vec else 'false'}>", x.device,
           (-(-seg.n_segments // _WARPS),), (32 * _WARPS,),
           ptr(col_idx), ptr(vec_mask), *seg.pointers("window", "first", "count"), np.int64(seg.n_segments),
           np.int32(xs.shape[0]), np.int32(kdim), np.int32(k), ptr(xs), ptr(ys), ptr(out))
    return out
