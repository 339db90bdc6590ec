"""Shared by test_spmm_gpu.py and test_sddmm_gpu.py: error bounds, NaN-poisoned launches, and
the sparse matrices the public ops are checked on (the random shapes of kernel_cases.py, every
real graph of the datasets folder and a sample of the rectangular DLMC matrices), each with
fixed random values and cached ME-BCRS formats per device and block width."""

from __future__ import annotations

import contextlib
import functools
import zlib

import numpy as np
import scipy.sparse as sp
import torch

from flashgnn import MEBCRS, ops
from flashgnn._cuda import segments
from tests.cuda.kernel_cases import CASES
from tests.helpers import (
    data_dir,
    dlmc_spread,
    graph_names,
    load_dlmc,
    load_npz_graph,
    random_values,
    rel_err,
)

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
SIZES = (1, 7, 16, 33, 64, 128, 256)
BOUND = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}
"""Relative error against float64 with fp32 accumulation, ||y - ref|| / ||ref||."""
_OUTPUT_ROUNDING = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
EMULATION_BOUND = 1e-5
"""GPU against the CPU implementation of the same precision (same input rounding, fp32
accumulation in another order)."""
STORAGE = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}


def bound(precision: str, out_dtype: torch.dtype) -> float:
    """The bound of ``precision``, or of the output's own rounding when that is coarser (an
    fp32 product stored as bfloat16 is off by up to 2^-9 per element)."""
    return max(BOUND[precision], _OUTPUT_ROUNDING.get(out_dtype, 0.0))


def default_k(precision: str) -> int:
    return 4 if precision == "tf32" else 8


def seed_of(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def real_matrix_names() -> list[str]:
    """``graph:<name>`` for every graph file, ``dlmc:<i>`` for the DLMC sample (when present)."""
    root = data_dir()
    dlmc = root is not None and any(root.glob("dlmc_*.npz"))
    return [f"graph:{g}" for g in graph_names()] + (
        [f"dlmc:{i}" for i in dlmc_spread(5)] if dlmc else []
    )


@functools.cache
def matrix(name: str) -> sp.csr_matrix:
    """Canonical float32 CSR: a case of kernel_cases.CASES, ``graph:<name>`` or ``dlmc:<i>``
    (patterns only on disk, so nonzero random values are drawn), seeded by the name."""
    rng = np.random.default_rng(seed_of(name))
    if name in CASES:
        return CASES[name](rng)
    kind, _, key = name.partition(":")
    if kind == "graph":
        pattern = load_npz_graph(key)
    elif kind == "dlmc":
        ((_, pattern),) = load_dlmc([int(key)])
    else:
        raise KeyError(name)
    values = random_values(pattern.nnz, rng).astype(np.float32)
    return sp.csr_matrix((values, pattern.indices, pattern.indptr), shape=pattern.shape)


@functools.cache
def mebcrs(name: str, k: int, device: str) -> MEBCRS:
    """ME-BCRS of ``matrix(name)`` built on ``device`` (the GPU builder on "cuda")."""
    m = matrix(name)
    return MEBCRS.from_csr(
        m.indptr, m.indices, torch.from_numpy(m.data), n_cols=m.shape[1], k=k, device=device
    )


def dense(rows: int, cols: int, *seed_parts) -> torch.Tensor:
    """float32 [rows, cols] standard normal on the CPU, seeded by ``seed_parts``."""
    rng = np.random.default_rng(seed_of(rows, cols, *seed_parts))
    return torch.from_numpy(rng.standard_normal((rows, cols), dtype=np.float32))


def csr_rows(m: sp.csr_matrix) -> np.ndarray:
    """Row of every nonzero, in CSR order."""
    return np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))


@contextlib.contextmanager
def poisoned_allocations():
    """Within the block, every floating-point CUDA tensor made by ``torch.empty`` (how the ops
    allocate outputs and workspaces) starts filled with NaN, so an element a kernel fails to
    write reads back as NaN. Patching ``torch.empty`` is exact where recycling the caching
    allocator's blocks is not (small requests come from pools the trick may miss)."""
    real_empty = torch.empty

    def empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.is_cuda and t.is_floating_point():
            t.fill_(float("nan"))
        return t

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = real_empty


def run_twice_poisoned(fn, device: torch.device) -> list:
    """``fn()`` twice inside ``poisoned_allocations()`` (the first result stays alive, so the
    second call gets other memory). On the CPU it just runs twice."""
    with poisoned_allocations():
        return [fn(), fn()]


def check_gpu_spmm(
    fmt,
    m: sp.csr_matrix,
    name: str,
    precision: str,
    n: int,
    x_dtype: torch.dtype = torch.float32,
    out_fp32: bool = False,
    tol: float | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``ops.spmm(fmt, x)`` for ``fmt``, a format of ``m`` on the GPU, and x = ``dense``
    [n_cols, n] seeded by ``name``, in ``x_dtype``, run twice with poisoned allocations: each
    output on the GPU, in x's dtype (float32 with ``out_fp32``), [n_rows, n], every element
    written and within ``tol`` (default ``bound``) of float64 scipy. Returns (x on the CPU, the
    outputs)."""
    x = dense(m.shape[1], n, name).to(x_dtype)
    ref = m.astype(np.float64) @ x.double().numpy()
    out_dtype = torch.float32 if out_fp32 else x_dtype
    x_dev = x.to(fmt.device)
    outputs = run_twice_poisoned(
        lambda: ops.spmm(fmt, x_dev, precision, out_fp32=out_fp32), fmt.device
    )
    for y in outputs:
        assert y.device.type == "cuda" and y.dtype == out_dtype and y.shape == (m.shape[0], n)
        assert not torch.isnan(y).any(), "an output element was not written"
        assert rel_err(y, ref) <= (tol or bound(precision, out_dtype))
    return x, outputs


def in_both_segment_orders(monkeypatch, fmt):
    """Yield twice: with the kernels' segments longest first, then ordered by column (the
    order of long-row graphs, forced here by lowering its thresholds); asserts the two orders
    differ on ``fmt``, so that comparing what runs in each means something."""
    for min_vectors in (1 << 62, 0):
        monkeypatch.setattr(segments, "COLUMN_ORDER_MIN_VECTORS", min_vectors)
        monkeypatch.setattr(segments, "COLUMN_ORDER_WINDOW_VECTORS", 0)
        yield
    by_length = segments.segments_for(fmt.row_ptr, 64)
    by_column = segments.segments_for(fmt.row_ptr, 64, fmt.col_idx)
    assert not torch.equal(by_length.first, by_column.first), (
        "the two orders are the same on this matrix"
    )
