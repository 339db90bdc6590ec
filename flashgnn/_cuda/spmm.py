"""Launchers of the tensor-core SpMM (kernels/spmm.cu)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..tensor_cache import TensorCache
from .runtime import (
    aligned16,
    current_stream,
    launch,
    launched_dependent,
    operand,
    ptr,
    stride_blocks,
)
from .segments import segments_for
from .sources import register

# Operand storage per precision and the tags the kernels use for element types.
STORAGE = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}
_PRECISION_ID = {"fp16": 0, "bf16": 1, "tf32": 2}
TAG = {torch.float16: "fg::Half", torch.bfloat16: "fg::BFloat16", torch.float32: "fg::Float"}

WARPS_PER_BLOCK = 4
# Split windows of at most this many segments are summed inside the SpMM kernel (by the segment
# that finishes last), longer ones by the spmm_reduce launch after it.
FUSE_MAX_PARTS = 64
# Lanes gather 8 features per vector (16-byte loads for fp16/bf16) when N > 64 and the graph
# holds at least this many vectors x N (100k vectors at N = 128, 50k at 256); otherwise 4, which
# gives twice the warps to fill the GPU (docs/TUNING.md).
WIDE_LANES_MIN_WORK = 12_800_000
# tf32 rows of 4 features are 16-byte loads already, and 8 per lane halves the warps: tf32 takes
# 8 only on graphs of this many vectors (below, 4 wins on the graphs whose X stays in L2).
TF32_WIDE_LANES_MIN_VECTORS = 1_000_000
# At 8 < N <= 16: 2 features per lane (a warp's 16 columns, one MMA tile, where 4 would idle half
# the lanes; batches of 32 vectors, 16 for tf32). At N <= 8 only on graphs of this many vectors,
# where it measured faster than 4 (docs/TUNING.md).
NARROW_LANES_MIN_VECTORS = 500_000


class GatAttention(NamedTuple):
    """A launch's A computed as GAT's attention instead of read (kernels/spmm.cu, GatValues):
    P on the softmax's pattern, or with ``transposed`` P^T on A^T's, from el float32 [n_cols
    of the softmax's A] and ``gat_softmax_cuda``'s row records (float32 [8 * n_windows of that
    A, 4]); each value has the bits the softmax kernels store."""

    el: torch.Tensor
    row_info: torch.Tensor
    slope: float
    transposed: bool


# Precisions whose SpMM computes GAT's attention as it stages it, and their block width (the
# layers' formats: kernels are instantiated for these only)
GAT_BLOCK_WIDTH = {"fp16": 8, "bf16": 8, "tf32": 4}
_GAT_VALUES = {None: "", False: ", fg::GAT_P", True: ", fg::GAT_P_T"}  # by GatAttention.transposed


def _kernel_name(
    precision: str,
    k: int,
    out_dtype: torch.dtype,
    lane_features: int,
    gat_transposed: bool | None = None,
) -> str:
    return (
        f"fg::spmm_tc<{_PRECISION_ID[precision]}, {k}, {TAG[out_dtype]}, {lane_features}"
        f"{_GAT_VALUES[gat_transposed]}>"
    )


SOURCE = register(
    "spmm.cu",
    [_kernel_name(p, k, d, f) for p in STORAGE for k in (8, 4) for d in TAG for f in (2, 4, 8)]
    + [
        _kernel_name(p, k, d, f, t)
        for p, k in GAT_BLOCK_WIDTH.items()
        for d in TAG
        for f in (2, 4, 8)
        for t in (False, True)
    ]
    + [f"fg::spmm_reduce<{tag}>" for tag in TAG.values()],
)


# Values tensors a launch has read (the entry dies with the tensor, and misses once it is
# modified in place): a later launch may stage them before waiting for the kernel ahead of it,
# as they were written before that earlier launch (kernels/common.cuh's preamble). GCN's
# normalised values are read this way every step; AGNN's and GAT's attention is new every call.
_VALUES_READ = TensorCache()
NO_PREAMBLE, PATTERN, PATTERN_AND_VALUES = 0, 1, 2  # kernels/spmm.cu: Preamble


def preamble_for(seg, vals: torch.Tensor | None, dependent: bool) -> int:
    """What a launch (``dependent``: as a programmatic dependent) on the segments ``seg`` with
    the values ``vals`` may stage before waiting for the kernel ahead of it."""
    if not (dependent and seg.launched):
        return NO_PREAMBLE
    return PATTERN_AND_VALUES if vals is not None and _VALUES_READ.get(vals) else PATTERN


# (seg_vectors, ways) by graph size: a segment of at most seg_vectors vectors goes to one block,
# whose warps cut each feature chunk's vectors into `ways` runs and add their sums in shared
# memory. Small graphs take long segments split several ways (a short critical path: one
# wave of blocks, no partial sums in global memory), large ones long segments in one run each
# (fewer, fuller warps). The rows come from sweeps of benchmarks/spmm_sweep.py (docs/TUNING.md).
# Rows: (fewer vectors than, seg_vectors, ways).
NARROW_SPLIT = ((100_000, 256, 4), (180_000, 128, 2), (450_000, 256, 2))  # N <= 32
WIDE_SPLIT = ((12_000, 256, 2), (180_000, 128, 1))  # N > 32
LARGE_SPLIT = (256, 1)
# N > 32: graphs past WIDE_SPLIT's first row take the large split from this many vectors x N on
# too (180k vectors at N = 128, as the rows say; 90k at N = 256)
LARGE_SPLIT_WORK = 180_000 * 128


def work_split(n: int, n_vectors: int) -> tuple[int, int]:
    """(seg_vectors, ways) of the SpMM for N = n on a graph of n_vectors vectors."""
    rows = NARROW_SPLIT if n <= 32 else WIDE_SPLIT
    if n > 32 and n_vectors >= rows[0][0] and n_vectors * n >= LARGE_SPLIT_WORK:
        return LARGE_SPLIT
    for limit, seg, ways in rows:
        if n_vectors < limit:
            return seg, ways
    return LARGE_SPLIT


def lane_features(n: int, n_vectors: int, precision: str) -> int:
    """Consecutive features a lane gathers per vector (a warp covers 8 times as many)."""
    if 8 < n <= 16 or (n <= 8 and n_vectors >= NARROW_LANES_MIN_VECTORS):
        return 2
    if n <= 64:
        return 4
    if precision == "tf32":
        return 8 if n_vectors >= TF32_WIDE_LANES_MIN_VECTORS else 4
    return 8 if n_vectors * n >= WIDE_LANES_MIN_WORK else 4


def chunk_warps(chunks: int, ways: int) -> int:
    """Warps of a block per way of one staged segment: one per feature chunk, up to the
    block's 4 / ways (a power of two)."""
    return min(1 if chunks == 1 else 2 if chunks == 2 else WARPS_PER_BLOCK, WARPS_PER_BLOCK // ways)


def spmm_tensor_core(
    row_ptr,
    col_idx,
    vec_mask,
    values,
    x,
    n_rows: int,
    k: int,
    precision: str,
    out_dtype: torch.dtype,
    *,
    seg_vectors: int | None = None,
    fuse_max_parts: int = FUSE_MAX_PARTS,
    features: int | None = None,
    ways: int | None = None,
    gat: GatAttention | None = None,
    dense_windows=None,
) -> torch.Tensor:
    """Y = A @ X on tensor cores; precision in {"fp16", "bf16", "tf32"}, fp32 accumulation.
    x [n_cols, N] of any float dtype (rounded to the precision's storage type first).
    With ``gat`` (at the block width of GAT_BLOCK_WIDTH) A's values are GAT's attention,
    computed as they are staged, and ``values`` is None.
    ``seg_vectors`` (a power of two, 64 to 256), ``ways`` (1, 2 or 4), ``fuse_max_parts`` and
    ``features`` (per lane, 2, 4 or 8) override the tuned work split; at one
    ``seg_vectors`` and ``ways`` the result is the same bits whatever the others are.
    ``dense_windows`` (a hybrid.WindowSplit): only the windows it leaves on tensor cores are
    computed, the other rows of the output are left unwritten (hybrid.spmm_hybrid fills them)."""
    n = x.shape[1]
    if (values is None) != (gat is not None):
        raise ValueError("spmm: give A's values, or GAT's attention to compute them from, not both")
    if gat is None:
        gat_args = (0, 0, 0.0)
    else:
        if GAT_BLOCK_WIDTH.get(precision) != k:
            raise ValueError(
                f"spmm: GAT's attention is computed for fp16/bf16 at block width 8 and tf32 at "
                f"4, got "
                f"{precision} at k = {k}"
            )
        # P: el per column (X's rows), a record per row of A's windows; P^T: el per row, a record
        # per column
        el_rows, records = (
            (n_rows, x.shape[0]) if gat.transposed else (x.shape[0], 8 * (row_ptr.numel() - 1))
        )
        info = gat.row_info
        enough = info.shape[0] >= records if gat.transposed else info.shape[0] == records
        if gat.el.shape != (el_rows,) or info.dim() != 2 or info.shape[1] != 4 or not enough:
            raise ValueError(
                f"spmm: GAT's el must be [{el_rows}] and its row records [{records}, 4], got "
                f"{tuple(gat.el.shape)} and {tuple(info.shape)}"
            )
        # contiguous (a GAT layer's el is often a strided view), held through the launch
        el, row_info = operand(gat.el, torch.float32), operand(gat.row_info, torch.float32)
        gat_args = (ptr(el), ptr(row_info), gat.slope)
    xs, vals, out = dense_operands(x, values, n_rows, precision, out_dtype)
    if n == 0 or n_rows == 0:
        return out
    features = features or lane_features(n, col_idx.numel(), precision)
    tuned_seg, tuned_ways = work_split(n, col_idx.numel())
    ways = ways or tuned_ways
    if ways not in (1, 2, 4):
        raise ValueError(f"spmm: ways must be 1, 2 or 4 (the warps of a block), got {ways}")
    if features not in (2, 4, 8):
        raise ValueError(f"spmm: features per lane must be 2, 4 or 8, got {features}")
    seg = segments_for(row_ptr, seg_vectors or tuned_seg, col_idx)
    stream = current_stream(x.device)
    if dense_windows is not None:
        seg = dense_windows.segments(seg, on_cuda_cores=False)
    if seg.n_segments:
        workspace = split_workspace(seg, n, out)
        aligned = n % 8 == 0 and aligned16(xs, out, workspace)
        fuse_max = fuse_max_parts if aligned else 0  # the in-kernel sum reads whole 16-byte groups
        chunks = -(-n // (8 * features))
        per_way = chunk_warps(chunks, ways)
        per_segment = per_way * ways
        segments_per_block = WARPS_PER_BLOCK // per_segment
        chunk_groups = -(-chunks // per_way)
        segment_groups = -(-seg.n_segments // segments_per_block)
        staged_bytes = (
            5 + 8 * STORAGE[precision].itemsize
        )  # a column index, a mask and 8 values per vector
        way_bytes = (
            WARPS_PER_BLOCK * 32 * 2 * features * 4 if ways > 1 else 0
        )  # fp32 sums of every lane
        kernel = _kernel_name(
            precision, k, out_dtype, features, None if gat is None else gat.transposed
        )
        dependent = launched_dependent(SOURCE, kernel, x.device)
        preamble = preamble_for(seg, vals, dependent)
        launch(
            SOURCE,
            kernel,
            x.device,
            (segment_groups, chunk_groups),
            (32 * WARPS_PER_BLOCK,),
            ptr(col_idx),
            0 if vals is None else ptr(vals),
            ptr(vec_mask),
            *seg.pointers("window", "first", "count", "part", "split", "split_part", "split_count"),
            ptr(workspace),
            ptr(seg.counters(chunks, stream)),
            fuse_max,
            seg.n_segments,
            seg.seg_vectors,
            per_segment,
            ways,
            n_rows,
            n,
            aligned,
            preamble,
            ptr(xs),
            ptr(out),
            *gat_args,
            shmem=segments_per_block * seg.seg_vectors * staged_bytes + way_bytes,
            stream=stream,
        )
        seg.launched = True
        # only preambles read it
        if dependent and vals is not None and preamble != PATTERN_AND_VALUES:
            _VALUES_READ.set(vals, True)
        reduce_split_windows(seg, workspace, n_rows, out, longer_than=fuse_max)
    return out


def dense_operands(x, values, n_rows: int, precision: str, out_dtype: torch.dtype):
    """(x in the precision's storage type, values as float32 (None stays None), both contiguous;
    the empty output [n_rows, N] in ``out_dtype``) for a tensor-core SpMM launch."""
    xs = operand(x, STORAGE[precision])
    vals = None if values is None else operand(values, torch.float32)
    return xs, vals, torch.empty(n_rows, x.shape[1], dtype=out_dtype, device=x.device)


def split_workspace(seg, n: int, out: torch.Tensor) -> torch.Tensor:
    """fp32 partial sums [n_parts, 8, n] of the segments of split windows (16-byte aligned),
    or ``out`` itself when no window is split: the kernels then never touch the workspace,
    and no allocation is made."""
    if not seg.n_parts:
        return out
    return torch.empty(seg.n_parts * 8 * n, dtype=torch.float32, device=out.device)


def reduce_split_windows(
    seg, workspace: torch.Tensor, n_rows: int, out: torch.Tensor, longer_than: int = 0
) -> None:
    """out's rows of the split windows of more than ``longer_than`` segments = the sums of their
    segments' partial sums in ``workspace`` (kernels/spmm.cu, spmm_reduce); nothing when there
    are none."""
    if not seg.n_parts:
        return
    windows, parts, counts = seg.split_longer_than(longer_than)
    if not windows.numel():
        return
    n = out.shape[1]
    total = windows.numel() * 8 * n
    launch(
        SOURCE,
        f"fg::spmm_reduce<{TAG[out.dtype]}>",
        out.device,
        stride_blocks(total, 256),
        (256,),
        ptr(workspace),
        ptr(windows),
        ptr(parts),
        ptr(counts),
        windows.numel(),
        n_rows,
        n,
        ptr(out),
    )
