"""block_diagonal (diag(A, ..., A) for multi-head ops) against the format the CPU builder makes
of scipy's block-diagonal matrix, and the multi-head ops on it against one op per head."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn.formats.block_diagonal import block_diagonal, head_major, node_major, padded
from flashgnn.ops import edge_softmax, spmm
from tests.format.test_format import assert_same_format, build
from tests.helpers import random_csr


def diagonal_of(a: sp.csr_matrix, copies: int) -> sp.csr_matrix:
    """scipy's diag(A, ..., A), each copy padded to whole windows."""
    pad = sp.csr_matrix(
        (
            a.data,
            a.indices,
            np.concatenate([a.indptr, np.full(padded(a.shape[0]) - a.shape[0], a.indptr[-1])]),
        ),
        shape=(padded(a.shape[0]), padded(a.shape[1])),
    )
    out = sp.block_diag([pad] * copies, format="csr")
    out.sort_indices()
    return out


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("shape", [(13, 21), (16, 16), (40, 7)])
def test_block_diagonal_is_the_format_of_the_block_diagonal_matrix(shape, k, rng):
    a = random_csr(*shape, 0.2, rng)
    fmt = build(a, k=k)
    big = block_diagonal(fmt, 3)
    big.validate()
    assert_same_format(big, build(diagonal_of(a, 3), k=k))
    at = sp.csr_matrix(a.T)
    at.sort_indices()
    t = big.transpose()
    assert_same_format(t.fmt, build(diagonal_of(at, 3), k=k))
    assert torch.equal(t.indptr, torch.from_numpy(diagonal_of(at, 3).indptr).long())
    # src_slot maps A^T's nonzeros (CSR order) to the same nonzeros of diag(A, ...)
    new_values = torch.randn(big.n_slots, dtype=torch.float64)
    moved = t.fmt.with_values(t.values_from(new_values)).to_dense()
    assert torch.equal(moved, big.with_values(new_values).to_dense().t())


@pytest.mark.parametrize("k", [8, 4])
def test_pattern_only_copies_hold_no_values(k, rng):
    fmt = build(random_csr(21, 21, 0.2, rng), k=k)
    full, pattern = block_diagonal(fmt, 4), block_diagonal(fmt, 4, with_values=False)
    for got, ref in ((pattern, full), (pattern.transpose().fmt, full.transpose().fmt)):
        got.validate()
        assert got.values.shape == ref.values.shape and got.values.stride() == (0,)
        assert not got.values.any()
        for name in ("row_ptr", "col_idx", "perm", "vec_mask"):
            assert torch.equal(getattr(got, name), getattr(ref, name)), name
    assert torch.equal(pattern.transpose().src_slot, full.transpose().src_slot)


def test_one_copy_and_bad_copies(rng):
    fmt = build(random_csr(9, 9, 0.3, rng))
    one = block_diagonal(fmt, 1)
    assert torch.equal(one.to_dense()[:9, :9], fmt.to_dense())
    with pytest.raises(ValueError, match="copies must be >= 1"):
        block_diagonal(fmt, 0)
    with pytest.raises(ValueError, match="overflow the int32 column indices"):
        block_diagonal(fmt, 2**28)


def test_head_major_and_node_major_round_trip():
    t = torch.arange(5 * 3 * 2, dtype=torch.float32).view(5, 3, 2)
    hm = head_major(t, 8)
    assert hm.shape == (24, 2)
    for h in range(3):
        assert torch.equal(hm[8 * h : 8 * h + 5], t[:, h])
        assert not hm[8 * h + 5 : 8 * h + 8].any()
    assert torch.equal(node_major(hm, 3, 5), t)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_multi_head_ops_equal_one_op_per_head(precision, rng):
    a = random_csr(29, 29, 0.2, rng)
    fmt = build(a)
    heads, n = 3, 29
    big = block_diagonal(fmt, heads, with_values=False)  # the ops are given their values
    rows = big.n_rows // heads
    scores = torch.randn(heads, fmt.n_slots, dtype=torch.float64)
    x = torch.randn(n, heads, 5, dtype=torch.float32)
    probs = edge_softmax(big, scores.flatten())
    out = node_major(spmm(big, head_major(x, rows), precision, values=probs.float()), heads, n)
    for h in range(heads):
        p = edge_softmax(fmt, scores[h])
        assert torch.equal(probs.view(heads, -1)[h], p)
        assert torch.allclose(
            out[:, h], spmm(fmt, x[:, h], precision, values=p.float()), rtol=1e-6, atol=1e-6
        )
