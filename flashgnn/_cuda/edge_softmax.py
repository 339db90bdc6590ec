"""Launchers of the edge softmax kernels (kernels/edge_softmax.cu), the CUDA implementation
of the custom ops flashgnn::edge_softmax and flashgnn::edge_softmax_backward (registered in
flashgnn/ops/edge_softmax.py).

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

import torch

from .runtime import current_stream, launch, operand, ptr, warp_blocks
from .segments import segments_for
from .sources import register

_OPS = {"forward": ("Forward", 2), "backward": ("Backward", 1)}  # template, STATS
_SOURCES = ("StoredScores", "GatScores")  # where the scores come from (kernels/edge_softmax.cu)
_STAGES = ("edge_softmax_segments", "edge_softmax_finish")
SOURCE = register(
    "edge_softmax.cu",
    [
        f"fg::softmax::{stage}<fg::softmax::{op}<fg::softmax::{source}>>"
        for stage in _STAGES
        for op, _ in _OPS.values()
        for source in _SOURCES
    ]
    + ["fg::softmax::gat_softmax_transposed"],
)
_WARPS = 8  # warps per block, one window segment (or split window) each
_INPUTS = (torch.float16, torch.bfloat16, torch.float32)


def _check(row_ptr, vec_mask, k, named):
    if k not in (8, 4):
        raise ValueError(f"k must be 8 or 4, got {k}")
    if row_ptr.dtype != torch.int64 or vec_mask.dtype != torch.uint8:
        raise ValueError(
            f"row_ptr must be int64 and vec_mask uint8, got {row_ptr.dtype} and {vec_mask.dtype}"
        )
    if row_ptr.device != vec_mask.device:
        raise ValueError(f"row_ptr is on {row_ptr.device} but vec_mask on {vec_mask.device}")
    for name, t in named.items():
        if t.dtype not in _INPUTS:
            raise ValueError(
                f"{name} must be float16, bfloat16 or float32 (float64 takes the reference), "
                f"got {t.dtype}"
            )
        if t.shape != (8 * vec_mask.numel(),):
            raise ValueError(
                f"{name} must have shape ({8 * vec_mask.numel()},) (the value layout), "
                f"got {tuple(t.shape)}"
            )
        if t.device != vec_mask.device or t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; every input must be on one CUDA device")


def _check_terms(row_ptr, col_idx, row_terms, *col_terms) -> list[torch.Tensor]:
    """GAT's score terms, ``(name, tensor)`` pairs: 1-D float32 on the pattern's device, the row
    terms one per row of the windows; returned contiguous, in order."""
    if col_idx.dtype != torch.int32 or col_idx.device != row_ptr.device:
        raise ValueError(
            f"col_idx must be int32 on {row_ptr.device}, got {col_idx.dtype} on {col_idx.device}"
        )
    n_windows = row_ptr.numel() - 1
    for name, t in (row_terms, *col_terms):
        if t.dtype != torch.float32 or t.device != row_ptr.device or t.dim() != 1:
            raise ValueError(
                f"{name} must be a 1-D float32 tensor on {row_ptr.device}, "
                f"got {t.dtype} {tuple(t.shape)} on {t.device}"
            )
    name, rows = row_terms
    if not 8 * (n_windows - 1) < rows.numel() <= 8 * n_windows:
        raise ValueError(
            f"{name} must have one term per row ({n_windows} windows of 8 rows), got {rows.numel()}"
        )
    return [t.contiguous() for _, t in (row_terms, *col_terms)]


def _check_row_info(row_info: torch.Tensor, rows: int | None, device: torch.device) -> None:
    """gat_softmax_cuda's row records: float32 [rows, 4] (rows a multiple of 8 when not given)."""
    if (
        row_info.dtype != torch.float32
        or row_info.device != device
        or row_info.dim() != 2
        or row_info.shape[1] != 4
        or row_info.shape[0] % 8
        or rows not in (None, row_info.shape[0])
        or not row_info.is_contiguous()
    ):
        shape = "8 * n_windows" if rows is None else rows
        raise ValueError(
            f"row_info must be gat_softmax_cuda's [{shape}, 4] float32 records on {device}, "
            f"got {row_info.dtype} {tuple(row_info.shape)} on {row_info.device}"
        )


def _address(t: torch.Tensor | None) -> int:
    return 0 if t is None else ptr(t)


