"""A rank's shard without processes: its rows cut from the whole graph, self-loops added to
rows as ``Graph.add_self_loops`` adds them to the graph, the local graph and GCN's split of
it by source (``SplitRows``: the whole graph's normalised values, and the transposes), and
GCN's normalisation with the whole graph's out-degrees."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import Graph
from flashgnn.distributed import partition_nodes, renumbering
from flashgnn.distributed.aggregation import SplitRows
from flashgnn.distributed.shard import (
    add_row_self_loops,
    local_graph,
    rows_of_part,
)
from flashgnn.ops.gcn_norm import gcn_norm_factor


def weighted_graph(n: int, edges: int, seed: int, loops: bool = True) -> Graph:
    rng = np.random.default_rng(seed)
    key = np.unique(rng.integers(0, n, edges) * n + rng.integers(0, n, edges))
    src, dst = key % n, key // n
    if not loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    weight = torch.from_numpy(rng.uniform(0.5, 2.0, len(src)).astype(np.float32))
    return Graph.from_edge_index(torch.from_numpy(np.stack([src, dst])), n, weight)


def dense(graph: Graph, new_of_old: torch.Tensor | None = None) -> torch.Tensor:
    """A[dst, src] as a dense float64 matrix, in the new ids when given."""
    src, dst = graph.edge_index
    if new_of_old is not None:
        src, dst = new_of_old[src], new_of_old[dst]
    a = torch.zeros(graph.num_dst_nodes, graph.num_src_nodes, dtype=torch.float64)
    weight = graph.edge_weight if graph.edge_weight is not None else torch.ones(src.numel())
    a[dst, src] = weight.double()
    return a


@pytest.mark.parametrize("self_loops", [False, True])
def test_rows_of_every_part_rebuild_the_renumbered_graph(self_loops):
    graph = weighted_graph(40, 200, seed=1)  # some nodes have a loop already
    part = partition_nodes(graph, 3, "degree")
    new_of_old, old_of_new, part_ptr = renumbering(part, 3)
    whole = graph.add_self_loops() if self_loops else graph
    expected = dense(whole, new_of_old)
    for p in range(3):
        lo, hi = int(part_ptr[p]), int(part_ptr[p + 1])
        indptr, indices, weight = rows_of_part(graph, old_of_new, new_of_old, lo, hi)
        if self_loops:
            indptr, indices, weight = add_row_self_loops(indptr, indices, weight, lo)
        a = torch.zeros(hi - lo, 40, dtype=torch.float64)
        row = torch.repeat_interleave(torch.arange(hi - lo), indptr[1:] - indptr[:-1])
        a[row, indices] = weight.double()
        assert torch.equal(a, expected[lo:hi])
        assert indices.numel() == int((expected[lo:hi] != 0).sum())  # no duplicate


def test_local_graph_numbers_the_halo_after_the_own_nodes():
    graph = weighted_graph(30, 150, seed=2).add_self_loops()
    identity = torch.arange(30)
    lo, hi = 10, 20
    indptr, indices, weight = rows_of_part(graph, identity, identity, lo, hi)
    local, halo = local_graph(indptr, indices, weight, lo, hi, "cpu")
    outside = indices[(indices < lo) | (indices >= hi)]
    assert torch.equal(halo, torch.unique(outside))
    assert local.node_counts == (10 + halo.numel(), 10)
    sources = torch.cat([torch.arange(lo, hi), halo])
    expected = dense(graph)[lo:hi][:, sources]
    assert torch.equal(dense(local), expected)


def as_dense(rows) -> torch.Tensor:
    """A SparseRows as a dense float64 matrix (its product with the identity, in fp32)."""
    eye = torch.eye(rows.n_cols, dtype=torch.float64)
    return rows.times(eye, "fp32", False)


@pytest.mark.parametrize("norm", ["both", "left", "right", "none"])
def test_split_rows_hold_the_whole_graphs_normalised_values(norm):
    graph = weighted_graph(30, 150, seed=4).add_self_loops()
    identity = torch.arange(30)
    lo, hi = 10, 20
    indptr, indices, weight = rows_of_part(graph, identity, identity, lo, hi)
    local, halo = local_graph(indptr, indices, weight, lo, hi, "cpu")
    sources = torch.cat([torch.arange(lo, hi), halo])
    a = dense(graph)
    d_in = (a != 0).sum(1).double()
    d_out = (a != 0).sum(0).double()
    factor = {
        "both": (d_in[:, None] * d_out[None, :]).rsqrt(),
        "left": 1 / d_out[None, :].expand(30, 30),
        "right": 1 / d_in[:, None].expand(30, 30),
        "none": torch.ones(30, 30, dtype=torch.float64),
    }[norm]
    expected = (a * factor)[lo:hi][:, sources]
    rows = SplitRows.build(local, 10, graph.out_degrees()[sources], norm, 8)
    assert rows.own.n_rows == rows.halo.n_rows == 10
    assert (rows.own.n_cols, rows.halo.n_cols) == (10, halo.numel())
    assert torch.allclose(as_dense(rows.own), expected[:, :10], rtol=1e-6, atol=0)
    assert torch.allclose(as_dense(rows.halo), expected[:, 10:], rtol=1e-6, atol=0)
    assert torch.equal(as_dense(rows.own_t), as_dense(rows.own).t())
    assert torch.equal(as_dense(rows.halo_t), as_dense(rows.halo).t())


def test_gcn_norm_factor_with_the_whole_graphs_out_degrees():
    graph = weighted_graph(25, 120, seed=3).add_self_loops()
    identity = torch.arange(25)
    lo, hi = 5, 15
    full = gcn_norm_factor(graph.indptr, graph.indices, 25, "both", torch.float32)
    indptr, indices, _ = rows_of_part(graph, identity, identity, lo, hi)
    degrees = graph.out_degrees()
    part = gcn_norm_factor(indptr, indices, 25, "both", torch.float32, out_degree=degrees)
    assert torch.equal(part, full[graph.indptr[lo] : graph.indptr[hi]])  # the same bits
    counted = gcn_norm_factor(indptr, indices, 25, "both", torch.float32)
    assert not torch.equal(counted, part)  # the rows alone see fewer out-edges
    with pytest.raises(ValueError, match="out_degree must have shape"):
        gcn_norm_factor(indptr, indices, 25, "left", torch.float32, out_degree=degrees[:3])
