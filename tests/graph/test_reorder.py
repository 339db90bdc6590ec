"""Graph.reorder and flashgnn.reorder: every method a permutation, deterministic; reverse
Cuthill-McKee against a sequential queue-based Cuthill-McKee, components against scipy,
communities on planted cliques, METIS through a fake pymetis; the renumbered graph holds the
same edges under the new ids; the Reordering's maps and their errors."""

from __future__ import annotations

import sys
import types
from collections import deque

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import torch

from flashgnn import Graph
from flashgnn.reorder import METHODS, Reordering, node_order
from flashgnn.reorder.communities import communities
from flashgnn.reorder.cuthill_mckee import components, cuthill_mckee
from flashgnn.reorder.metis import METIS_PART_NODES
from flashgnn.reorder.undirected import undirected, within_groups
from tests.helpers import needs_gpu

WITHOUT_METIS = tuple(m for m in METHODS if m != "metis")


def random_graph(rng, n: int, edges: int, loops: bool = True) -> sp.csr_matrix:
    """A directed pattern of about ``edges`` random edges on ``n`` nodes (some isolated,
    several components), self-loops kept when ``loops``."""
    src = rng.integers(0, n, edges)
    dst = np.minimum(src + rng.integers(-5, 6, edges) % n, n - 1)  # local: many components
    a = sp.csr_matrix((np.ones(edges), (dst, src)), shape=(n, n))
    a.sum_duplicates()
    if not loops:
        a.setdiag(0)
        a.eliminate_zeros()
    a.sort_indices()
    return a


def as_graph(a: sp.csr_matrix) -> Graph:
    return Graph(
        torch.from_numpy(a.indptr.astype(np.int64)),
        torch.from_numpy(a.indices.astype(np.int64)),
        a.shape[0],
    )


def symmetric(a: sp.csr_matrix) -> tuple[torch.Tensor, torch.Tensor]:
    """scipy's A + A^T without the diagonal, as int64 tensors."""
    s = (a + a.T).tocsr()
    s.setdiag(0)
    s.eliminate_zeros()
    s.sort_indices()
    return torch.from_numpy(s.indptr.astype(np.int64)), torch.from_numpy(s.indices.astype(np.int64))


def sequential_cuthill_mckee(indptr: np.ndarray, indices: np.ndarray) -> list[int]:
    """Cuthill-McKee by a queue, node by node: components by smallest id, each from the
    least-degree node (ties: smaller id) of the last level of a search from its least-degree
    node; each visited node appends its unvisited neighbours by (degree, id)."""
    n = len(indptr) - 1
    degree = np.diff(indptr)
    adj = [indices[indptr[u] : indptr[u + 1]].tolist() for u in range(n)]

    def levels_from(root):
        level = {root: 0}
        queue = deque([root])
        while queue:
            u = queue.popleft()
            for v in adj[u]:
                if v not in level:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level

    seen, order = set(), []
    for first in range(n):
        if first in seen:
            continue
        level = levels_from(first)
        nodes = sorted(level)
        start = min(nodes, key=lambda v: (degree[v], v))
        level = levels_from(start)
        deepest = max(level.values())
        root = min((v for v in nodes if level[v] == deepest), key=lambda v: (degree[v], v))
        visited, queue = {root}, deque([root])
        while queue:
            u = queue.popleft()
            order.append(u)
            for v in sorted((v for v in adj[u] if v not in visited), key=lambda v: (degree[v], v)):
                visited.add(v)
                queue.append(v)
        seen.update(nodes)
    return order