def _run(
    op: str,
    row_ptr,
    vec_mask,
    a,
    b,
    k: int,
    out,
    scale=None,
    gat=None,
    row_info=None,
    row_sums=None,
    write: bool = True,
) -> torch.Tensor | None:
    """Launch ``op``'s kernels; the scores are ``scale * a`` (forward) or, with ``gat`` =
    (col_idx, er, el, slope), GAT's; the forward's row records go to ``row_info`` when given,
    the backward's output summed per row to ``row_sums`` (zeros [8 * n_windows]) when given.
    Returns the output, or without ``write`` None (the forward then stores only the records)."""
    template, n_stats = _OPS[op]
    device = vec_mask.device
    a = None if a is None else operand(a, torch.float32)
    b = a if b is None else operand(b, torch.float32)
    n_slots = 8 * vec_mask.numel()
    if not write:
        out = None
    elif out is None:
        out = torch.empty(n_slots, dtype=torch.float32, device=device)
    elif (
        out.shape != (n_slots,)
        or out.dtype != torch.float32
        or out.device != device
        or not out.is_contiguous()
    ):
        raise ValueError(
            f"out must be a contiguous float32 tensor of shape ({n_slots},) on {device}"
        )
    seg = segments_for(row_ptr)
    if seg.n_segments == 0:
        return out
    # split windows' partial statistics (never touched when there are none)
    part_stats = (
        torch.empty(seg.n_parts * n_stats * 8, dtype=torch.float32, device=device)
        if seg.n_parts
        else None
    )
    k_log2 = k.bit_length() - 1
    col_idx, er, el, slope = (None, None, None, 0.0) if gat is None else gat
    tag = f"fg::softmax::{template}<fg::softmax::{_SOURCES[gat is not None]}>"
    args = (
        _address(col_idx),
        _address(a),
        _address(b),
        _address(scale),
        _address(er),
        _address(el),
        slope,
    )
    info = _address(row_info)
    sums = _address(row_sums)
    launch(
        SOURCE,
        f"fg::softmax::edge_softmax_segments<{tag}>",
        device,
        warp_blocks(seg.n_segments, _WARPS),
        (32 * _WARPS,),
        ptr(row_ptr),
        ptr(vec_mask),
        *args,
        _address(out),
        *seg.pointers("window", "begin", "part"),
        seg.n_segments,
        seg.seg_vectors,
        k_log2,
        _address(part_stats),
        info,
        sums,
    )
    if seg.n_parts:
        part_sums = counters = None
        if row_sums is not None:  # the split windows' row sums: per segment, then added in order
            part_sums = torch.empty(seg.n_parts * 8, dtype=torch.float32, device=device)
            counters = seg.counters(1, current_stream(device))
        launch(
            SOURCE,
            f"fg::softmax::edge_softmax_finish<{tag}>",
            device,
            warp_blocks(seg.n_parts, _WARPS),
            (32 * _WARPS,),
            ptr(row_ptr),
            ptr(vec_mask),
            *args,
            _address(out),
            *seg.pointers("split_window", "split_part", "split_count"),
            seg.n_split,
            seg.n_parts,
            seg.seg_vectors,
            k_log2,
            ptr(part_stats),
            info,
            sums,
            _address(part_sums),
            _address(counters),
        )
    return out


