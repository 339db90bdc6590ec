"""The exact fp32 SpMM on CUDA cores (kernels/spmm_fp32.cu), read from ME-BCRS: the CUDA
path of ``precision="fp32"``. The kernel file says why it gathers through ME-BCRS, not CSR."""
from __future__ import annotations

import torch

from . import spmm as tensor_core_spmm
from .runtime import launch, operand, ptr
from .segments import segments_for
from .sources import register

_LAYOUTS = ((4, 1), (1, 1), (1, 2), (1, 4))  # (VW, G): features per load, loads per lane
_NARROW = (1, 2, 4, 8, 16)  # lanes per vector of spmm_fp32_narrow, for N up to each
SOURCE = register("spmm_fp32.cu", [f"fg::spmm32::spmm_fp32<{vw}, {g}>" for vw, g in _LAYOUTS]
                  + [f"fg::spmm32::spmm_fp32_narrow<{lanes}>" for lanes in _NARROW])
_WARPS = 4  # warps per block
_CONVERTIBLE = (torch.float16, torch.bfloat16, torch.float32)


def _layout(n: int, x: torch.Tensor) -> tuple[int, int]:
    """(VW, G) for N = n > 16 feature columns: 16-byte loads of 4 columns where N > 64 allows
    it, else 1 column per load and as many loads per lane (G <= 4) as fill a 32 G-column tile."""
    if n > 64 and n % 4 == 0 and x.data_ptr() % 16 == 0:
        return 4, 1
    return 1, (1 if n <= 32 else 2 if n <= 64 else 4)


def spmm_fp32(row_ptr: torch.Tensor, col_idx: torch.Tensor, vec_mask: torch.Tensor, values: torch.Tensor,
              x: torch.Tensor, n_rows: int, k: int) -> torch.Tensor:
    """Y = A @ X in fp32 on the GPU, for A in ME-BCRS.

    row_ptr int64 [n_windows + 1], col_idx int32 [n_vectors], vec_mask uint8 [n_vectors],
    values [8 * n_vectors] (block width ``k``), x [n_cols, N]; values and x float32, or
    float16/bfloat16 (widened to float32 first; float64 belongs to the reference). Returns
    float32 [n_rows, N]. Deterministic: split windows are summed in a fixed order.
    """
    if k not in (8, 4):
        raise ValueError(f"k must be 8 or 4, got {k}")
    if row_ptr.dtype != torch.int64 or col_idx.dtype != torch.int32 or vec_mask.dtype != torch.uint8:
        raise ValueError("row_ptr, col_idx and vec_mask must be int64, int32 and uint8, got "
                         f"{row_ptr.dtype}, {col_idx.dtype} and {vec_mask.dtype}")
    for name, t in (("values", values), ("x", x)):
        if t.dtype not in _CONVERTIBLE:
            raise ValueError(f"{name} must be float32, float16 or bfloat16 (float64 takes the reference), "
                             f"got {t.dtype}")
    if values.shape != (8 * col_idx.numel(),):
        raise ValueError(f"values must have shape ({8 * col_idx.numel()},), got {tuple(values.shape)}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got shape {tuple(x.shape)}")
    n_windows = row_ptr.numel() - 1
    if n_windows != (n_rows + 7) // 8:
        raise ValueError(f"row_ptr has {n_windows} windows, {n_rows} rows need {(n_rows + 7) // 8}")
    tensors = (row_ptr, col_idx, vec_mask, values, x)
    if any(t.device != x.device for t in tensors) or x.device.type != "cuda":
        raise ValueError("row_ptr, col_idx, vec_mask, values and x must be on one CUDA device")
    device = x.device
    n = x.shape[1]
    y = torch.empty(n_rows, n, dtype=torch.float32, device=device)
    if n == 0 or n_rows == 0:
        return y
    x = operand(x, torch.float32)
    values = operand(values, torch.float32)
    seg = segments_for(row_ptr, col_idx=col_idx)
    workspace = tensor_core_spmm.split_workspace(seg, n, y)
    common = (ptr(row_ptr), ptr(col_idx), ptr(vec_mask), ptr(values), *seg.pointers("window", "begin", "part"),
              seg.n_segments, seg.seg_vectors, k.bit_length() - 1, n_rows, n)
    if n <= _NARROW[-1]:
        lanes = next(lanes for lanes in _NARROW if lanes >= n)
        launch(SOURCE, f"fg::spmm32::spmm_fp32_narrow<{lanes}>", device, (-(-seg.n_segments // _WARPS),),
               (32 * _WARPS,), *common, ptr(x), ptr(y), ptr(workspace))
    else:
        vw, g = _layout(n, x)
        n_tiles = -(-n // (32 * vw * g))
        warps = seg.n_segments * n_tiles
        launch(SOURCE, f"fg::spmm32::spmm_fp32<{vw}, {g}>", device, (-(-warps // _WARPS),), (32 * _WARPS,),
               *common, n_tiles, ptr(x), ptr(y), ptr(workspace))
    tensor_core_spmm.reduce_split_windows(seg, workspace, n_rows, y)
    return y
