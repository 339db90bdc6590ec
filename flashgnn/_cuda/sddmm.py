"""Launchers of the SDDMM kernels: tensor cores (kernels/sddmm.cu) for fp16, bf16 and tf32, CUDA
cores (kernels/sddmm_fp32.cu) for the exact fp32 path and for tf32 on large graphs of short
windows."""

from __future__ import annotations

import torch

from ..pattern_nnz import pattern_nnz
from .runtime import launch, launched_dependent, operand, ptr
from .segments import column_ordered, default_seg_vectors, segments_for
from .sources import register
from .spmm import GAT_BLOCK_WIDTH, STORAGE, WARPS_PER_BLOCK, preamble_for, reduce_split_windows

_PRECISION_INDEX = {"fp16": 0, "bf16": 1, "tf32": 2}
# features per lane and K chunk of sddmm_kernel: 16 bytes, 4 lanes a chunk (fp16/bf16: 2
# m16n8k16, tf32: 4 m16n8k4); for 16-bit types at K <= 16 and K <= 8 half and quarter runs (1
# m16n8k16, 1 m16n8k8), which keep every lane on real features
_RUNS = {"fp16": (8, 4, 2), "bf16": (8, 4, 2), "tf32": (4,)}
# <precision, WHOLE, RUN, ONE>: ONE (K exactly one chunk) only on WHOLE launches
SOURCE = register(
    "sddmm.cu",
    [
        f"fg::sddmm_kernel<{_PRECISION_INDEX[p]}, {whole}, {run}, {one}>"
        for p, runs in _RUNS.items()
        for run in runs
        for whole, one in (("false", "false"), ("true", "false"), ("true", "true"))
    ]
    + [
        f"fg::gat_softmax_backward_sddmm<{_PRECISION_INDEX[p]}, {whole}, {run}, {which}>"
        for p in GAT_BLOCK_WIDTH
        for whole in ("false", "true")
        for run in _RUNS[p]
        for which in ("fg::GAT_ROWS", "fg::GAT_COLUMNS")
    ],
)
# (lanes per row of y, features per lane) of sddmm_fp32_rows, for K up to lanes x features;
# K = 17..32 on 4 lanes x 8, which measured faster than 8 x 4 (docs/TUNING.md).
_ROW_LAYOUTS = ((4, 4), (4, 8), (16, 4), (32, 4), (32, 8))
# sddmm_fp32_rows takes every fp32 SDDMM with K a multiple of 4 up to 256 and x and y 16-byte
# aligned (it reads whole rows of y per group); the lane-per-vector kernel the rest.
ROWS_KERNEL_MAX_K = max(lanes * vw for lanes, vw in _ROW_LAYOUTS)  # 256
# tf32 takes sddmm_fp32_rows with tf32-rounded inputs instead of the tensor cores on graphs of
# at least TF32_LARGE_VECTORS vectors in short windows (segments not column-ordered): there y is
# far larger than L2 and the tensor cores' gather, 16 bytes of 4 rows per quarter-warp, wastes
# most DRAM sectors while the rows kernel reads whole rows (docs/TUNING.md).
TF32_LARGE_VECTORS = 1 << 20
# The lane-per-vector kernel (K not a multiple of 4, or above 256) walks each vector's set bits
# (WALK) on patterns of fewer than WALK_BELOW nonzeros per vector, else it steps through every
# row any lane of the warp needs, which pays where vectors hold several nonzeros (docs/TUNING.md).
WALK_BELOW = 1.05
SOURCE_FP32 = register(
    "sddmm_fp32.cu",
    [
        f"fg::sddmm32::sddmm_fp32<{vec}, {walk}>"
        for vec, walk in (("true", "true"), ("true", "false"), ("false", "false"))
    ]
    + [
        f"fg::sddmm32::sddmm_fp32_rows<{lanes}, {vw}, {tf32}>"
        for lanes, vw in _ROW_LAYOUTS
        for tf32 in ("false", "true")
    ],
)