def edge_softmax_cuda(
    row_ptr: torch.Tensor,
    vec_mask: torch.Tensor,
    scores: torch.Tensor,
    k: int,
    out: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax of ``scale * scores`` over each row's real nonzeros, on the GPU.

    row_ptr int64 [n_windows + 1], vec_mask uint8 [n_vectors]: the pattern; scores float16,
    bfloat16 or float32 [8 * n_vectors] in the value layout of block width ``k``; scale a
    float32 [1] tensor on the same device (read by the kernel: no synchronisation), or None
    for 1. Returns float32 [8 * n_vectors] (written into ``out`` when given); padding slots are 0.
    """
    _check(row_ptr, vec_mask, k, {"scores": scores})
    if scale is not None and (
        scale.shape != (1,) or scale.dtype != torch.float32 or scale.device != scores.device
    ):
        raise ValueError(
            f"scale must be a float32 tensor of shape (1,) on {scores.device}, "
            f"got {scale.dtype} {tuple(scale.shape)} on {scale.device}"
        )
    return _run("forward", row_ptr, vec_mask, scores, None, k, out, scale=scale)


def edge_softmax_backward_cuda(
    row_ptr: torch.Tensor,
    vec_mask: torch.Tensor,
    probs: torch.Tensor,
    grad: torch.Tensor,
    k: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """d(scores) = p * (g - sum_row p * g) on the real slots, on the GPU; probs (the forward's
    output) and grad as ``scores`` in edge_softmax_cuda. Returns float32 [8 * n_vectors]."""
    _check(row_ptr, vec_mask, k, {"probs": probs, "grad": grad})
    return _run("backward", row_ptr, vec_mask, probs, grad, k, out)


def gat_softmax_cuda(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    vec_mask: torch.Tensor,
    er: torch.Tensor,
    el: torch.Tensor,
    slope: float,
    k: int,
    out: torch.Tensor | None = None,
    write: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """GAT's attention: the softmax of leaky_relu(er_i + el_j) over each row's real nonzeros,
    on the GPU, with the scores computed in the kernel (the bits of the rank-2 fp32 SDDMM of
    [er, 1] and [1, el] followed by torch's leaky ReLU and ``edge_softmax_cuda``).

    row_ptr int64 [n_windows + 1], col_idx int32 [n_vectors], vec_mask uint8 [n_vectors]: the
    pattern; er float32 [n_rows] (one term per destination row), el float32 [n_cols] (one per
    source column; its length is the caller's to check); slope: the leaky ReLU's negative
    slope. Returns (P float32 [8 * n_vectors], padding slots 0, or None without ``write``; the
    rows' records, float32 [8 * n_windows, 4]: each row's max score, sum of exp(s - max) and
    er, then 0, from which ``gat_softmax_transposed_cuda`` and the SpMM (``GatAttention``)
    compute P's values).
    """
    _check(row_ptr, vec_mask, k, {})
    er, el = _check_terms(row_ptr, col_idx, ("er", er), ("el", el))
    rows = 8 * (row_ptr.numel() - 1)
    if er.numel() < rows:  # whole windows of terms: the kernels store every row's record
        er = torch.nn.functional.pad(er, (0, rows - er.numel()))
    row_info = torch.empty(rows, 4, dtype=torch.float32, device=er.device)
    probs = _run(
        "forward",
        row_ptr,
        vec_mask,
        None,
        None,
        k,
        out,
        gat=(col_idx, er, el, slope),
        row_info=row_info,
        write=write,
    )
    return probs, row_info


def gat_softmax_transposed_cuda(
    t_row_ptr: torch.Tensor,
    t_col_idx: torch.Tensor,
    t_vec_mask: torch.Tensor,
    el: torch.Tensor,
    slope: float,
    row_info: torch.Tensor,
    k: int,
) -> torch.Tensor:
    """P^T in A^T's value layout, for (P, row_info) = ``gat_softmax_cuda(A's pattern, er, el,
    slope, k)``: the bits of moving P into A^T's layout, computed instead.

    t_row_ptr, t_col_idx, t_vec_mask: A^T's pattern (block width k); el float32 [n_cols(A)] as
    given to gat_softmax_cuda; row_info its second result (for that A: A^T's columns index it).
    Returns float32 [8 * n_vectors(A^T)], padding slots 0.
    """
    _check(t_row_ptr, t_vec_mask, k, {})
    (el,) = _check_terms(t_row_ptr, t_col_idx, ("el", el))
    _check_row_info(row_info, None, el.device)
    out = torch.empty(8 * t_vec_mask.numel(), dtype=torch.float32, device=el.device)
    seg = segments_for(t_row_ptr)
    if seg.n_segments:
        launch(
            SOURCE,
            "fg::softmax::gat_softmax_transposed",
            el.device,
            warp_blocks(seg.n_segments, _WARPS),
            (32 * _WARPS,),
            ptr(t_row_ptr),
            ptr(t_vec_mask),
            ptr(t_col_idx),
            ptr(el),
            slope,
            ptr(row_info),
            ptr(out),
            *seg.pointers("window", "begin", "part"),
            seg.n_segments,
            seg.seg_vectors,
            k.bit_length() - 1,
        )
    return out


def gat_softmax_backward_cuda(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    vec_mask: torch.Tensor,
    er: torch.Tensor,
    el: torch.Tensor,
    slope: float,
    row_info: torch.Tensor,
    grad: torch.Tensor,
    k: int,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradient of GAT's pre-activation scores er_i + el_j from that of its attention P:
    ``edge_softmax_backward_cuda`` followed by leaky_relu's backward in one pass, with P
    computed again from ``row_info`` (not read). Inputs as in ``gat_softmax_cuda``, row_info
    its second result, grad [8 * n_vectors]. Returns (d float32 [8 * n_vectors]; its sums over
    each row, float32 [8 * n_windows], er's gradient: in a fixed order, split windows too)."""
    _check(row_ptr, vec_mask, k, {"grad": grad})
    er, el = _check_terms(row_ptr, col_idx, ("er", er), ("el", el))
    _check_row_info(row_info, 8 * (row_ptr.numel() - 1), er.device)
    row_sums = torch.zeros(8 * (row_ptr.numel() - 1), dtype=torch.float32, device=er.device)
    d = _run(
        "backward",
        row_ptr,
        vec_mask,
        None,
        grad,
        k,
        out,
        gat=(col_idx, er, el, slope),
        row_info=row_info,
        row_sums=row_sums,
    )
    return d, row_sums
