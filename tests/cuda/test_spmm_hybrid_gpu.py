"""The hybrid SpMM (flashgnn/_cuda/hybrid.py: sparse windows on CUDA cores, kernels/spmm_hybrid.cu,
the rest on tensor cores) through flashgnn.ops.spmm, against float64 scipy, at the thresholds
0 (every window on tensor cores), 2 and infinity (every window on CUDA cores); outputs are
checked for unwritten rows by poisoning the allocator with NaN.

What is the same bits and what is not: at any threshold the rows of the windows left on
tensor cores are the same bits as the all-tensor-core result (their segments, work split and
sums are unchanged). The CUDA-core rows see the same rounded inputs and exact fp32 products,
but sum them in another order, so they are held to the precision's bound against float64 and
to 1e-5 against the CPU implementation of the same precision."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn._cuda import hybrid
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.ops import spmm
from tests.helpers import GPU, rel_err
from tests.ops.gpu_op_checks import (
    EMULATION_BOUND,
    bound,
    default_k,
    dense,
    matrix,
    mebcrs,
    real_matrix_names,
    run_twice_poisoned,
)

pytestmark = GPU

THRESHOLDS = (0.0, 2.0, math.inf)
PRECISIONS = ("fp16", "bf16", "tf32")
WIDTHS = (1, 7, 32, 100, 128, 256)
STORAGE = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}
CASES = ("hub_1003x20011", "square_61x61", "tall_100x7", "one_row_1x50", "all_empty_10x5")


def odd_matrix(n_rows: int, n_cols: int, seed: int) -> sp.csr_matrix:
    """Canonical float32 CSR, rows not a multiple of 8: power-law row lengths (vectors of about
    one nonzero), some rows empty, and every fifth window's rows on 12 shared columns (full
    vectors, which stay on tensor cores at a threshold of 2)."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum((rng.pareto(1.2, n_rows) * 2).astype(np.int64), n_cols)
    lengths[rng.random(n_rows) < 0.1] = 0
    rows = [np.repeat(np.arange(n_rows), lengths)]
    cols = [np.concatenate([rng.choice(n_cols, k, replace=False) for k in lengths] + [[]])]
    for w in range(0, n_rows // 8, 5):
        shared = rng.choice(n_cols, min(12, n_cols), replace=False)
        rows.append(np.repeat(np.arange(8 * w, 8 * w + 8), shared.size))
        cols.append(np.tile(shared, 8))
    rows, cols = np.concatenate(rows), np.concatenate(cols).astype(np.int64)
    a = sp.csr_matrix(
        (rng.standard_normal(rows.size).astype(np.float32), (rows, cols)), shape=(n_rows, n_cols)
    )
    a.sum_duplicates()
    a.sort_indices()
    return a


def gpu_format(a: sp.csr_matrix, k: int) -> MEBCRS:
    return MEBCRS.from_csr(
        a.indptr, a.indices, torch.from_numpy(a.data), n_cols=a.shape[1], k=k
    ).to("cuda")


def at_threshold(monkeypatch, below: float, fn):
    monkeypatch.setattr(hybrid, "forced_below", below)
    return run_twice_poisoned(fn, "cuda")


def check(
    monkeypatch,
    a: sp.csr_matrix,
    fmt,
    precision,
    n,
    *,
    out_fp32,
    x_dtype,
    values=None,
    x_offset=0,
    seed=0,
):
    """Every threshold: dtype, shape, no unwritten element, the precision's bound against
    float64 scipy (on the values as given), the CPU implementation within EMULATION_BOUND with
    out_fp32, and the tensor-core rows the same bits as the all-tensor-core result."""
    n_rows, n_cols = a.shape
    x = dense(n_cols, n, seed).to(x_dtype)
    flat = torch.cat([x.new_zeros(x_offset), x.flatten()]).to("cuda")
    x_dev = flat[x_offset:].view(n_cols, n)
    vals = fmt.values if values is None else values
    a64 = sp.csr_matrix(a, dtype=np.float64)
    if values is not None:  # the same nonzeros, the custom values in the value layout
        a64 = custom_csr(fmt, values)
    ref = a64 @ x.double().numpy()
    out_dtype = torch.float32 if out_fp32 else x_dtype
    results = {}
    for below in THRESHOLDS:
        for y in at_threshold(
            monkeypatch,
            below,
            lambda: spmm(fmt, x_dev, precision, values=values, out_fp32=out_fp32),
        ):
            assert y.dtype == out_dtype and y.shape == (n_rows, n)
            assert not torch.isnan(y).any(), f"unwritten output at threshold {below}"
            assert rel_err(y, ref) <= bound(precision, out_dtype), below
        results[below] = y
        if out_fp32:
            cpu = spmm(fmt.to("cpu"), x, precision, values=vals.cpu(), out_fp32=True)
            assert rel_err(y, cpu) <= EMULATION_BOUND, below
    all_tc = results[0.0]
    for below in THRESHOLDS[1:]:
        split = hybrid.window_split(fmt.row_ptr, fmt.vec_mask, below)
        if split is None:
            assert torch.equal(results[below], all_tc)
            continue
        rows = split.dense.repeat_interleave(8)[:n_rows]
        assert torch.equal(results[below][rows], all_tc[rows]), below


def custom_csr(fmt: MEBCRS, values: torch.Tensor) -> sp.csr_matrix:
    """float64 scipy matrix of fmt's pattern with ``values`` (value layout) as its values."""
    coords = fmt.to("cpu").slot_coords()
    v = values.detach().cpu().double()[coords.slot].numpy()
    return sp.csr_matrix((v, (coords.row.numpy(), coords.col.numpy())), shape=fmt.shape)


@pytest.mark.parametrize("out_fp32", [False, True])
@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", ["odd_1003x517", "odd_37x2001", *CASES])
def test_hybrid_matches_float64(monkeypatch, case, precision, n, out_fp32):
    if case.startswith("odd_"):
        rows, cols = map(int, case[4:].split("x"))
        a = odd_matrix(rows, cols, rows)
    else:
        a = matrix(case)
    fmt = gpu_format(a, default_k(precision))
    check(monkeypatch, a, fmt, precision, n, out_fp32=out_fp32, x_dtype=STORAGE[precision])


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("n", [7, 128])
def test_hybrid_with_custom_values_and_float32_x(monkeypatch, precision, n):
    a = odd_matrix(1003, 517, 5)
    fmt = gpu_format(a, default_k(precision))
    g = torch.Generator().manual_seed(n)
    values = torch.randn(fmt.values.shape, generator=g).to("cuda")
    check(monkeypatch, a, fmt, precision, n, out_fp32=True, x_dtype=torch.float32, values=values)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_hybrid_with_misaligned_x(monkeypatch, precision):
    """x starting one element into its buffer: the CUDA-core kernel's one-feature loads."""
    a = odd_matrix(203, 97, 9)
    fmt = gpu_format(a, 8)
    check(
        monkeypatch, a, fmt, precision, 128, out_fp32=False, x_dtype=STORAGE[precision], x_offset=1
    )


@pytest.mark.parametrize("name", real_matrix_names() or ["none"])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("n", [32, 128])
def test_hybrid_on_real_graphs(monkeypatch, name, precision, n):
    if name == "none":
        pytest.skip("datasets not found: set FLASHGNN_DATA")
    a = matrix(name)
    fmt = mebcrs(name, default_k(precision), "cuda")
    check(monkeypatch, a, fmt, precision, n, out_fp32=False, x_dtype=STORAGE[precision])


def test_hybrid_backward_matches_all_tensor_cores(monkeypatch):
    """The backward's A^T SpMM takes the split too; its gradients stay within the bound."""
    a = odd_matrix(1003, 517, 11)
    fmt = gpu_format(a, 8)
    x0 = dense(517, 64, "grad").to("cuda")
    grads = {}
    for below in (0.0, 2.0):
        monkeypatch.setattr(hybrid, "forced_below", below)
        x = x0.clone().requires_grad_(True)
        spmm(fmt, x, "fp16", values=None, out_fp32=True).square().sum().backward()
        grads[below] = x.grad
    assert rel_err(grads[2.0], grads[0.0]) <= 2e-3


def test_hybrid_replays_in_a_cuda_graph(monkeypatch):
    """Capture after a warm-up call (which builds the split) and replay: the same result."""
    monkeypatch.setattr(hybrid, "forced_below", 2.0)
    a = odd_matrix(1003, 517, 13)
    fmt = gpu_format(a, 8)
    x = dense(517, 128, "graph").to("cuda").half()
    eager = spmm(fmt, x, "fp16", values=None, out_fp32=False)
    assert hybrid.window_split(fmt.row_ptr, fmt.vec_mask, 2.0) is not None
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        spmm(fmt, x, "fp16", values=None, out_fp32=False)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = spmm(fmt, x, "fp16", values=None, out_fp32=False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
