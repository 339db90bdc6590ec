"""flashgnn.Graph: constructors, the A[dst, src] convention, edge order, caching, errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from flashgnn import MEBCRS, Graph
from flashgnn.graph import as_graph
from flashgnn.ops import gcn_norm_values, spmm
from tests.helpers import needs_gpu, random_csr


class FakeDGLGraph:
    """A graph following DGL's documented interface: ``adj_tensors('csc')`` returns (indptr,
    indices, eids) where column d lists the sources of the in-edges of d and ``eids`` the
    edge id at each position (an empty tensor means 0, 1, ...). Edges are given by id, as
    ``dgl.graph((src, dst))`` takes them; the CSC is ordered by a random permutation so the
    eids are not the identity and sources within a column are not sorted. With ``num_dst``, a
    block (``dgl.create_block``) from ``num_nodes`` sources to ``num_dst`` destinations."""

    def __init__(self, src, dst, num_nodes, rng, edata=None, empty_eids=False, num_dst=None):
        self.src, self.dst = torch.as_tensor(src), torch.as_tensor(dst)
        self.n = num_nodes
        self.n_dst = num_nodes if num_dst is None else num_dst
        self.is_block = num_dst is not None
        self.edata = dict(edata or {})
        if empty_eids:  # ids are CSC positions: the edges must come grouped by dst
            order = torch.arange(len(self.src))
            assert bool((self.dst[1:] >= self.dst[:-1]).all()), (
                "empty eids need edges sorted by dst"
            )
            self._eids = torch.empty(0, dtype=torch.int64)
        else:  # group by dst, shuffled within
            order = torch.from_numpy(rng.permutation(len(self.src)))
            self._eids = order = order[torch.sort(self.dst[order], stable=True).indices]
        self._indices = self.src[order]
        self._indptr = torch.zeros(self.n_dst + 1, dtype=torch.int64)
        self._indptr[1:] = torch.cumsum(torch.bincount(self.dst, minlength=self.n_dst), 0)
        self.device = torch.device("cpu")

    def adj_tensors(self, fmt):
        assert fmt == "csc"
        return self._indptr, self._indices, self._eids

    def num_src_nodes(self):
        return self.n

    def num_dst_nodes(self):
        return self.n_dst

    def num_edges(self):
        return len(self.src)

    def in_degrees(self):
        return torch.bincount(self.dst, minlength=self.n_dst)

    def out_degrees(self):
        return torch.bincount(self.src, minlength=self.n)


def random_edges(n, density, rng):
    """(src, dst, weight) of a random directed graph, in a random edge order: int64 [E] x2,
    float32 [E] (nonzero)."""
    return shuffled_edges(random_csr(n, n, density, rng), rng)


def shuffled_edges(m, rng):
    """(src, dst, weight) of the nonzeros of the scipy CSR ``m`` (rows = dst), in a random
    order: int64 [E] x2, float32 [E]."""
    dst = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    order = rng.permutation(m.nnz)
    return (
        torch.from_numpy(m.indices[order].astype(np.int64)),
        torch.from_numpy(dst[order]),
        torch.from_numpy(m.data[order].astype(np.float32)),
    )


def dense_of_edges(src, dst, weight, n, n_dst=None):
    """A [dst, src] in float64, [n, n] or [n_dst, n]."""
    a = np.zeros((n if n_dst is None else n_dst, n), np.float64)
    np.add.at(a, (dst.numpy(), src.numpy()), weight.double().numpy())
    return a


def random_block_edges(n_src, n_dst, density, rng):
    """(src, dst, weight) of a random bipartite graph from n_src sources to n_dst destinations
    (every destination with an in-edge), in a random edge order."""
    m = random_csr(n_dst, n_src, density, rng)
    m = (
        m
        + sp.csr_matrix(
            (np.ones(n_dst), (np.arange(n_dst), rng.integers(0, n_src, n_dst))),
            shape=(n_dst, n_src),
        )
    ).tocsr()
    return shuffled_edges(m, rng)


def test_from_edge_index_is_a_dst_by_src_matrix():
    # 0 -> 1 and 1 -> 2 only: A[1, 0] = A[2, 1] = 1, so A @ x moves x[0] to node 1
    g = Graph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), num_nodes=4)
    assert g.adj().to_dense().tolist() == [[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]]
    x = torch.tensor([[1.0], [10.0], [100.0], [1000.0]], requires_grad=True)
    y = spmm(g.adj(), x)
    assert y[:, 0].tolist() == [0.0, 1.0, 10.0, 0.0]
    y.sum().backward()  # dY/dX = A^T 1: node j gets its out-degree
    assert x.grad[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert g.in_degrees().tolist() == [0, 1, 1, 0]
    assert g.out_degrees().tolist() == [1, 1, 0, 0]


def test_constructors_agree(rng):
    n = 37
    src, dst, w = random_edges(n, 0.12, rng)
    ref = dense_of_edges(src, dst, w, n)
    m = sp.csr_matrix((w.numpy(), (dst.numpy(), src.numpy())), shape=(n, n))
    from torch_geometric.data import Data

    graphs = {
        "edge_index": Graph.from_edge_index(torch.stack([src, dst]), n, edge_weight=w),
        "edge_index_numpy_int32": Graph.from_edge_index(
            np.stack([src.numpy(), dst.numpy()]).astype(np.int32), n, edge_weight=w.numpy()
        ),
        "scipy": Graph.from_scipy(m),
        "scipy_coo": Graph.from_scipy(m.tocoo()),
        "csr": Graph.from_csr(m.indptr, m.indices, n, edge_weight=torch.from_numpy(m.data)),
        "torch_coo": Graph.from_torch_sparse(
            torch.sparse_coo_tensor(torch.stack([dst, src]), w, (n, n))
        ),
        "torch_csr": Graph.from_torch_sparse(
            torch.sparse_coo_tensor(torch.stack([dst, src]), w, (n, n)).to_sparse_csr()
        ),
        "pyg": Graph.from_pyg(Data(edge_index=torch.stack([src, dst]), edge_weight=w, num_nodes=n)),
        "pyg_edge_attr": Graph.from_pyg(
            Data(edge_index=torch.stack([src, dst]), edge_attr=w[:, None], num_nodes=n)
        ),
        "dgl": Graph.from_dgl(FakeDGLGraph(src, dst, n, rng), edge_weight=w),
    }
    in_deg = np.bincount(dst.numpy(), minlength=n)
    out_deg = np.bincount(src.numpy(), minlength=n)
    for name, g in graphs.items():
        assert (g.num_nodes, g.num_edges) == (n, len(src)), name
        np.testing.assert_array_equal(g.adj().to_dense().double().numpy(), ref, err_msg=name)
        np.testing.assert_array_equal(g.in_degrees().numpy(), in_deg, err_msg=name)
        np.testing.assert_array_equal(g.out_degrees().numpy(), out_deg, err_msg=name)
        # each constructor's own edge order is kept: edge_index and edge_weight read back in it
        ei, ew = g.edge_index, g.edge_weight
        np.testing.assert_array_equal(dense_of_edges(ei[0], ei[1], ew, n), ref, err_msg=name)
    for name in ("edge_index", "pyg", "pyg_edge_attr", "dgl"):
        assert torch.equal(graphs[name].edge_index, torch.stack([src, dst])), name
        assert torch.equal(graphs[name].edge_weight, w), name


def test_bipartite_constructors_agree(rng):
    n_src, n_dst = 37, 21
    src, dst, w = random_block_edges(n_src, n_dst, 0.15, rng)
    ref = dense_of_edges(src, dst, w, n_src, n_dst)
    m = sp.csr_matrix((w.numpy(), (dst.numpy(), src.numpy())), shape=(n_dst, n_src))
    coo = torch.sparse_coo_tensor(torch.stack([dst, src]), w, (n_dst, n_src))
    graphs = {
        "edge_index": Graph.from_edge_index(torch.stack([src, dst]), (n_src, n_dst), edge_weight=w),
        "scipy": Graph.from_scipy(m),
        "csr": Graph.from_csr(
            m.indptr, m.indices, (n_src, n_dst), edge_weight=torch.from_numpy(m.data)
        ),
        "torch_coo": Graph.from_torch_sparse(coo),
        "torch_csr": Graph.from_torch_sparse(coo.to_sparse_csr()),
        "dgl_block": Graph.from_dgl(
            FakeDGLGraph(src, dst, n_src, rng, num_dst=n_dst), edge_weight=w
        ),
    }
    for name, g in graphs.items():
        assert g.is_bipartite and g.node_counts == (n_src, n_dst), name
        assert g.adj().shape == (n_dst, n_src) and g.adj().transpose().fmt.shape == (
            n_src,
            n_dst,
        ), name
        np.testing.assert_array_equal(g.adj().to_dense().double().numpy(), ref, err_msg=name)
        np.testing.assert_array_equal(
            g.in_degrees().numpy(), np.bincount(dst.numpy(), minlength=n_dst)
        )
        np.testing.assert_array_equal(
            g.out_degrees().numpy(), np.bincount(src.numpy(), minlength=n_src)
        )
    g = graphs["dgl_block"]
    assert torch.equal(g.edge_index, torch.stack([src, dst])) and torch.equal(g.edge_weight, w)
    assert "num_src_nodes=37, num_dst_nodes=21" in repr(g)
    # DGL's GraphConv normalisation on a block: in-degrees of destinations, out-degrees of sources
    d_in = np.maximum(np.bincount(dst.numpy(), minlength=n_dst), 1)
    d_out = np.maximum(np.bincount(src.numpy(), minlength=n_src), 1)
    both = g.adj().with_values(g.gcn_values("both", 8, torch.float64)).to_dense().numpy()
    np.testing.assert_allclose(both, ref * (d_in[:, None] * d_out[None, :]) ** -0.5, rtol=1e-12)
    moved = g.to("cpu")
    assert moved.node_counts == (n_src, n_dst) and moved.adj() is g.adj()
    with pytest.raises(ValueError, match="bipartite .* use num_src_nodes and num_dst_nodes"):
        g.num_nodes
    with pytest.raises(ValueError, match="add_self_loops needs a square graph"):
        g.add_self_loops()


def test_edge_values_follow_edge_ids(rng):
    n = 29
    src, dst, _ = random_edges(n, 0.15, rng)
    values = torch.from_numpy(rng.standard_normal(len(src)))
    for g in (
        Graph.from_edge_index(torch.stack([src, dst]), n),
        Graph.from_dgl(FakeDGLGraph(src, dst, n, rng)),
    ):
        for k in (8, 4):
            fmt = g.adj(k)
            placed = g.edge_values(values, k)
            assert placed.shape == (8 * fmt.n_vectors,)
            np.testing.assert_array_equal(
                fmt.with_values(placed).to_dense().numpy(), dense_of_edges(src, dst, values, n)
            )
            assert torch.equal(placed[g.edge_slots(k)], values)
    with pytest.raises(ValueError, match="one value per edge"):
        g.edge_values(values[:-1])


def test_fake_dgl_contract(rng):
    n = 23
    src, dst, w = random_edges(n, 0.2, rng)
    fake = FakeDGLGraph(src, dst, n, rng, edata={"w": w})
    indptr, indices, eids = fake.adj_tensors("csc")
    assert not torch.equal(eids, torch.arange(len(eids)))  # a real permutation
    assert torch.equal(src[eids], indices)
    g = Graph.from_dgl(fake, edge_weight="w")  # by edata key
    assert torch.equal(g.edge_index, torch.stack([src, dst])) and torch.equal(g.edge_weight, w)
    assert torch.equal(g.in_degrees(), fake.in_degrees())
    assert torch.equal(g.out_degrees(), fake.out_degrees())
    # empty eids mean consecutive ids in CSC order
    order = torch.sort(dst, stable=True).indices
    sorted_fake = FakeDGLGraph(src[order], dst[order], n, np.random.default_rng(0), empty_eids=True)
    assert torch.equal(
        Graph.from_dgl(sorted_fake).edge_index, torch.stack([src[order], dst[order]])
    )
    # layers take the DGL object directly: converted once, then remembered
    assert as_graph(fake) is as_graph(fake)


def test_add_self_loops(rng):
    ei = torch.tensor([[0, 1, 2, 2], [1, 1, 0, 3]])
    w = torch.tensor([0.5, 2.0, 3.0, 4.0])
    g = Graph.from_edge_index(ei, 5, edge_weight=w)
    looped = g.add_self_loops(fill_value=7.0)
    assert g.num_edges == 4  # original untouched
    # node 1 already had a loop: only 0, 2, 3, 4 get one, appended as edges 4..7
    assert looped.edge_index.tolist() == [[0, 1, 2, 2, 0, 2, 3, 4], [1, 1, 0, 3, 0, 2, 3, 4]]
    assert looped.edge_weight.tolist() == [0.5, 2.0, 3.0, 4.0, 7.0, 7.0, 7.0, 7.0]
    assert not looped.has_zero_in_degree() and g.has_zero_in_degree()
    plain = Graph.from_edge_index(ei, 5).add_self_loops()
    assert plain.edge_weight is None and plain.num_edges == 8
    assert torch.equal(plain.adj().to_dense().diagonal(), torch.ones(5))


def test_matrix_duplicates_are_summed_and_edge_lists_rejected():
    m = sp.coo_matrix(
        (np.array([1.0, 2.0, 5.0]), (np.array([1, 1, 0]), np.array([0, 0, 1]))), shape=(2, 2)
    )
    assert Graph.from_scipy(m).adj().to_dense().tolist() == [[0.0, 5.0], [3.0, 0.0]]
    t = torch.sparse_coo_tensor(
        torch.tensor([[1, 1, 0], [0, 0, 1]]), torch.tensor([1.0, 2.0, 5.0]), (2, 2)
    )
    assert Graph.from_torch_sparse(t).adj().to_dense().tolist() == [[0.0, 5.0], [3.0, 0.0]]
    with pytest.raises(ValueError, match=r"duplicate edge 0 -> 1 \(edges 0 and 2\)"):
        Graph.from_edge_index(torch.tensor([[0, 1, 0], [1, 0, 1]]))
    with pytest.raises(ValueError, match="duplicate"):
        Graph.from_csr(torch.tensor([0, 0, 2]), torch.tensor([0, 0]))


def test_adj_cached_per_block_width_and_shared_by_to(rng):
    src, dst, w = random_edges(30, 0.1, rng)
    g = Graph.from_edge_index(torch.stack([src, dst]), 30, edge_weight=w)
    a8, a4 = g.adj(8), g.adj(4)
    assert a8 is g.adj() and a4 is g.adj(4, "cpu") and a8 is not a4
    assert (a8.k, a4.k) == (8, 4)
    a8.validate()
    a4.validate()
    assert torch.equal(a8.to_dense(), a4.to_dense())
    assert a8.transpose() is a8.transpose()
    assert torch.equal(a8.transpose().fmt.to_dense(), a8.to_dense().t())
    assert g.gcn_values("both", 8) is g.gcn_values("both", 8)
    moved = g.to("cpu")
    assert isinstance(moved, Graph) and moved is not g and moved.adj(8) is a8


@needs_gpu
@pytest.mark.parametrize("norm", ["both", "right", "left", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("nodes", [(300, 300), (450, 200)])
def test_gcn_values_on_the_gpu_match_the_cpu(nodes, weighted, norm, rng):
    """One kernel on the GPU (kernels/gcn_norm.cu), torch ops on the CPU: the same values, slots
    outside the pattern 0 (isolated sources and destinations included)."""
    n_src, n_dst = nodes
    src = torch.from_numpy(rng.integers(0, n_src - 20, 3000))
    dst = torch.from_numpy(rng.integers(0, n_dst - 10, 3000))
    key = torch.unique(dst * n_src + src)
    weight = torch.from_numpy(rng.random(key.numel())).float() + 0.5 if weighted else None
    g = Graph.from_edge_index(torch.stack([key % n_src, key // n_src]), nodes, edge_weight=weight)
    for k in (8, 4):
        got = g.to("cuda").gcn_values(norm, k)
        ref = g.gcn_values(norm, k)
        assert got.is_cuda and got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), ref, rtol=2e-7, atol=0)


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("nodes", [(30, 30), (45, 20)])
def test_adj_transpose_from_the_graph_csr_equals_the_decoded_one(nodes, k, rng):
    """A Graph's A^T is built from its CSR, a bare format's from its decoded slots: same arrays."""
    n_src, n_dst = nodes
    src = torch.from_numpy(rng.integers(0, n_src, 200))
    dst = torch.from_numpy(rng.integers(0, n_dst, 200))
    key = torch.unique(dst * n_src + src)
    g = Graph.from_edge_index(
        torch.stack([key % n_src, key // n_src]),
        nodes,
        edge_weight=torch.from_numpy(rng.random(key.numel())).float(),
    )
    a = g.adj(k)
    assert a._csr is not None
    bare = replace(a, _transpose=None, _csr=None)
    got, ref = a.transpose(), bare.transpose()
    for name in ("row_ptr", "col_idx", "values", "perm", "vec_mask"):
        assert torch.equal(getattr(got.fmt, name), getattr(ref.fmt, name)), name
    assert torch.equal(got.src_slot, ref.src_slot)
    assert a.with_values(a.values)._csr is a._csr and a.to("cpu")._csr is None


@pytest.mark.parametrize("k", [8, 4])
def test_adj_heads_cached_and_one_head_is_adj(k, rng):
    src, dst, _ = random_edges(30, 0.1, rng)
    g = Graph.from_edge_index(torch.stack([src, dst]), 30)
    assert g.adj_heads(1, k) is g.adj(k)  # no copy of A or A^T for a single head
    three = g.adj_heads(3, k)
    assert three is g.adj_heads(3, k) and three.k == k
    assert three.values.stride() == (0,) and not three.values.any()  # the pattern only
    a = g.adj(k)
    dense = three.with_values(a.values.repeat(3)).to_dense()
    assert torch.equal(
        dense, torch.block_diag(*[F.pad(a.to_dense(), (0, 2, 0, 2))] * 3)
    )  # 30 -> 32


def test_gcn_values_normalisation(rng):
    n = 25
    src, dst, w = random_edges(n, 0.15, rng)
    g = Graph.from_edge_index(torch.stack([src, dst]), n, edge_weight=w)
    d_in = np.maximum(np.bincount(dst.numpy(), minlength=n), 1).astype(np.float64)
    d_out = np.maximum(np.bincount(src.numpy(), minlength=n), 1).astype(np.float64)
    s, d = src.numpy(), dst.numpy()
    expected = {
        "both": 1 / np.sqrt(d_in[d] * d_out[s]),
        "right": 1 / d_in[d],
        "left": 1 / d_out[s],
        "none": np.ones(len(s)),
    }
    other = torch.from_numpy(rng.uniform(0.5, 2.0, len(s)))
    for norm, factor in expected.items():
        dense = g.adj().with_values(g.gcn_values(norm, 8, torch.float64)).to_dense().numpy()
        np.testing.assert_allclose(
            dense, dense_of_edges(src, dst, w.double() * torch.from_numpy(factor), n), rtol=1e-7
        )
        given = (
            g.adj(4).with_values(g.gcn_values(norm, 4, torch.float64, edge_weight=other)).to_dense()
        )
        np.testing.assert_allclose(
            given.numpy(), dense_of_edges(src, dst, other * torch.from_numpy(factor), n), rtol=1e-12
        )
    with pytest.raises(ValueError, match="norm must be one of"):
        g.gcn_values("sym")


BAD_EDGE_INDEX = [
    (torch.tensor([[0, -1], [1, 0]]), None, ValueError, "negative node id -1"),
    (torch.tensor([[0, 1], [1, 5]]), 4, ValueError, "node id 5 .* out of range for 4 nodes"),
    (torch.tensor([[0, 1, 2]]), None, ValueError, r"shape \(2, E\)"),
    (torch.tensor([0, 1]), None, ValueError, r"shape \(2, E\)"),
    (torch.tensor([[0.0, 1.0], [1.0, 0.0]]), None, TypeError, "integer node ids"),
    (torch.tensor([[True], [False]]), None, TypeError, "integer node ids"),
    ([[0, 1], [1, 0]], None, TypeError, "torch.Tensor or numpy array"),
    (torch.tensor([[0], [1]]), -1, ValueError, "num_nodes must be >= 0"),
    (torch.tensor([[0], [1]]), (3,), ValueError, r"a pair \(num_src, num_dst\)"),
    (torch.tensor([[0], [1]]), (3, -2), ValueError, "num_dst must be >= 0"),
    (torch.tensor([[0], [1]]), (3, 1.5), TypeError, "num_dst must be an int"),
    (
        torch.tensor([[2], [0]]),
        (2, 3),
        ValueError,
        r"node id 2 in edge_index\[0\] \(sources\) .* for 2 nodes",
    ),
    (
        torch.tensor([[0], [3]]),
        (4, 3),
        ValueError,
        r"node id 3 in edge_index\[1\] \(destinations\)",
    ),
]


@pytest.mark.parametrize("edge_index, num_nodes, error, match", BAD_EDGE_INDEX)
def test_bad_edge_index(edge_index, num_nodes, error, match):
    with pytest.raises(error, match=match):
        Graph.from_edge_index(edge_index, num_nodes)


def test_bad_inputs(rng):
    ei = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        Graph.from_edge_index(ei, edge_weight=torch.ones(3))
    with pytest.raises(TypeError, match="floating point"):
        Graph.from_edge_index(ei, edge_weight=torch.ones(2, dtype=torch.int64))
    with pytest.raises(TypeError, match="scipy sparse"):
        Graph.from_scipy(np.ones((2, 2)))
    with pytest.raises(ValueError, match="indptr must start at 0"):
        Graph.from_csr(torch.tensor([0, 2, 1]), torch.tensor([0]))
    with pytest.raises(ValueError, match="out of range"):
        Graph.from_csr(torch.tensor([0, 1, 1]), torch.tensor([2]))
    with pytest.raises(ValueError, match="unsupported sparse layout"):
        Graph.from_torch_sparse(torch.eye(3).to_sparse_csc())
    with pytest.raises(TypeError, match="flashgnn.Graph or a DGL graph"):
        as_graph(ei)
    src, dst = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
    fake = FakeDGLGraph(src, dst, 3, rng)
    fake._eids = torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="permutation"):
        Graph.from_dgl(fake)
    block = FakeDGLGraph(src, dst, 3, rng)
    block.num_dst_nodes = lambda: 2
    with pytest.raises(ValueError, match="indptr has 3 rows but there are 2 destination nodes"):
        Graph.from_dgl(block)
    fake._eids = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="permutation"):
        Graph.from_dgl(fake)
    twice = FakeDGLGraph(torch.tensor([0, 1, 0]), torch.tensor([1, 2, 1]), 3, rng)
    with pytest.raises(ValueError, match=r"duplicate edge 0 -> 1 \(edges 0 and 2\)"):
        Graph.from_dgl(twice)


@pytest.mark.parametrize("isolated", [False, True])
def test_zero_in_degree_known_from_every_constructor(isolated, rng):
    """The CSR constructors read it with their checks; the others compute it on demand."""
    src, dst = torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 1 if isolated else 0])
    from_edges = Graph.from_edge_index(torch.stack([src, dst]), 4)
    for g in (
        Graph.from_dgl(FakeDGLGraph(src, dst, 4, rng)),
        from_edges,
        Graph.from_csr(from_edges.indptr, from_edges.indices),
    ):
        assert g.has_zero_in_degree() is isolated
        assert bool((g.in_degrees() == 0).any()) is isolated


def test_non_finite_edge_weights_are_rejected():
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ValueError, match="edge_weight holds 1 NaN or infinite"):
        Graph.from_edge_index(ei, 3, edge_weight=torch.tensor([1.0, float("nan"), 2.0]))


@pytest.mark.parametrize("norm", ["both", "right", "left", "none"])
def test_gcn_norm_values_op_on_a_csr_and_its_format(norm, rng):
    """ops.gcn_norm_values, which Graph.gcn_values calls: a bipartite CSR's normalised values in
    the layout of its ME-BCRS, by the degrees of the CSR alone."""
    a = random_csr(13, 21, 0.3, rng)
    fmt = MEBCRS.from_csr(a.indptr, a.indices, n_cols=21)
    indptr, indices = torch.from_numpy(a.indptr).long(), torch.from_numpy(a.indices).long()
    weight = torch.from_numpy(rng.uniform(0.5, 2.0, a.nnz))
    got = gcn_norm_values(fmt, indptr, indices, 21, norm, torch.float64, weight)
    d_in = np.maximum(np.diff(a.indptr), 1)[:, None]
    d_out = np.maximum(np.bincount(a.indices, minlength=21), 1)[None, :]
    scale = {
        "both": 1 / np.sqrt(d_in * d_out),
        "right": 1 / d_in + 0 * d_out,
        "left": 1 / d_out + 0 * d_in,
        "none": np.ones((13, 21)),
    }[norm]
    weighted = sp.csr_matrix((weight.numpy(), a.indices, a.indptr), shape=(13, 21)).toarray()
    assert got.dtype == torch.float64
    dense = fmt.with_values(got).to_dense().numpy()
    np.testing.assert_allclose(dense, weighted * scale, rtol=1e-12)
