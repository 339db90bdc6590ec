"""Bad input to the Graph constructors and accessors: a clear error before anything is built.

Node counts past int32 (the formats' index type) fail at construction, without allocating
anything of the graph's size; an id out of range is named with its own position; complex
matrices and ids past int64 are refused instead of being cast."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import Graph
from tests.graph.test_graph import FakeDGLGraph
from tests.helpers import GPU

DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
BIG = 2**31 + 8  # one window past the int32 limit
LIMIT = r"2\^31 - 1"


@pytest.mark.parametrize("device", DEVICES)
def test_more_than_int32_nodes_fail_at_construction(device):
    t = partial(torch.tensor, device=device)
    edges = t([[BIG - 5, 1], [0, 2]])
    with pytest.raises(ValueError, match=f"num_src = {BIG} is more than {LIMIT}"):
        Graph.from_edge_index(edges, (BIG, 4))
    with pytest.raises(ValueError, match=f"num_dst = {BIG} is more than {LIMIT}"):
        Graph.from_edge_index(edges.flip(0), (4, BIG))
    with pytest.raises(ValueError, match=f"num_nodes = {2**31} is more than {LIMIT}"):
        Graph.from_edge_index(t([[0], [1]]), 2**31)
    indptr, indices = t([0, 1, 2]), t([BIG - 5, 0])
    with pytest.raises(ValueError, match=f"num_src = {BIG} is more than {LIMIT}"):
        Graph.from_csr(indptr, indices, (BIG, 2))
    with pytest.raises(ValueError, match=f"num_src = {BIG} is more than {LIMIT}"):
        Graph(indptr, torch.sort(indices).values, (BIG, 2))
    coo = torch.sparse_coo_tensor(t([[0, 1], [BIG - 5, 0]]), t([1.0, 2.0]), (2, BIG))
    with pytest.raises(ValueError, match=f"num_src = {BIG} is more than {LIMIT}"):
        Graph.from_torch_sparse(coo)
    with pytest.raises(ValueError, match=f"num_src = {BIG} is more than {LIMIT}"):
        Graph.from_torch_sparse(coo.to_sparse_csr())


def test_more_than_int32_nodes_from_scipy_and_dgl_fail(rng):
    m = sp.csr_matrix(([1.0, 2.0], ([0, 1], [BIG - 5, 0])), shape=(2, BIG))
    with pytest.raises(ValueError, match=f"num_src = {BIG} is more than {LIMIT}"):
        Graph.from_scipy(m)
    block = FakeDGLGraph([BIG - 5, 0], [0, 1], BIG, rng, num_dst=2)
    with pytest.raises(ValueError, match=f"num_src = {BIG} is more than {LIMIT}"):
        Graph.from_dgl(block)


@pytest.mark.parametrize("device", DEVICES)
def test_a_huge_id_without_num_nodes_fails_before_allocating(device):
    """2^40 nodes would take 8 TB of row pointers: the id is named instead."""
    edges = torch.tensor([[0, 5, 2**40], [1, 0, 0]], device=device)
    with pytest.raises(
        ValueError, match=rf"node id {2**40} in edge_index\[0\] \(edge 2\) .*{LIMIT}"
    ):
        Graph.from_edge_index(edges)
    with pytest.raises(ValueError, match=rf"node id {2**31 - 1} in edge_index\[1\] \(edge 0\)"):
        Graph.from_edge_index(torch.tensor([[0], [2**31 - 1]], device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_the_largest_int32_column_does_not_wrap(device):
    """A bipartite graph of 2^31 - 1 sources (the limit) keeps its last column exactly."""
    g = Graph.from_edge_index(torch.tensor([[2**31 - 2, 3], [1, 1]], device=device), (2**31 - 1, 4))
    a = g.adj()
    assert a.n_cols == 2**31 - 1
    assert a.col_idx.tolist() == [3, 2**31 - 2]


@pytest.mark.parametrize("device", DEVICES)
def test_an_out_of_range_id_is_named_with_its_position(device):
    """The first bad id and where it is, not the largest one beside another's position."""
    t = partial(torch.tensor, device=device)
    with pytest.raises(
        ValueError, match=r"node id 7 in edge_index\[0\] \(sources\) \(edge 1\) is out of range"
    ):
        Graph.from_edge_index(t([[0, 7, 12], [1, 0, 0]]), 5)
    with pytest.raises(
        ValueError, match=r"negative node id -1 in edge_index\[1\] \(destinations\)"
    ):
        Graph.from_edge_index(t([[0, 1, 2], [1, -1, -5]]), 5)
    with pytest.raises(ValueError, match=r"node id 7 in indices \(sources\) \(position 1\)"):
        Graph.from_csr(t([0, 1, 2, 3]), t([0, 7, 9]), (5, 3))


def test_complex_matrices_are_refused():
    dense = np.array([[0, 1 + 2j], [3, 0]])
    with pytest.raises(TypeError, match="complex"):
        Graph.from_scipy(sp.csr_matrix(dense))
    coo = torch.tensor(dense, dtype=torch.complex64).to_sparse()
    with pytest.raises(TypeError, match="complex"):
        Graph.from_torch_sparse(coo)
    with pytest.raises(TypeError, match="complex"):
        Graph.from_torch_sparse(coo.to_sparse_csr())


def test_unsigned_ids_past_int64_are_refused():
    edges = np.array([[0, 2**63 + 5], [1, 0]], dtype=np.uint64)
    with pytest.raises(ValueError, match=r"edge_index holds ids of 2\^63 or more"):
        Graph.from_edge_index(edges)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_accessor_arguments(device):
    g = Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]], device=device))
    with pytest.raises(ValueError, match="k must be 8 .* or 4"):
        g.adj(8.0)
    with pytest.raises(ValueError, match="copies must be an integer"):
        g.adj_heads(2.5)
    with pytest.raises(TypeError, match="dtype must be a floating point"):
        g.gcn_values("both", 8, torch.int64)