# Vectors per segment: the SDDMM writes each vector's own slots, so a window cut into several
# segments costs no partial sums, and short segments serve to fill the GPU: 32 on graphs of up
# to 32 * TARGET_SEGMENTS vectors, 64 above (docs/TUNING.md).
def seg_vectors(n_vectors: int) -> int:
    return min(default_seg_vectors(n_vectors, shortest=32), 64)


def _run_features(kdim: int, precision: str) -> int:
    """Features per lane and chunk: the shortest run whose chunk (4 runs) covers K, else the
    longest."""
    runs = _RUNS[precision]
    return min((r for r in runs if 4 * r >= kdim), default=runs[0])


def _tensor_core_kernel(
    xs: torch.Tensor, ys: torch.Tensor, precision: str
) -> tuple[str, bool, bool]:
    """(template arguments <precision, WHOLE, RUN> of a tensor-core SDDMM of xs and ys, aligned,
    whether K is exactly one chunk of a WHOLE launch)."""
    kdim = xs.shape[1]
    aligned = (
        (kdim * xs.element_size()) % 16 == 0 and xs.data_ptr() % 16 == 0 and ys.data_ptr() % 16 == 0
    )
    run = _run_features(kdim, precision)
    whole = aligned and kdim % (4 * run) == 0
    return (
        f"{_PRECISION_INDEX[precision]}, {str(whole).lower()}, {run}",
        aligned,
        whole and kdim == 4 * run,
    )


