"""The exact fp32 SpMM on CUDA cores (kernels/spmm_fp32.cu), read from ME-BCRS: the CUDA
path of ``precision="fp32"``, and of "tf32" where ``tf32_on_cuda_cores``. The kernel file says
why it gathers through ME-BCRS, not CSR."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..pattern_nnz import pattern_nnz
from . import spmm as tensor_core_spmm
from .runtime import launch, operand, ptr
from .segments import segments_for
from .sources import register

_FEATURES = (1, 4)  # per lane and load: 4 (16-byte loads) when N and x allow it
_LANES = (1, 2, 4, 8, 16, 32)  # per vector: a power of two
# Graphs of fewer vectors take 64-vector segments and at most 16 lanes per vector (4 warps a
# segment at N = 256), so their few windows still spread over the GPU; larger graphs keep
# segments_for's default (128-256) and lanes covering N (docs/TUNING.md).
_SHORT_SEGMENTS_BELOW = 150_000
_SHORT_SEGMENT = 64
# Above N = 128, graphs from 150k to 500k vectors take 256-vector segments and at most 16
# lanes (four feature tiles a segment at N = 256), which measured faster there (docs/TUNING.md).
_WIDE_SPLIT = (128, 500_000, 256, 16)  # (N above, vectors below, segment, lanes at most)
# Graphs under 250k vectors keep at most 16 lanes at any N, which measured faster on them;
# larger graphs take lanes covering N (docs/TUNING.md).
_NARROW_LANES_BELOW = 250_000


class Variant(NamedTuple):
    """Template choices of the kernel besides the lane layout (kernels/spmm_fp32.cu)."""

    in_flight: int  # gathers a lane keeps in flight, at most (steps of a batch issued together)
    shared: bool  # sums in shared memory, else in registers
    prefetch: bool  # the next batch's vectors loaded while this one is summed


REGISTERS = Variant(8, False, True)
SHARED = Variant(8, True, True)
SHARED_FEWER_IN_FLIGHT = Variant(4, True, True)
# Vectors of several nonzeros: the register ladder over the 8 rows does useful work, where the
# shared sums read a vector's second and later values from memory in the dependent chain.
DENSE = Variant(4, False, False)
VARIANTS = (REGISTERS, SHARED, SHARED_FEWER_IN_FLIGHT, DENSE)

# DENSE from these nonzeros per vector (and vectors), by N: (N at most, vectors, nonzeros per
# vector); the wider the rows, the more of the ladder's rows must hold a nonzero to pay.
_DENSE_FROM = ((64, 250_000, 1.07), (128, 10_000, 1.15), (None, 10_000, 1.3))
_SHARED_SUMS_ABOVE = 64  # N above which the kernel sums in shared memory (the kernel file says why)
# N <= 64 sums in shared memory too on large graphs of about one nonzero per vector whose X
# is too large for L1 (from this many vectors and rows of X, below this many nonzeros per vector)
_NARROW_SHARED_FROM = (100_000, 10_000, 1.05)
# Shared sums keep 4 gathers in flight above N = 128 on graphs of 50k+ vectors, and at any N on
# graphs of 1M+ vectors (docs/TUNING.md)
_FEWER_IN_FLIGHT_ABOVE = (128, 50_000)
_FEWER_IN_FLIGHT_FROM = 1 << 20


def kernel_variant(n: int, n_vectors: int, nnz: int, n_cols: int) -> Variant:
    """The kernel variant for N = n on a pattern of n_vectors vectors, nnz nonzeros and
    n_cols columns (X's rows): the thresholds are fitted to an A/B of the variants over the
    real graphs at N = 32, 128 and 256 (docs/TUNING.md)."""
    per_vector = nnz / max(n_vectors, 1)
    _, least_vectors, least_per_vector = next(
        row for row in _DENSE_FROM if row[0] is None or n <= row[0]
    )
    if n_vectors >= least_vectors and per_vector >= least_per_vector:
        return DENSE
    if n > _SHARED_SUMS_ABOVE:
        above, vectors = _FEWER_IN_FLIGHT_ABOVE
        fewer = n > above and n_vectors >= vectors or n_vectors >= _FEWER_IN_FLIGHT_FROM
        return SHARED_FEWER_IN_FLIGHT if fewer else SHARED
    vectors, cols, below = _NARROW_SHARED_FROM
    if n_vectors >= vectors and n_cols >= cols and per_vector < below:
        return SHARED_FEWER_IN_FLIGHT
    return REGISTERS


def _kernel(features: int, lanes: int, variant: Variant, tf32: bool = False) -> str:
    flags = ", ".join(str(f).lower() for f in (variant.shared, variant.prefetch, tf32))
    return f"fg::spmm32::spmm_fp32<{features}, {lanes}, {min(lanes, variant.in_flight)}, {flags}>"


# tf32 runs on CUDA cores (inputs rounded as read) on graphs of 1M+ vectors at N = 32 (16-byte
# loads of 8 lanes: N >= 32; up to TF32_UP_TO), the one case where they beat the tensor cores
# (docs/TUNING.md).
_TF32_LANES = (8, 16, 32)
TF32_LARGE_VECTORS = 1 << 20
TF32_UP_TO = 32

SOURCE = register(
    "spmm_fp32.cu",
    dict.fromkeys(  # variants coincide below 8 lanes
        [_kernel(vw, lanes, v) for vw in _FEATURES for lanes in _LANES for v in VARIANTS]
        + [_kernel(4, lanes, v, tf32=True) for lanes in _TF32_LANES for v in VARIANTS]
    ),
)

# The hybrid SpMM's sparse windows (kernels/spmm_hybrid.cu, flashgnn/_cuda/hybrid.py): the
# kernel's precisions (mma.cuh's Precision) and, for each, the output types instantiated (the
# precision's storage type, or float32 for out_fp32).
HYBRID_OUTPUTS = {
    "fp16": ("fg::FP16", {torch.float16: "fg::Half", torch.float32: "fg::Float"}),
    "bf16": ("fg::BF16", {torch.bfloat16: "fg::BFloat16", torch.float32: "fg::Float"}),
    "tf32": ("fg::TF32", {torch.float32: "fg::Float"}),
}


def _sparse_windows_kernel(
    features: int, lanes: int, variant: Variant, precision: str, out_dtype: torch.dtype
) -> str:
    p, tags = HYBRID_OUTPUTS[precision]
    flags = ", ".join(str(f).lower() for f in (variant.shared, variant.prefetch))
    return (
        f"fg::spmm32::spmm_sparse_windows<{features}, {lanes}, "
        f"{min(lanes, variant.in_flight)}, {flags}, {p}, {tags[out_dtype]}>"
    )


HYBRID_SOURCE = register(
    "spmm_hybrid.cu",
    dict.fromkeys(  # unaligned x or N % 4 != 0 (features 1) takes the register sums only
        _sparse_windows_kernel(vw, lanes, v, p, d)
        for p, (_, tags) in HYBRID_OUTPUTS.items()
        for d in tags
        for vw in _FEATURES
        for lanes in _LANES
        for v in (VARIANTS if vw == 4 else (REGISTERS,))
    ),
)
_WARPS = 4  # warps per block
_CONVERTIBLE = (torch.float16, torch.bfloat16, torch.float32)


def features_per_lane(n: int, x: torch.Tensor) -> int:
    """4 (16-byte loads) where N = n and x's alignment allow it, else 1."""
    return 4 if n % 4 == 0 and x.data_ptr() % 16 == 0 else 1


def tf32_on_cuda_cores(x: torch.Tensor, n_vectors: int) -> bool:
    """Whether a tf32 SpMM of x [n_cols, N] on a pattern of ``n_vectors`` vectors runs here
    (spmm_fp32 with precision "tf32") rather than on tensor cores. Reads only x's shape, dtype
    and address."""
    n = x.shape[1]
    if not 32 <= n <= TF32_UP_TO or x.dtype != torch.float32 or not x.is_contiguous():
        return False
    return features_per_lane(n, x) == 4 and n_vectors >= TF32_LARGE_VECTORS


def work_split(n: int, n_vectors: int, features: int) -> tuple[int | None, int]:
    """(segment length, None for the default of segments_for; lanes per vector): the fewest
    lanes that cover N (at most a warp), so a warp gathers 32 / lanes rows of X at once; on
    graphs of few vectors short segments of at most 16 lanes, on mid-sized graphs at wide N
    long segments of at most 16 lanes, and at most 16 lanes below 250k vectors."""
    lanes = next((lanes for lanes in _LANES if lanes * features >= n), _LANES[-1])
    if n_vectors < _SHORT_SEGMENTS_BELOW:
        return _SHORT_SEGMENT, min(lanes, 16)
    above, below, seg, most_lanes = _WIDE_SPLIT
    if n > above and n_vectors < below:
        return seg, min(lanes, most_lanes)
    return None, min(lanes, 16) if n_vectors < _NARROW_LANES_BELOW else lanes


def spmm_fp32(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    vec_mask: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    n_rows: int,
    k: int,
    *,
    seg_vectors: int | None = None,
    lanes: int | None = None,
    variant: Variant | None = None,
    precision: str = "fp32",
) -> torch.Tensor:
    """Y = A @ X in fp32 on the GPU, for A in ME-BCRS; with precision "tf32" (where
    ``tf32_on_cuda_cores``), x and the values rounded to tf32 as read.

    row_ptr int64 [n_windows + 1], col_idx int32 [n_vectors], vec_mask uint8 [n_vectors],
    values [8 * n_vectors] (block width ``k``), x [n_cols, N]; values and x float32, or
    float16/bfloat16 (widened to float32 first; float64 belongs to the reference). Returns
    float32 [n_rows, N]. Deterministic: split windows are summed in a fixed order.
    ``seg_vectors`` (a power of two, 32 to 256), ``lanes`` (per vector, a power of two) and
    ``variant`` (one of VARIANTS) override the defaults.
    """
    if k not in (8, 4):
        raise ValueError(f"k must be 8 or 4, got {k}")
    if (
        row_ptr.dtype != torch.int64
        or col_idx.dtype != torch.int32
        or vec_mask.dtype != torch.uint8
    ):
        raise ValueError(
            "row_ptr, col_idx and vec_mask must be int64, int32 and uint8, got "
            f"{row_ptr.dtype}, {col_idx.dtype} and {vec_mask.dtype}"
        )
    for name, t in (("values", values), ("x", x)):
        if t.dtype not in _CONVERTIBLE:
            raise ValueError(
                f"{name} must be float32, float16 or bfloat16 (float64 takes the reference), "
                f"got {t.dtype}"
            )
    if values.shape != (8 * col_idx.numel(),):
        raise ValueError(
            f"values must have shape ({8 * col_idx.numel()},), got {tuple(values.shape)}"
        )
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
    features = features_per_lane(n, x)
    tuned_seg, tuned_lanes = work_split(n, col_idx.numel(), features)
    lanes = lanes or tuned_lanes
    if lanes not in _LANES:
        raise ValueError(f"lanes must be one of {_LANES}, got {lanes}")
    if precision not in ("fp32", "tf32"):
        raise ValueError(f"spmm_fp32: precision must be fp32 or tf32, got {precision!r}")
    tf32 = precision == "tf32"
    if tf32 and (features != 4 or lanes not in _TF32_LANES):
        raise ValueError(
            "spmm_fp32: tf32 takes 16-byte aligned x with N % 4 == 0 and N >= 32 "
            f"(8 lanes or more), got N = {n}, {lanes} lanes"
        )
    seg = segments_for(row_ptr, seg_vectors or tuned_seg, col_idx)
    workspace = tensor_core_spmm.split_workspace(seg, n, y)
    n_tiles = -(-n // (lanes * features))
    warps = seg.n_segments * n_tiles
    variant = variant or kernel_variant(n, col_idx.numel(), pattern_nnz(vec_mask), x.shape[0])
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant}")
    launch(
        SOURCE,
        _kernel(features, lanes, variant, tf32),
        device,
        (-(-warps // _WARPS),),
        (32 * _WARPS,),
        ptr(row_ptr),
        ptr(col_idx),
        ptr(vec_mask),
        ptr(values),
        *seg.pointers("window", "begin", "part"),
        seg.n_segments,
        seg.seg_vectors,
        k.bit_length() - 1,
        n_rows,
        n,
        n_tiles,
        ptr(x),
        ptr(y),
        ptr(workspace),
        shmem=_WARPS * 8 * 32 * features * 4 if variant.shared else 0,
    )
    tensor_core_spmm.reduce_split_windows(seg, workspace, n_rows, y)
    return y


def spmm_sparse_windows(
    split,
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    vec_mask: torch.Tensor,
    values: torch.Tensor,
    xs: torch.Tensor,
    out: torch.Tensor,
    k: int,
    precision: str,
    stream: int,
) -> None:
    """The rows of ``out`` [n_rows, N] of the windows ``split`` (a hybrid.WindowSplit) sends to
    CUDA cores, from values float32 [8 * n_vectors] and xs [n_cols, N], both contiguous, xs
    in the precision's storage type (spmm.dense_operands); out float32 or that storage type
    (HYBRID_OUTPUTS). Inputs rounded to ``precision`` as read, fp32 sums; the other rows of
    out are left as they are."""
    n = xs.shape[1]
    features = features_per_lane(n, xs)
    seg_vectors, lanes = work_split(n, split.sparse_vectors, features)
    seg = split.segments(segments_for(row_ptr, seg_vectors, col_idx), on_cuda_cores=True)
    variant = (
        kernel_variant(n, split.sparse_vectors, split.sparse_nnz, xs.shape[0])
        if features == 4
        else REGISTERS
    )
    workspace = tensor_core_spmm.split_workspace(seg, n, out)
    n_tiles = -(-n // (lanes * features))
    warps = seg.n_segments * n_tiles
    launch(
        HYBRID_SOURCE,
        _sparse_windows_kernel(features, lanes, variant, precision, out.dtype),
        out.device,
        (-(-warps // _WARPS),),
        (32 * _WARPS,),
        ptr(row_ptr),
        ptr(col_idx),
        ptr(vec_mask),
        ptr(values),
        *seg.pointers("window", "begin", "part"),
        seg.n_segments,
        seg.seg_vectors,
        k.bit_length() - 1,
        out.shape[0],
        n,
        n_tiles,
        ptr(xs),
        ptr(out),
        ptr(workspace),
        shmem=_WARPS * 8 * 32 * features * 4 if variant.shared else 0,
        stream=stream,
    )
    tensor_core_spmm.reduce_split_windows(seg, workspace, out.shape[0], out)