def distinct_window_columns(a: sp.csr_matrix, perm: np.ndarray) -> int:
    """ME-BCRS's vector count of A renumbered by ``perm``: distinct (row // 8, column) pairs."""
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(len(perm))
    coo = a.tocoo()
    return len(set(zip((inverse[coo.row] // 8).tolist(), inverse[coo.col].tolist())))


# ---------------------------------------------------------------------------- the methods
@pytest.mark.parametrize("n,edges", [(1, 1), (40, 60), (300, 900), (2000, 3000)])
def test_rcm_is_the_reverse_of_sequential_cuthill_mckee(rng, n, edges):
    a = random_graph(rng, n, edges)
    indptr, indices = symmetric(a)
    want = sequential_cuthill_mckee(indptr.numpy(), indices.numpy())[::-1]
    assert (
        node_order(
            torch.from_numpy(a.indptr.astype(np.int64)), torch.from_numpy(a.indices), "rcm"
        ).tolist()
        == want
    )
    assert cuthill_mckee(indptr, indices).flip(0).tolist() == want


def test_undirected_is_a_plus_a_transpose_without_loops(rng):
    a = random_graph(rng, 200, 700)
    indptr, indices = undirected(
        torch.from_numpy(a.indptr.astype(np.int64)), torch.from_numpy(a.indices)
    )
    want_indptr, want_indices = symmetric(a)
    assert torch.equal(indptr, want_indptr) and torch.equal(indices, want_indices)


def test_components_name_each_component_by_its_smallest_node(rng):
    a = random_graph(rng, 3000, 2500, loops=False)
    indptr, indices = symmetric(a)
    _, labels = csgraph.connected_components(a, directed=False)
    smallest = {}
    for node, label in enumerate(labels.tolist()):
        smallest.setdefault(label, node)
    want = [smallest[label] for label in labels.tolist()]
    assert components(indptr, indices).tolist() == want


def cliques(sizes: list[int], rng) -> tuple[sp.csr_matrix, np.ndarray]:
    """Cliques of ``sizes`` on shuffled ids, each joined to the next by one edge: (pattern,
    the clique of every node)."""
    clique = np.repeat(np.arange(len(sizes)), sizes)
    ids = rng.permutation(len(clique))
    rows, cols = [], []
    for c in range(len(sizes)):
        members = ids[clique == c]
        rows += np.repeat(members, len(members)).tolist()
        cols += np.tile(members, len(members)).tolist()
        if c + 1 < len(sizes):
            rows.append(members[0])
            cols.append(ids[clique == c + 1][0])
    a = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(clique),) * 2)
    a.sum_duplicates()
    a.sort_indices()
    found = np.empty(len(clique), dtype=np.int64)
    found[ids] = clique
    return a, found


def test_communities_find_planted_cliques(rng):
    a, clique = cliques([12, 9, 15, 8, 11], rng)
    label = communities(*symmetric(a)).numpy()
    for c in np.unique(clique):
        assert len(set(label[clique == c].tolist())) == 1
    assert len(np.unique(label)) == 5


def test_community_order_keeps_each_community_contiguous(rng):
    a, clique = cliques([12, 9, 15, 8, 11], rng)
    perm = node_order(
        torch.from_numpy(a.indptr.astype(np.int64)), torch.from_numpy(a.indices), "community"
    )
    runs = clique[perm.numpy()]
    assert (np.diff(runs) != 0).sum() == 4  # five blocks, one after the other


def test_within_groups_keeps_the_edges_inside_a_group(rng):
    a = random_graph(rng, 100, 400, loops=False)
    indptr, indices = symmetric(a)
    group = torch.from_numpy(rng.integers(0, 4, 100))
    sub_indptr, sub_indices = within_groups(indptr, indices, group)
    s = sp.csr_matrix((np.ones(len(indices)), indices.numpy(), indptr.numpy()), shape=(100, 100))
    coo = s.tocoo()
    keep = group.numpy()[coo.row] == group.numpy()[coo.col]
    want = sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=(100, 100))
    want.sort_indices()
    assert sub_indptr.tolist() == want.indptr.tolist()
    assert sub_indices.tolist() == want.indices.tolist()


def test_degree_order_puts_hubs_first_ties_by_id(rng):
    a = random_graph(rng, 500, 2000)
    indptr, _ = symmetric(a)
    degree = np.diff(indptr.numpy())
    perm = node_order(
        torch.from_numpy(a.indptr.astype(np.int64)), torch.from_numpy(a.indices), "degree"
    )
    assert perm.tolist() == sorted(range(500), key=lambda v: (-degree[v], v))


@pytest.mark.parametrize("method", WITHOUT_METIS)
def test_every_method_is_a_deterministic_permutation(rng, method):
    a = random_graph(rng, 1000, 4000)
    g = as_graph(a)
    new, r = g.reorder(method)
    assert sorted(r.perm.tolist()) == list(range(1000))
    assert torch.equal(r.inverse[r.perm], torch.arange(1000))
    again, r2 = as_graph(a).reorder(method)
    assert torch.equal(r.perm, r2.perm)
    assert torch.equal(new.indptr, again.indptr) and torch.equal(new.indices, again.indices)


def test_none_is_the_graph_itself(rng):
    g = as_graph(random_graph(rng, 50, 100))
    same, r = g.reorder("none")
    assert same is g and torch.equal(r.perm, torch.arange(50)) and r.method == "none"


# ---------------------------------------------------------------------------- METIS
class FakeMetis(types.ModuleType):
    """pymetis's part_graph: records its input, puts node v in part v % nparts."""

    def __init__(self):
        super().__init__("pymetis")
        self.calls = []

    def part_graph(self, nparts, xadj, adjncy):
        self.calls.append((nparts, np.array(xadj), np.array(adjncy)))
        n = len(xadj) - 1
        return 0, [v % nparts for v in range(n)]


def test_metis_orders_parts_of_the_undirected_graph(rng, monkeypatch):
    fake = FakeMetis()
    monkeypatch.setitem(sys.modules, "pymetis", fake)
    n = 3 * METIS_PART_NODES + 5
    a = random_graph(rng, n, 6 * n)
    g = as_graph(a)
    _, r = g.reorder("metis")
    ((nparts, xadj, adjncy),) = fake.calls
    want_indptr, want_indices = symmetric(a)
    assert nparts == 4
    assert xadj.tolist() == want_indptr.tolist() and adjncy.tolist() == want_indices.tolist()
    part = r.perm.numpy() % nparts
    assert (np.diff(part) != 0).sum() == nparts - 1  # each part contiguous
    assert torch.equal(r.perm, g.reorder("metis")[1].perm)


def test_metis_without_pymetis_names_the_package(rng, monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # import pymetis raises ImportError
    with pytest.raises(ImportError, match="pymetis"):
        as_graph(random_graph(rng, 100, 300)).reorder("metis")


# ---------------------------------------------------------------------------- the graph
@pytest.mark.parametrize("method", ["rcm", "community"])
def test_reordered_graph_holds_the_same_edges_under_new_ids(rng, method):
    a = random_graph(rng, 400, 1500)
    weight = torch.from_numpy(rng.uniform(0.5, 1.5, a.nnz))
    g = Graph.from_edge_index(torch.from_numpy(np.stack(a.nonzero()[::-1])), 400, weight)
    new, r = g.reorder(method)
    assert new.num_edges == g.num_edges and new.node_counts == g.node_counts
    assert new.edge_weight is g.edge_weight  # edge ids, and so the weights, are kept
    assert torch.equal(new.edge_index, r.inverse[g.edge_index])
    dense = torch.zeros(400, 400, dtype=torch.float64)
    dense[g.edge_index[1], g.edge_index[0]] = weight
    new_dense = torch.zeros_like(dense)
    new_dense[new.edge_index[1], new.edge_index[0]] = weight
    assert torch.equal(new_dense, dense[r.perm][:, r.perm])
    Graph(new.indptr, new.indices, 400, edge_ids=new.edge_ids)  # canonical: checks pass


def test_reorder_shares_a_learnable_weight(rng):
    g = as_graph(random_graph(rng, 60, 200))
    g.edge_weight = torch.nn.Parameter(torch.rand(g.num_edges))
    new, _ = g.reorder("rcm")
    assert new.edge_weight is g.edge_weight


def test_reordering_cuts_vectors_on_cora(load_graph):
    a = load_graph("cora")
    g = as_graph(a)
    before = g.adj(8).n_vectors
    for method in ("rcm", "community"):
        new, r = g.reorder(method)
        after = new.adj(8).n_vectors
        assert after == distinct_window_columns(a, r.perm.numpy())
        assert after < 0.85 * before, (method, after, before)


def test_bad_methods_and_graphs_raise(rng):
    g = as_graph(random_graph(rng, 30, 60))
    for bad in ("RCM", "metis2", "", None, 3):
        with pytest.raises(ValueError, match="reorder method must be one of"):
            g.reorder(bad)
    block = Graph.from_edge_index(torch.tensor([[0, 1, 2], [0, 1, 0]]), (3, 2))
    with pytest.raises(ValueError, match="square graph"):
        block.reorder("rcm")
    with pytest.raises(ValueError, match="reorder method must be one of"):
        node_order(g.indptr, g.indices, "bfs")


# ---------------------------------------------------------------------------- Reordering
def test_reordering_maps_round_trip(rng):
    perm = torch.from_numpy(rng.permutation(20))
    r = Reordering.from_perm(perm, "test")
    x = torch.randn(20, 3, dtype=torch.float64)
    assert torch.equal(r.apply_to_nodes(x), x[perm])
    assert torch.equal(r.restore(r.apply_to_nodes(x)), x)
    assert torch.equal(r.apply_to_nodes(r.restore(x)), x)
    mask = torch.from_numpy(rng.random(20) < 0.3)
    assert torch.equal(r.restore(r.apply_to_nodes(mask)), mask)
    ids = torch.tensor([3, 7, 7, 0])
    assert torch.equal(r.perm[r.new_ids(ids)], ids)
    assert torch.equal(Reordering.identity(5).restore(torch.arange(5)), torch.arange(5))


def test_reordering_rejects_bad_input():
    with pytest.raises(ValueError, match="repeats ids"):
        Reordering.from_perm(torch.tensor([0, 1, 1]), "x")
    with pytest.raises(ValueError, match="out of range"):
        Reordering.from_perm(torch.tensor([0, 3, 1]), "x")
    with pytest.raises(ValueError, match="int64"):
        Reordering.from_perm(torch.tensor([0.0, 1.0]), "x")
    with pytest.raises(TypeError, match="torch.Tensor"):
        Reordering.from_perm([0, 1], "x")
    r = Reordering.identity(4)
    with pytest.raises(ValueError, match="one row per node"):
        r.restore(torch.zeros(5, 2))
    with pytest.raises(ValueError, match="one row per node"):
        r.apply_to_nodes(torch.tensor(1.0))
    with pytest.raises(TypeError, match="torch.Tensor"):
        r.restore(np.zeros(4))


# ---------------------------------------------------------------------------- GPU
@needs_gpu
@pytest.mark.parametrize("method", WITHOUT_METIS)
def test_gpu_order_equals_the_cpu_order(rng, load_graph, method):
    for a in (load_graph("musae_github"), random_graph(rng, 20000, 80000)):
        g = as_graph(a)
        new, r = g.reorder(method, device="cuda")
        cpu_new, cpu_r = g.reorder(method)
        assert new.device.type == "cpu"
        assert torch.equal(r.perm, cpu_r.perm)
        assert torch.equal(new.indices, cpu_new.indices)
        assert torch.equal(new.edge_ids, cpu_new.edge_ids)


@needs_gpu
@pytest.mark.parametrize("method", ["rcm", "community"])
def test_gpu_reorders_a_graph_of_over_100m_edges(method):
    """A symmetric random graph with ~120M edges, reordered on the GPU where it lives."""
    n, pairs = 6_000_000, 60_000_000
    gen = torch.Generator("cuda").manual_seed(0)
    src = torch.randint(0, n, (pairs,), device="cuda", generator=gen)
    dst = (src + torch.randint(1, 5000, (pairs,), device="cuda", generator=gen)) % n
    keys = torch.unique(torch.cat([dst * n + src, src * n + dst]))
    del src, dst
    indptr = torch.searchsorted(keys, torch.arange(n + 1, device="cuda") * n)
    g = Graph(indptr, keys % n, n)
    del keys
    assert g.num_edges > 100_000_000
    new, r = g.reorder(method)
    assert new.device.type == "cuda" and new.num_edges == g.num_edges
    assert torch.equal(torch.sort(r.perm).values, torch.arange(n, device="cuda"))
    sample = torch.randint(0, g.num_edges, (100_000,), device="cuda", generator=gen)
    old = g.edge_index[:, sample]
    position = new.csr_pos()[sample]  # the same edge ids
    assert torch.equal(new.indices[position], r.inverse[old[0]])
    assert torch.equal(new.dst_of_csr()[position], r.inverse[old[1]])
