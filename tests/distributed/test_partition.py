"""Node partitions and the renumbering: coverage, contiguity, balance, determinism, METIS
through a stand-in pymetis (the package is optional), and bad arguments."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import Graph
from flashgnn.distributed import METHODS, partition_nodes, renumbering


def random_graph(n: int, edges: int, seed: int) -> Graph:
    """A directed graph with skewed in-degrees (a few hubs), no duplicate edges."""
    rng = np.random.default_rng(seed)
    dst = np.minimum((rng.pareto(1.5, edges) * 3).astype(np.int64), n - 1)
    src = rng.integers(0, n, edges)
    key = np.unique(dst * n + src)
    return Graph.from_edge_index(torch.from_numpy(np.stack([key % n, key // n])), n)


@pytest.fixture
def fake_pymetis(monkeypatch):
    """A pymetis whose part_graph records its input and splits the nodes by id parity."""
    calls = []

    class Options:
        seed = None

    def part_graph(nparts, xadj=None, adjncy=None, options=None):
        calls.append((nparts, np.asarray(xadj), np.asarray(adjncy), options.seed))
        n = len(xadj) - 1
        return 0, [i % nparts for i in range(n)]

    module = types.SimpleNamespace(Options=Options, part_graph=part_graph)
    monkeypatch.setitem(sys.modules, "pymetis", module)
    return calls


@pytest.mark.parametrize("method", ["contiguous", "degree", "metis", "label-propagation"])
@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_every_node_in_one_part(method, parts, fake_pymetis):
    g = random_graph(50, 300, seed=parts)
    part = partition_nodes(g, parts, method)
    assert part.dtype == torch.int64 and part.shape == (50,)
    assert int(part.min()) >= 0 and int(part.max()) < parts
    assert torch.bincount(part, minlength=parts).min() >= 1  # no empty part
    assert torch.equal(part, partition_nodes(g, parts, method))  # deterministic


def planted_graph(n: int, parts: int, edges: int, inside: float, seed: int):
    """A graph of ``parts`` planted communities of shuffled ids: each in-edge's source is in
    its destination's community with probability ``inside``. Returns (graph, community)."""
    rng = np.random.default_rng(seed)
    community = rng.permutation(np.repeat(np.arange(parts), -(-n // parts))[:n])
    by_community = np.argsort(community, kind="stable")  # members of 0, then of 1, ...
    sizes = np.bincount(community, minlength=parts)
    starts = np.cumsum(sizes) - sizes
    dst = rng.integers(0, n, edges)
    pick = rng.integers(0, n, edges)
    c = community[dst]
    same = rng.random(edges) < inside
    src = np.where(same, by_community[starts[c] + pick % sizes[c]], pick)
    key = np.unique(dst * n + src)
    key = key[key // n != key % n]
    return Graph.from_edge_index(torch.from_numpy(np.stack([key % n, key // n])), n), community


def edge_cut(g: Graph, part: torch.Tensor) -> float:
    rows = torch.repeat_interleave(torch.arange(g.num_nodes), g.indptr[1:] - g.indptr[:-1])
    return float((part[rows] != part[g.indices]).double().mean())


def test_label_propagation_finds_planted_communities_within_the_balance():
    g, community = planted_graph(6000, 4, 60000, inside=0.8, seed=3)
    part = partition_nodes(g, 4, "label-propagation")
    contiguous = partition_nodes(g, 4, "contiguous")
    # the planted cut is 0.2 * 3 / 4 = 0.15; ids are shuffled, so ranges cut 3 / 4 of the edges
    assert edge_cut(g, contiguous) > 0.7
    assert edge_cut(g, part) < 0.2
    sizes = torch.bincount(part, minlength=4)
    assert int(sizes.max()) <= -(-1.05 * 6000 // 4) and int(sizes.min()) >= 0.95 * 6000 // 4
    # each part is mostly one community
    agree = sum(np.bincount(community[part.numpy() == p]).max() for p in range(4))
    assert agree > 0.9 * 6000


def test_contiguous_and_degree_are_id_ranges():
    g = random_graph(101, 700, seed=1)
    for method in ("contiguous", "degree"):
        part = partition_nodes(g, 4, method)
        assert bool((part[1:] >= part[:-1]).all()), method
    sizes = torch.bincount(partition_nodes(g, 4, "contiguous"))
    assert sizes.max() - sizes.min() <= 1


def test_degree_balances_in_edges():
    g = random_graph(400, 4000, seed=2)
    deg = g.in_degrees()
    for parts in (2, 3, 5):
        part = partition_nodes(g, parts, "degree")
        load = torch.zeros(parts, dtype=torch.int64).index_add_(0, part, deg)
        # each part's in-edges are within one node's degree of an equal share
        assert int((load - g.num_edges / parts).abs().max()) <= int(deg.max()), (parts, load)


def test_degree_with_a_hub_keeps_every_part():
    # node 0 holds nearly every edge: the cumulative split alone would leave parts empty
    n = 10
    src = torch.arange(1, n)
    g = Graph.from_edge_index(torch.stack([src, torch.zeros_like(src)]), n)
    part = partition_nodes(g, 4, "degree")
    assert torch.bincount(part, minlength=4).min() >= 1
    assert bool((part[1:] >= part[:-1]).all())


def test_metis_gets_the_symmetric_graph_without_loops(fake_pymetis):
    g = random_graph(30, 120, seed=3).add_self_loops()
    part = partition_nodes(g, 3, "metis", seed=11)
    assert part.tolist() == [i % 3 for i in range(30)]
    nparts, xadj, adjncy, seed = fake_pymetis[-1]
    assert nparts == 3 and seed == 11
    src, dst = g.edge_index.numpy()
    a = sp.coo_matrix((np.ones(len(src)), (dst, src)), shape=(30, 30)).tocsr()
    sym = ((a + a.T) > 0).astype(np.int8).tolil()
    sym.setdiag(0)
    sym = sym.tocsr()
    sym.eliminate_zeros()
    sym.sort_indices()
    got = sp.csr_matrix((np.ones(len(adjncy)), adjncy, xadj), shape=(30, 30))
    got.sort_indices()
    assert np.array_equal(got.indptr, sym.indptr) and np.array_equal(got.indices, sym.indices)


def test_metis_one_part_needs_no_call(fake_pymetis):
    assert partition_nodes(random_graph(10, 30, 0), 1, "metis").tolist() == [0] * 10
    assert not fake_pymetis


def test_metis_without_pymetis_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # import fails
    with pytest.raises(ImportError, match=r"'distributed' extra"):
        partition_nodes(random_graph(10, 30, 0), 2, "metis")


@pytest.mark.parametrize("method", METHODS)
def test_renumbering_makes_parts_contiguous(method, fake_pymetis):
    g = random_graph(60, 300, seed=4)
    part = partition_nodes(g, 3, method)
    new_of_old, old_of_new, part_ptr = renumbering(part, 3)
    assert torch.equal(new_of_old[old_of_new], torch.arange(60))
    assert torch.equal(old_of_new[new_of_old], torch.arange(60))
    assert part_ptr.tolist() == [0, *torch.cumsum(torch.bincount(part, minlength=3), 0).tolist()]
    for p in range(3):
        ids = old_of_new[part_ptr[p] : part_ptr[p + 1]]
        assert bool((part[ids] == p).all())
        assert bool((ids[1:] > ids[:-1]).all())  # old order kept within a part


def test_bad_arguments():
    g = random_graph(10, 30, 0)
    with pytest.raises(TypeError, match="flashgnn.Graph"):
        partition_nodes("graph", 2)
    with pytest.raises(ValueError, match="parts must be an integer >= 1"):
        partition_nodes(g, 0, "contiguous")
    with pytest.raises(ValueError, match="parts must be an integer >= 1"):
        partition_nodes(g, 2.0, "contiguous")
    with pytest.raises(ValueError, match="cannot split 10 nodes into 11 parts"):
        partition_nodes(g, 11, "contiguous")
    with pytest.raises(ValueError, match="method must be one of"):
        partition_nodes(g, 2, "random")
    bipartite = Graph.from_edge_index(torch.tensor([[0, 1], [0, 0]]), (2, 1))
    with pytest.raises(ValueError, match="bipartite"):
        partition_nodes(bipartite, 1, "contiguous")
    with pytest.raises(ValueError, match="outside"):
        renumbering(torch.tensor([0, 2]), 2)
    with pytest.raises(ValueError, match="int64"):
        renumbering(torch.tensor([0.0, 1.0]), 2)
