"""GCOO (flashgnn.formats.GCOO): the arrays against an independent reading of the format's
definition, exact to_csr round trips, the strip-height rule and strict input checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn.formats import GCOO
from flashgnn.formats.gcoo import GROUP_REUSE, GROUPS, choose_group, column_reuse
from tests.helpers import graph_params, random_csr


def _check_layout(g: GCOO, m: sp.csr_matrix) -> None:
    """Every array of ``g`` against the definition, read from scipy's CSR ``m`` by loops."""
    p = g.group
    n_groups = -(-m.shape[0] // p)
    assert g.n_groups == n_groups and g.group_ptr.dtype == torch.int64
    assert g.rows.dtype == torch.int32 and g.cols.dtype == torch.int32
    assert g.group_nnz.dtype == torch.int32 and g.perm.dtype == torch.int64
    rows, cols, vals = g.rows.tolist(), g.cols.tolist(), g.values.tolist()
    ptr = g.group_ptr.tolist()
    coo = m.tocoo()
    for s in range(n_groups):
        lo, hi = s * p, min((s + 1) * p, m.shape[0])
        expect = sorted((c, r, v) for r, c, v in zip(coo.row, coo.col, coo.data) if lo <= r < hi)
        got = list(
            zip(cols[ptr[s] : ptr[s + 1]], rows[ptr[s] : ptr[s + 1]], vals[ptr[s] : ptr[s + 1]])
        )
        assert got == [(int(c), int(r), float(v)) for c, r, v in expect]
        assert g.group_nnz[s] == len(expect)
    # perm places CSR order into GCOO order
    assert torch.equal(g.values[g.perm], torch.as_tensor(m.data))
    assert np.array_equal(g.cols[g.perm].numpy(), m.indices)


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (33, 40), (64, 9), (0, 4), (5, 0)])
def test_layout_and_round_trip(group, shape, rng):
    m = random_csr(*shape, 0.3, rng)
    if shape == (7, 5):  # empty rows and a full row
        m = m.tolil()
        m[2, :] = 0
        m[4, :] = np.arange(1, 6)
        m = m.tocsr()
        m.eliminate_zeros()
        m.sort_indices()
    g = GCOO.from_csr(m.indptr, m.indices, m.data, shape[1], group=group)
    _check_layout(g, m)
    indptr, indices, values = g.to_csr()
    assert np.array_equal(indptr.numpy(), m.indptr)
    assert np.array_equal(indices.numpy(), m.indices)
    assert torch.equal(values, torch.as_tensor(m.data))
    assert torch.equal(g.to_dense(), torch.as_tensor(m.toarray()))
    assert g.shape == shape and g.nnz == m.nnz


def test_values_and_moves(rng):
    m = random_csr(20, 30, 0.2, rng)
    g = GCOO.from_csr(m.indptr, m.indices, None, 30, group=4)
    assert g.values.dtype == torch.float32 and bool((g.values == 1).all())
    csr_vals = torch.as_tensor(m.data)
    placed = g.values_from_csr(csr_vals)
    assert torch.equal(g.with_values(placed).to_csr()[2], csr_vals)
    assert g.to("cpu").group_ptr is not None
    with pytest.raises(ValueError, match="CSR order"):
        g.values_from_csr(csr_vals[:-1])
    with pytest.raises(ValueError, match="value layout"):
        g.with_values(placed[:-1])


@pytest.mark.parametrize("group", [0, 3, 16, True, 2.0, "4"])
def test_bad_group(group):
    with pytest.raises(ValueError, match="group must be one of"):
        GCOO.from_csr([0, 1], [0], group=group)


@pytest.mark.parametrize(
    "indptr, indices, values, n_cols, match",
    [
        ([0, 2], [1, 0], None, 2, "unsorted"),
        ([0, 2], [1, 1], None, 2, "duplicate"),
        ([0, 1], [3], None, 2, "out of range"),
        ([1, 1], [0], None, 2, r"indptr\[0\]"),
        ([0, 1], [0], [1.0, 2.0], 2, "one entry per nonzero"),
        ([0, 1], [0], [1], 2, "floating point"),
        ([0, 1], [0.0], None, 2, "int32 or int64"),
    ],
)
def test_bad_csr(indptr, indices, values, n_cols, match):
    v = None if values is None else torch.tensor(values)
    with pytest.raises(ValueError, match=match):
        GCOO.from_csr(torch.tensor(indptr), torch.tensor(indices), v, n_cols, group=2)


def test_column_reuse_and_rule():
    # rows 0-3 share columns 0..9: strips of 4 read each column once for 4 nonzeros
    rows = np.repeat(np.arange(4), 10)
    cols = np.tile(np.arange(10), 4)
    m = sp.csr_matrix((np.ones(40), (rows, cols)), shape=(4, 10))
    assert column_reuse(m.indptr, m.indices, 1) == 1.0
    assert column_reuse(m.indptr, m.indices, 2) == 2.0
    assert column_reuse(m.indptr, m.indices, 4) == 4.0
    assert choose_group(m.indptr, m.indices) == 8  # reuse 4.0 at p = 8 too
    # a diagonal: no column is shared, CSR order
    eye = sp.identity(50, format="csr")
    assert column_reuse(eye.indptr, eye.indices, 8) == 1.0
    assert choose_group(eye.indptr, eye.indices) == 1
    # pairs of equal rows: reuse 2.0 at p = 2 and p = 4, enough at 2 only
    pairs = sp.csr_matrix(np.kron(np.eye(4), np.ones((2, 6))))
    assert column_reuse(pairs.indptr, pairs.indices, 4) == 2.0
    assert choose_group(pairs.indptr, pairs.indices) == 2
    # rows of 20 distinct columns: no reuse and enough work per row, CSR order
    wide = sp.csr_matrix((np.ones(200), np.arange(200), np.arange(0, 201, 20)), shape=(10, 200))
    assert choose_group(wide.indptr, wide.indices) == 1
    # short rows of distinct columns: the row kernel packs them, no strips
    five = sp.csr_matrix((np.ones(50), np.arange(50), np.arange(0, 51, 5)), shape=(10, 50))
    assert choose_group(five.indptr, five.indices) == 1
    assert [p for p, _ in GROUP_REUSE] == sorted((p for p in GROUPS if p > 1), reverse=True)


@pytest.mark.parametrize("name", graph_params())
def test_real_graphs_round_trip(name, load_graph):
    m = load_graph(name)
    group = choose_group(m.indptr, m.indices)
    g = GCOO.from_csr(m.indptr, m.indices, m.data, m.shape[1], group=group)
    indptr, indices, values = g.to_csr()
    assert np.array_equal(indptr.numpy(), m.indptr)
    assert np.array_equal(indices.numpy(), m.indices)
    assert torch.equal(values, torch.as_tensor(m.data))
    assert int(g.group_nnz.sum()) == m.nnz
    ptr = g.group_ptr
    # within each strip, columns ascend (rows ascending within a column)
    key = g.cols.to(torch.int64) * m.shape[0] + g.rows
    inside = torch.ones(m.nnz, dtype=torch.bool)
    inside[ptr[:-1][ptr[:-1] < m.nnz]] = False  # a strip's first nonzero starts afresh
    assert bool(((key[1:] > key[:-1]) | ~inside[1:]).all())
