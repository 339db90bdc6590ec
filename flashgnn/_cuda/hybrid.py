"""The hybrid ME-BCRS SpMM's split: which windows go to CUDA cores, which stay on tensor cores.

An MMA multiplies a whole 8x1 vector whether it holds one nonzero or eight, and on real graphs
the average vector holds 1.0-1.6, so most of the tensor-core work multiplies zeros. The
CUDA-core kernel (kernels/spmm_hybrid.cu, the loop of the fp32 SpMM) forms only the real
products, but gathers a row of X per vector all the same. The cost model: a window costs the
tensor cores about the same per vector whatever its nonzeros, the CUDA cores a gather per
vector plus a product per nonzero; so a window goes to CUDA cores when its nonzeros per vector
fall below a threshold, SPARSE_BELOW, the one constant the GPU measures. Empty windows join
the CUDA-core side when any other window does (the CUDA-core kernel writes their zero rows), so
a threshold that sends every window there makes one launch.

The split is made once per pattern and threshold (the windows' nonzeros are counted on the
device, one synchronisation) and cached with the pattern, as its segments are. ``spmm_hybrid``,
the ME-BCRS SpMM op's CUDA path for fp16/bf16/tf32, launches the tensor-core SpMM (spmm.py)
on the dense windows' segments, then the CUDA-core kernel (spmm_fp32.spmm_sparse_windows) on
the sparse ones', on the same stream; each writes only its windows' rows of the output.

SPARSE_BELOW is 0 (every window on tensor cores) until it is measured
(benchmarks/hybrid_sweep.py). The environment variable FLASHGNN_HYBRID_BELOW, read at import,
sets ``forced_below``, which overrides the table for every N; the sweep sets it too."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch

from ..pattern_nnz import vector_nnz
from ..tensor_cache import TensorCache, built_for_reuse
from . import spmm as tensor_core
from . import spmm_fp32 as cuda_core
from .runtime import current_stream
from .segments import Segments

# (N at most, None for any; nonzeros per vector below which a window runs on CUDA cores), first
# row that fits N. 0 keeps every window on tensor cores.
SPARSE_BELOW = ((32, 0.0), (None, 0.0))
ENV = "FLASHGNN_HYBRID_BELOW"


def parse_below(raw: str | float) -> float:
    """A threshold of nonzeros per vector: a number >= 0 ("inf" sends every window to CUDA
    cores); ValueError otherwise."""
    try:
        below = float(raw)
    except (TypeError, ValueError):
        raise ValueError(
            f"hybrid SpMM: the threshold must be a number of nonzeros per vector, got {raw!r}"
        ) from None
    if math.isnan(below) or below < 0:
        raise ValueError(f"hybrid SpMM: the threshold must be >= 0, got {raw!r}")
    return below


def from_environment() -> float | None:
    raw = os.environ.get(ENV, "").strip()
    return parse_below(raw) if raw else None


forced_below: float | None = from_environment()


def sparse_below(n: int) -> float:
    """The threshold (nonzeros per vector) for an SpMM of N = n feature columns."""
    if forced_below is not None:
        return forced_below
    for most, below in SPARSE_BELOW:
        if most is None or n <= most:
            return below
    return 0.0


def window_sizes(row_ptr: torch.Tensor, vec_mask: torch.Tensor) -> tuple:
    """(vectors, nonzeros) of each window, int64 [n_windows] each, on row_ptr's device; row_ptr
    int64 [n_windows + 1], vec_mask uint8 [n_vectors]."""
    ends = torch.zeros(vec_mask.numel() + 1, dtype=torch.int64, device=row_ptr.device)
    torch.cumsum(vector_nnz(vec_mask), 0, out=ends[1:])
    return row_ptr[1:] - row_ptr[:-1], ends[row_ptr[1:]] - ends[row_ptr[:-1]]


def sparse_windows(row_ptr: torch.Tensor, vec_mask: torch.Tensor, below: float) -> torch.Tensor:
    """bool [n_windows] on row_ptr's device: the windows that run on CUDA cores at the threshold
    ``below``, those of fewer than ``below`` nonzeros per vector, and the empty windows too when
    any such window exists. No host synchronisation."""
    vectors, nnz = window_sizes(row_ptr, vec_mask)
    sparse = (vectors > 0) & (nnz < below * vectors.double())
    return sparse | ((vectors == 0) & sparse.any())


@dataclass
class WindowSplit:
    """The windows of one pattern on each side, and the sparse side's size (the CUDA-core
    kernel's launch rule reads it)."""

    sparse: torch.Tensor  # bool [n_windows]: on CUDA cores
    dense: torch.Tensor  # bool [n_windows]: on tensor cores
    n_dense: int  # windows on tensor cores
    sparse_vectors: int  # vectors of the windows on CUDA cores
    sparse_nnz: int  # their nonzeros
    _segments: dict = field(default_factory=dict, repr=False)

    def segments(self, seg: Segments, on_cuda_cores: bool) -> Segments:
        """The segments of ``seg`` (all of the pattern's windows) on one side, cached."""
        key = (id(seg), on_cuda_cores)
        hit = self._segments.get(key)
        if hit is None:  # seg kept in the entry, so its id is not reused while cached
            keep = self.sparse if on_cuda_cores else self.dense
            hit = self._segments[key] = (seg, built_for_reuse(lambda: seg.of_windows(keep)))
        return hit[1]


