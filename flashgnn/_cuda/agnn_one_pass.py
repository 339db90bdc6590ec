"""Launcher of AGNN's one-pass attention forward (kernels/agnn_one_pass.cu), the CUDA path of
flashgnn/ops/agnn_one_pass.py.

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

import torch

from .runtime import launch, ptr, stride_blocks, warp_blocks
from .segments import segments_for
from .sources import register
from .spmm import TAG

# per precision: the operands' storage type and whether the kernel rounds them to tf32
OPERANDS = {
    "fp16": (torch.float16, False),
    "bf16": (torch.bfloat16, False),
    "tf32": (torch.float32, True),
    "fp32": (torch.float32, False),
}
_LANE_FEATURES = (1, 2, 4)  # features per lane: a warp's chunk is 32, 64 or 128 features
_WARPS = 4  # per block, one (segment, feature chunk) each
_COMBINE_THREADS = 256
_MAX_GRID_Y = 65535  # feature chunks are the grid's y dimension


def _kernel(storage: torch.dtype, tf32: bool, lf: int, out: torch.dtype) -> str:
    return f"fg::agnn::agnn_one_pass<{TAG[storage]}, {str(tf32).lower()}, {lf}, {TAG[out]}>"


SOURCE = register(
    "agnn_one_pass.cu",
    [
        _kernel(storage, tf32, lf, out)
        for storage, tf32 in dict.fromkeys(OPERANDS.values())
        for lf in _LANE_FEATURES
        for out in TAG
    ]
    + [f"fg::agnn::agnn_one_pass_combine<{TAG[out]}>" for out in TAG],
)


def lane_features(n_features: int) -> int:
    """Features per lane: the fewest chunks, then the fewest idle lanes."""
    return next((lf for lf in _LANE_FEATURES if n_features <= 32 * lf), _LANE_FEATURES[-1])


def agnn_one_pass_cuda(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    vec_mask: torch.Tensor,
    unit_dst: torch.Tensor,
    unit: torch.Tensor,
    x: torch.Tensor,
    beta: torch.Tensor,
    n_rows: int,
    precision: str,
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out [n_rows, F] in ``out_dtype``, row max [n_rows] fp32, row sum of exp(s - max)
    [n_rows] fp32) of AGNN's attention on the ME-BCRS pattern (row_ptr int64, col_idx int32,
    vec_mask uint8): s_ij = beta * unit_dst_i . unit_j, out_i = softmax_j(s_ij) @ x_j. unit_dst
    [n_rows, F], unit and x [n_cols, F] contiguous, in ``precision``'s operand storage (fp16,
    bf16; fp32 for tf32 and fp32); beta [1] float32. A row without a nonzero gets 0, max -inf
    and sum 0."""
    storage, tf32 = OPERANDS[precision]
    device = vec_mask.device
    n_features = x.shape[1] if x.dim() == 2 else -1
    for name, t, rows in (("unit_dst", unit_dst, n_rows), ("unit", unit, None), ("x", x, None)):
        if (
            t.dtype != storage
            or t.dim() != 2
            or t.shape[1] != n_features
            or (rows is not None and t.shape[0] != rows)
            or not t.is_contiguous()
            or t.device != device
        ):
            raise ValueError(
                f"{name} must be a contiguous {storage} tensor of {n_features} features on "
                f"{device}, got {t.dtype} {tuple(t.shape)} on {t.device}"
            )
    if unit.shape[0] != x.shape[0]:
        raise ValueError(
            f"unit and x must have one row per column, got {unit.shape[0]}, {x.shape[0]}"
        )
    if beta.dtype != torch.float32 or beta.shape != (1,) or beta.device != device:
        raise ValueError(f"beta must be a float32 tensor of shape (1,) on {device}, got {beta!r}")
    if out_dtype not in TAG:
        raise ValueError(f"out_dtype must be float16, bfloat16 or float32, got {out_dtype}")
    out = torch.empty(n_rows, n_features, dtype=out_dtype, device=device)
    row_max = torch.full((n_rows,), float("-inf"), dtype=torch.float32, device=device)
    row_sum = torch.zeros(n_rows, dtype=torch.float32, device=device)
    if n_rows == 0 or n_features == 0:
        return out, row_max, row_sum
    out.zero_()  # rows of windows without a vector have no segment
    seg = segments_for(row_ptr)
    lf = lane_features(n_features)
    chunks = -(-n_features // (32 * lf))
    if chunks > _MAX_GRID_Y:
        raise ValueError(f"at most {_MAX_GRID_Y * 32 * lf} features, got {n_features}")
    workspace = torch.empty(seg.n_parts * 8 * n_features, dtype=torch.float32, device=device)
    part_stats = torch.empty(seg.n_parts * 8 * 2, dtype=torch.float32, device=device)
    if seg.n_segments:
        launch(
            SOURCE,
            _kernel(storage, tf32, lf, out_dtype),
            device,
            (warp_blocks(seg.n_segments, _WARPS)[0], chunks),
            (32 * _WARPS,),
            ptr(col_idx),
            ptr(vec_mask),
            *seg.pointers("window", "first", "count", "part"),
            seg.n_segments,
            n_rows,
            n_features,
            ptr(unit_dst),
            ptr(unit),
            ptr(x),
            ptr(beta),
            ptr(out),
            ptr(row_max),
            ptr(row_sum),
            ptr(workspace),
            ptr(part_stats),
        )
    if seg.n_split:
        launch(
            SOURCE,
            f"fg::agnn::agnn_one_pass_combine<{TAG[out_dtype]}>",
            device,
            stride_blocks(seg.n_split * 8 * n_features, _COMBINE_THREADS),
            (_COMBINE_THREADS,),
            ptr(workspace),
            ptr(part_stats),
            *seg.pointers("split_window", "split_part", "split_count"),
            seg.n_split,
            n_rows,
            n_features,
            ptr(out),
            ptr(row_max),
            ptr(row_sum),
        )
    return out, row_max, row_sum
