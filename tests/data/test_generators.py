"""flashgnn.data.generators.power_law_csr: canonical CSR, exact size, determinism, heavy tails."""

import numpy as np
import pytest
import scipy.sparse as sp

from flashgnn.data.generators import power_law_csr


def _hill_tail_index(degrees: np.ndarray, tail_fraction: float = 0.02) -> float:
    """Hill estimator of the tail index of the degree CCDF, P(D > d) ~ d^-index; for
    P(d) ~ d^-exponent the index is exponent - 1."""
    d = np.sort(degrees)[::-1].astype(np.float64)
    k = int(d.size * tail_fraction)
    return 1.0 / np.mean(np.log(d[:k] / d[k]))


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("num_nodes,num_edges", [(3001, 40000), (17, 60), (1, 0), (0, 0)])
def test_canonical_csr_with_exact_edge_count(num_nodes, num_edges, symmetric):
    indptr, indices = power_law_csr(num_nodes, num_edges, exponent=2.5, seed=3, symmetric=symmetric)
    assert indptr.dtype == np.int64 and indptr.shape == (num_nodes + 1,)
    assert indices.dtype == np.int32 and indices.shape == (num_edges,)
    assert indptr[0] == 0 and indptr[-1] == num_edges
    assert np.all(np.diff(indptr) >= 0)
    if num_edges == 0:
        return
    assert indices.min() >= 0 and indices.max() < num_nodes
    rows = np.repeat(np.arange(num_nodes), np.diff(indptr))
    same_row = rows[1:] == rows[:-1]
    assert np.all(np.diff(indices)[same_row] > 0), "columns not strictly increasing within a row"
    assert not np.any(rows == indices), "self loop"
    a = sp.csr_matrix((np.ones(num_edges), indices, indptr), shape=(num_nodes, num_nodes))
    if symmetric:
        assert (a != a.T).nnz == 0
    else:
        assert (a != a.T).nnz > 0, "a directed graph came out symmetric"


def test_deterministic_by_seed():
    first = power_law_csr(5000, 50000, seed=7, symmetric=True)
    again = power_law_csr(5000, 50000, seed=7, symmetric=True)
    other = power_law_csr(5000, 50000, seed=8, symmetric=True)
    assert all(np.array_equal(x, y) for x, y in zip(first, again))
    assert not np.array_equal(first[1], other[1])


@pytest.mark.parametrize("exponent", [2.5, 3.0])
@pytest.mark.parametrize("symmetric", [False, True])
def test_degrees_follow_the_power_law(exponent, symmetric):
    n, nnz = 20000, 300000
    indptr, indices = power_law_csr(n, nnz, exponent=exponent, seed=1, symmetric=symmetric)
    out_degree = np.diff(indptr)
    in_degree = np.bincount(indices, minlength=n)
    for degree in (out_degree, in_degree):
        assert _hill_tail_index(degree) == pytest.approx(exponent - 1, abs=0.3)
        assert degree.max() > 25 * degree.mean()


def test_heavier_tail_than_a_uniform_graph():
    n, nnz = 20000, 300000
    indptr, _ = power_law_csr(n, nnz, exponent=2.5, seed=2)
    rng = np.random.default_rng(2)
    uniform = np.bincount(rng.integers(0, n, nnz), minlength=n)
    degree = np.diff(indptr)
    top = n // 100
    share = np.sort(degree)[::-1][:top].sum() / nnz
    uniform_share = np.sort(uniform)[::-1][:top].sum() / nnz
    assert share > 5 * uniform_share
    assert degree.max() > 20 * uniform.max()


def test_node_ids_are_shuffled():
    """Hubs are spread over the id range, not packed into the first rows."""
    indptr, _ = power_law_csr(20000, 200000, seed=4)
    hubs = np.argsort(np.diff(indptr))[-100:]
    assert hubs.min() < 5000 and hubs.max() > 15000


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_nodes=-1, num_edges=0), "num_nodes"),
        (dict(num_nodes=10.0, num_edges=0), "num_nodes"),
        (dict(num_nodes=10, num_edges=-5), "num_edges"),
        (dict(num_nodes=10, num_edges=4, exponent=1.0), "exponent"),
        (dict(num_nodes=10, num_edges=5, symmetric=True), "even"),
        (dict(num_nodes=10, num_edges=60), "half"),
        (dict(num_nodes=2**31, num_edges=0), "2\\^31"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        power_law_csr(**kwargs)