def _build(row_ptr: torch.Tensor, vec_mask: torch.Tensor, below: float) -> WindowSplit | None:
    sparse = sparse_windows(row_ptr, vec_mask, below)
    vectors, nnz = window_sizes(row_ptr, vec_mask)
    totals = torch.stack([sparse.sum(), (vectors * sparse).sum(), (nnz * sparse).sum()])
    n_sparse, n_vectors, n_nnz = totals.tolist()
    if n_sparse == 0:
        return None
    return WindowSplit(sparse, ~sparse, sparse.numel() - n_sparse, n_vectors, n_nnz)


_CACHE = TensorCache()  # row_ptr -> {(id(vec_mask), below): (vec_mask, WindowSplit or None)}


def window_split(row_ptr: torch.Tensor, vec_mask: torch.Tensor, below: float) -> WindowSplit | None:
    """The split of the pattern (row_ptr, vec_mask) at the threshold ``below``, cached while
    row_ptr lives; None when every window stays on tensor cores (``below`` 0, no window, or
    none sparse enough). Only a cache miss synchronises."""
    if below <= 0 or row_ptr.numel() <= 1:
        return None
    built = _CACHE.get(row_ptr)
    if built is None:
        built = _CACHE.set(row_ptr, {})
    key = (id(vec_mask), below)
    hit = built.get(key)
    if hit is None:  # vec_mask kept in the entry, so its id is not reused while cached
        hit = built[key] = (vec_mask, built_for_reuse(lambda: _build(row_ptr, vec_mask, below)))
    return hit[1]


def spmm_hybrid(
    row_ptr, col_idx, vec_mask, values, x, n_rows: int, k: int, precision: str, out_dtype
) -> torch.Tensor:
    """Y = A @ X for A in ME-BCRS (arguments and result as spmm.spmm_tensor_core's, values
    given), precision fp16, bf16 or tf32: the windows ``window_split`` sends to CUDA cores at
    ``sparse_below(N)`` there, the others on tensor cores; every window on tensor cores when
    there is no split, or for an output type the CUDA-core kernel is not instantiated for
    (spmm_fp32.HYBRID_OUTPUTS)."""
    split = None
    if out_dtype in cuda_core.HYBRID_OUTPUTS[precision][1]:
        split = window_split(row_ptr, vec_mask, sparse_below(x.shape[1]))
    if split is None:
        return tensor_core.spmm_tensor_core(
            row_ptr, col_idx, vec_mask, values, x, n_rows, k, precision, out_dtype
        )
    # converted once, for both launches (the tensor-core launcher takes them as they are)
    xs, vals, _ = tensor_core.dense_operands(x, values, 0, precision, out_dtype)
    out = tensor_core.spmm_tensor_core(
        row_ptr, col_idx, vec_mask, vals, xs, n_rows, k, precision, out_dtype, dense_windows=split
    )
    if xs.shape[1] and n_rows:
        stream = current_stream(x.device)
        cuda_core.spmm_sparse_windows(
            split, row_ptr, col_idx, vec_mask, vals, xs, out, k, precision, stream
        )
    return out