def _launch_shape(seg) -> dict:
    """Grid, block and shared memory of a warp-per-segment SDDMM launch (a column index and a
    mask per vector)."""
    return dict(
        grid=(-(-seg.n_segments // WARPS_PER_BLOCK),),
        block=(32 * WARPS_PER_BLOCK,),
        shmem=5 * WARPS_PER_BLOCK * seg.seg_vectors,
    )


def sddmm_tensor_core(row_ptr, col_idx, vec_mask, x, y, k: int, precision: str) -> torch.Tensor:
    """(x @ y^T) on A's pattern, in A's value layout [8 * n_vectors], fp32; precision in
    {"fp16", "bf16", "tf32"}. x [n_rows, K], y [n_cols, K] of any float dtype."""
    xs, ys, out, seg = _prepare(col_idx, row_ptr, x, y, STORAGE[precision])
    if seg is None:
        return out
    args, aligned, one_chunk = _tensor_core_kernel(xs, ys, precision)
    shape = _launch_shape(seg)
    kernel = f"fg::sddmm_kernel<{args}, {str(one_chunk).lower()}>"
    preamble = preamble_for(
        seg, None, launched_dependent(SOURCE, kernel, x.device)
    )  # NO_PREAMBLE or PATTERN
    launch(
        SOURCE,
        kernel,
        x.device,
        shape["grid"],
        shape["block"],
        ptr(col_idx),
        ptr(vec_mask),
        *seg.pointers("window", "first", "count"),
        seg.n_segments,
        seg.seg_vectors,
        x.shape[0],
        xs.shape[1],
        k,
        aligned,
        preamble,
        ptr(out),
        ptr(xs),
        ptr(ys),
        shmem=shape["shmem"],
    )
    seg.launched = True
    return out


def gat_softmax_backward_tensor_core(
    pattern,
    transposed,
    grad,
    ft,
    precision: str,
    el: torch.Tensor,
    row_info: torch.Tensor,
    slope: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of GAT's score terms er [8 * n_windows] and el [8 * n_windows of A^T],
    fp32, through its attention P (``row_info``: the softmax forward's row records,
    ``gat_softmax_cuda``) from dP = SDDMM(grad, ft) on A's pattern in ``precision`` (fp16, bf16
    or tf32, on tensor cores), without dP or the scores' gradient d in memory: a pass of that
    SDDMM on A (pattern) sums P * dP, leaky_relu' * P * dP and leaky_relu' * P per row (er's
    gradient is the second minus the first times the third), one on A^T (transposed) sums d
    per column (el's gradient). grad [n_rows, F], ft [n_cols, F], el float32 [n_cols]. The
    formula of ``gat_softmax_backward_cuda`` and its row and column sums, added in another
    order."""
    if precision not in GAT_BLOCK_WIDTH:
        raise ValueError(f"gat_softmax_backward_tensor_core: fp16, bf16 or tf32, got {precision!r}")
    rows = 8 * (pattern[0].numel() - 1)
    if el.shape != (ft.shape[0],) or row_info.shape != (rows, 4):
        raise ValueError(
            f"gat_softmax_backward_tensor_core: el must be [{ft.shape[0]}] and row_info "
            f"[{rows}, 4], "
            f"got {tuple(el.shape)} and {tuple(row_info.shape)}"
        )
    storage = STORAGE[precision]
    grad_k, ft_k = operand(grad, storage), operand(ft, storage)
    el, row_info = operand(el, torch.float32), operand(row_info, torch.float32)
    sums = _gat_pass("fg::GAT_ROWS", pattern, grad_k, ft_k, precision, el, row_info, slope, 3)
    s, a, b = sums.unbind(1)
    # each row's record with s_i in its fourth float, which the column pass gathers with it
    records = torch.cat([row_info[:, :3], s.view(-1, 1)], 1)
    d_el = _gat_pass("fg::GAT_COLUMNS", transposed, ft_k, grad_k, precision, el, records, slope, 1)
    return torch.addcmul(a, s, b, value=-1.0), d_el.view(-1)


def _gat_pass(
    which: str, pattern, x, y, precision: str, el, records, slope: float, stats: int
) -> torch.Tensor:
    """One pass of ``gat_softmax_backward_sddmm`` over a pattern: its per-row results [8 *
    n_windows, stats] (0 for windows without vectors)."""
    row_ptr, col_idx, vec_mask = pattern
    rows = torch.zeros(8 * (row_ptr.numel() - 1), stats, dtype=torch.float32, device=x.device)
    if (
        col_idx.numel() == 0 or x.shape[1] == 0
    ):  # no products: every sum is of zeros, or er's a - s b = 0
        return rows
    seg = segments_for(row_ptr, seg_vectors(col_idx.numel()), col_idx)
    parts = (
        torch.empty(seg.n_parts * 8 * stats, dtype=torch.float32, device=x.device)
        if seg.n_parts
        else rows
    )
    args, aligned, _ = _tensor_core_kernel(x, y, precision)
    shape = _launch_shape(seg)
    launch(
        SOURCE,
        f"fg::gat_softmax_backward_sddmm<{args}, {which}>",
        x.device,
        shape["grid"],
        shape["block"],
        ptr(col_idx),
        ptr(vec_mask),
        *seg.pointers("window", "first", "count", "part"),
        seg.n_segments,
        seg.seg_vectors,
        x.shape[0],
        x.shape[1],
        aligned,
        ptr(x),
        ptr(y),
        ptr(el),
        ptr(records),
        slope,
        ptr(rows),
        ptr(parts),
        shmem=shape["shmem"],
    )
    reduce_split_windows(seg, parts, rows.shape[0], rows.view(-1, stats))
    return rows


def _rows_kernel(xs: torch.Tensor, ys: torch.Tensor) -> bool:
    """Whether sddmm_fp32_rows takes these fp32 operands: K at most ROWS_KERNEL_MAX_K and a
    multiple of 4, x and y 16-byte aligned."""
    kdim = xs.shape[1]
    return (
        kdim <= ROWS_KERNEL_MAX_K
        and kdim % 4 == 0
        and xs.data_ptr() % 16 == 0
        and ys.data_ptr() % 16 == 0
    )


def tf32_on_cuda_cores(x: torch.Tensor, y: torch.Tensor, n_vectors: int, n_windows: int) -> bool:
    """Whether a tf32 SDDMM of x and y on a pattern of ``n_vectors`` vectors in ``n_windows``
    windows runs on CUDA cores (sddmm_cuda_cores) rather than on tensor cores. Reads only
    shapes and addresses; fp32 operands as they are stored."""
    if n_vectors < TF32_LARGE_VECTORS or column_ordered(n_vectors, n_windows):
        return False
    return (
        x.dtype == y.dtype == torch.float32
        and x.is_contiguous()
        and y.is_contiguous()
        and _rows_kernel(x, y)
    )


def sddmm_cuda_cores(
    row_ptr, col_idx, vec_mask, x, y, k: int, precision: str = "fp32", *, walk: bool | None = None
) -> torch.Tensor:
    """(x @ y^T) on A's pattern on CUDA cores, in A's value layout [8 * n_vectors], fp32.
    x [n_rows, K], y [n_cols, K] float16/bfloat16/float32 (widened to float32). precision
    "fp32" (exact), or "tf32" when ``tf32_on_cuda_cores``: inputs rounded to tf32 as read.
    ``walk`` overrides the lane-per-vector kernel's choice (WALK_BELOW; same sums either way)."""
    if precision not in ("fp32", "tf32"):
        raise ValueError(f"sddmm_cuda_cores: precision must be fp32 or tf32, got {precision!r}")
    xs, ys, out, seg = _prepare(col_idx, row_ptr, x, y, torch.float32)
    if seg is None:
        return out
    kdim = xs.shape[1]
    if _rows_kernel(xs, ys):
        lanes, vw = next((lanes, vw) for lanes, vw in _ROW_LAYOUTS if lanes * vw >= kdim)
        kernel = f"fg::sddmm32::sddmm_fp32_rows<{lanes}, {vw}, {str(precision == 'tf32').lower()}>"
    elif precision == "tf32":
        raise ValueError(
            "sddmm_cuda_cores: tf32 takes only operands that tf32_on_cuda_cores accepts"
        )
    else:
        vec = kdim % 4 == 0 and ys.data_ptr() % 16 == 0
        walk = vec and (
            pattern_nnz(vec_mask) < WALK_BELOW * col_idx.numel() if walk is None else walk
        )
        kernel = f"fg::sddmm32::sddmm_fp32<{str(vec).lower()}, {str(walk).lower()}>"
    launch(
        SOURCE_FP32,
        kernel,
        x.device,
        (-(-seg.n_segments // WARPS_PER_BLOCK),),
        (32 * WARPS_PER_BLOCK,),
        ptr(col_idx),
        ptr(vec_mask),
        *seg.pointers("window", "first", "count"),
        seg.n_segments,
        xs.shape[0],
        kdim,
        k,
        ptr(xs),
        ptr(ys),
        ptr(out),
    )
    return out


def sddmm_operands(x, y, dtype: torch.dtype, n_slots: int):
    """(xs, ys, out, empty): x and y as contiguous ``dtype`` (converted once when x is y), the
    fp32 output [n_slots], and whether there is nothing to launch (no slots, or K = 0: the
    output is then already zeroed)."""
    xs = operand(x, dtype)
    ys = xs if y is x else operand(y, dtype)
    out = torch.empty(n_slots, dtype=torch.float32, device=x.device)
    empty = n_slots == 0 or xs.shape[1] == 0
    return xs, ys, out.zero_() if empty else out, empty


def _prepare(col_idx, row_ptr, x, y, dtype: torch.dtype):
    """sddmm_operands of an ME-BCRS matrix, and its segments (None when there is nothing to
    launch)."""
    xs, ys, out, empty = sddmm_operands(x, y, dtype, 8 * col_idx.numel())
    return (
        xs,
        ys,
        out,
        None if empty else segments_for(row_ptr, seg_vectors(col_idx.numel()), col_idx),
    )
