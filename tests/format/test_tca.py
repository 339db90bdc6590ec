"""TCA-SpMM's CSR (flashgnn.formats.TCACSR): the CSR kept as given, the warp schedule against the
paper's rule read by hand, the MMA count and Eq. (1) on small cases, and input checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn.formats import TCACSR
from flashgnn.formats.tca import ROW_WARPS_MAX, eq1_mma_bound, row_q, row_warp_counts
from tests.helpers import graph_params, random_csr


def _rows_of(counts) -> sp.csr_matrix:
    """A CSR whose row i has counts[i] nonzeros in columns 0 .. counts[i] - 1."""
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = np.concatenate([np.arange(c) for c in counts]) if sum(counts) else np.zeros(0)
    n_cols = max(max(counts), 1)
    return sp.csr_matrix(
        (np.ones(int(indptr[-1])), indices.astype(np.int32), indptr), (len(counts), n_cols)
    )


@pytest.mark.parametrize("shape", [(1, 1), (9, 13), (70, 300), (0, 3), (4, 0)])
def test_round_trip_keeps_the_csr(shape, rng):
    m = random_csr(*shape, 0.4, rng, dtype=np.float16)
    t = TCACSR.from_csr(m.indptr, m.indices, m.data, shape[1])
    indptr, indices, values = t.to_csr()
    assert np.array_equal(indptr.numpy(), m.indptr) and np.array_equal(indices.numpy(), m.indices)
    assert values.dtype == torch.float16 and torch.equal(values, torch.as_tensor(m.data))
    assert t.indices.dtype == torch.int32 and t.indptr.dtype == torch.int64
    assert torch.equal(t.to_dense(), torch.as_tensor(m.astype(np.float64).toarray()).half())
    assert t.shape == shape and t.nnz == m.nnz and t.n_slots == m.nnz


def test_schedule_by_hand():
    # rows of 0, 3, 8, 9, 16, 17, 33, 64, 65, 129 and 5000 nonzeros
    counts = [0, 3, 8, 9, 16, 17, 33, 64, 65, 129, 5000]
    t = TCACSR.from_csr(*(lambda m: (m.indptr, m.indices))(_rows_of(counts)))
    warps = [0, 1, 1, 2, 2, 4, 8, 8, 16, 24, ROW_WARPS_MAX]
    assert row_q(torch.tensor(counts)).tolist() == [0, 1, 1, 2, 2, 4, 8, 8, 8, 8, 8]
    assert row_warp_counts(torch.tensor(counts)).tolist() == warps
    expect_row = [r for r, w in enumerate(warps) for _ in range(w)]
    expect_rank = [k for w in warps for k in range(w)]
    expect_warps = [w for w in warps for _ in range(w)]
    assert t.warp_row.tolist() == expect_row
    assert t.warp_rank.tolist() == expect_rank
    assert t.row_warps.tolist() == expect_warps
    assert t.warp_row.dtype == t.warp_rank.dtype == t.row_warps.dtype == torch.int32


def test_mma_count_and_eq1_by_hand():
    # a row of 8 nonzeros: q = 1, 16 outputs per MMA; 20: q = 4, 4 outputs; 64: q = 8, 2 outputs;
    # 100: 2 chunks of 64, 2 outputs per MMA each
    t = TCACSR.from_csr(*(lambda m: (m.indptr, m.indices))(_rows_of([8, 20, 0, 64, 100])))
    # N = 32: 2 + 8 + 0 + 16 + 2 * 16
    assert t.mma_count(32) == 2 + 8 + 16 + 32
    # N = 5: ceil(5/16) + ceil(5/4) + ceil(5/2) + 2 ceil(5/2)
    assert t.mma_count(5) == 1 + 2 + 3 + 6
    assert t.mma_count(0) == 0
    # Eq. (1): sum_i ceil(nnz_i / 64) * N * 8 / 16 = (1 + 1 + 0 + 1 + 2) * N / 2
    assert eq1_mma_bound([8, 20, 0, 64, 100], 32) == 80.0
    assert eq1_mma_bound([8, 20, 0, 64, 100], 5) == 12.5
    assert eq1_mma_bound([], 32) == 0.0
    # at even N the kernel issues at most the bound: only short rows issue fewer
    for n in (2, 32, 128, 256):
        assert t.mma_count(n) <= eq1_mma_bound(t.row_nnz(), n)
    long_rows = TCACSR.from_csr(*(lambda m: (m.indptr, m.indices))(_rows_of([64, 128, 130])))
    assert long_rows.mma_count(64) == eq1_mma_bound(long_rows.row_nnz(), 64)


def test_to_and_with_values(rng):
    m = random_csr(10, 10, 0.3, rng)
    t = TCACSR.from_csr(m.indptr, m.indices, m.data)
    assert t.n_cols == int(m.indices.max()) + 1
    moved = t.to("cpu")
    assert torch.equal(moved.warp_row, t.warp_row)
    twice = t.with_values(t.values * 2)
    assert torch.equal(twice.values, torch.as_tensor(m.data) * 2)
    with pytest.raises(ValueError, match="CSR order"):
        t.with_values(t.values[:-1])


@pytest.mark.parametrize(
    "indptr, indices, values, n_cols, match",
    [
        ([0, 2], [1, 0], None, 2, "unsorted"),
        ([0, 2], [1, 1], None, 2, "duplicate"),
        ([0, 1], [3], None, 2, "out of range"),
        ([0, 2, 1, 2], [0, 1], None, 2, "non-decreasing"),
        ([0, 1], [0], [1.0, 2.0], 2, "one entry per nonzero"),
        ([0, 1], [[0]], None, 2, "1-D"),
        ([0, 1], [0], None, -1, r"\[0, 2\^31\)"),
    ],
)
def test_bad_csr(indptr, indices, values, n_cols, match):
    v = None if values is None else torch.tensor(values)
    with pytest.raises(ValueError, match=match):
        TCACSR.from_csr(torch.tensor(indptr), torch.tensor(indices), v, n_cols)


@pytest.mark.parametrize("name", graph_params())
def test_real_graphs_round_trip(name, load_graph):
    m = load_graph(name)
    t = TCACSR.from_csr(m.indptr, m.indices, m.data, m.shape[1])
    indptr, indices, values = t.to_csr()
    assert np.array_equal(indptr.numpy(), m.indptr) and np.array_equal(indices.numpy(), m.indices)
    assert torch.equal(values, torch.as_tensor(m.data))
    nnz = np.diff(m.indptr)
    assert t.n_warps == int(row_warp_counts(torch.as_tensor(nnz, dtype=torch.int64)).sum())
    assert set(t.warp_row.unique().tolist()) == set(np.flatnonzero(nnz).tolist())
