"""flashgnn.nn.pyg against torch_geometric's own layers: the same parameters
(``load_state_dict`` of the PyG layer), outputs and gradients (input, edge weights, every
parameter) in float64 to 1e-10, on cora, citeseer and a random graph with self-loops and
isolated nodes; the Graph cache per edge_index; bad input; precision and autocast."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch_geometric.nn as pyg_nn

import flashgnn
from flashgnn.graph import Graph
from flashgnn.nn import pyg
from tests.helpers import data_dir, needs_gpu, rel_err

TOL = 1e-10


def load(name: str):
    """(x float64 [N, F], edge_index int64 [2, E]) of a real graph; skipped when absent."""
    root = data_dir()
    if root is None or not (root / f"{name}.npz").is_file():
        pytest.skip(f"{name} not found: set FLASHGNN_DATA or provide ../shared/datasets")
    with np.load(root / f"{name}.npz") as d:
        indptr, indices = d["indptr"].astype(np.int64), d["indices"].astype(np.int64)
        dst = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
        x = torch.from_numpy(d["x"].astype(np.float64))
    return x, torch.from_numpy(np.stack([indices, dst]))


def random_graph(rng, n: int = 60, in_channels: int = 7):
    """(x, edge_index): duplicate-free edges in random order, with some self-loops and nodes
    0 .. 4 isolated (no edge at all)."""
    dense = rng.random((n, n)) < 0.08
    dense[:5, :] = dense[:, :5] = False
    loops = rng.permutation(np.arange(5, n))[: n // 4]
    dense[loops, loops] = True
    src, dst = dense.nonzero()
    order = rng.permutation(src.size)
    edge_index = torch.from_numpy(np.stack([src[order], dst[order]]).astype(np.int64))
    return torch.from_numpy(rng.standard_normal((n, in_channels))), edge_index


def graph_input(name: str, rng):
    return random_graph(rng) if name == "random" else load(name)


def pair(ref: torch.nn.Module, ours: torch.nn.Module):
    """The PyG layer in float64 with random (non-zero) parameters, and ours with its state."""
    ref = ref.double()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    ours = ours.double()
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def check_same(ref_out, out, ref_inputs, inputs, ref, ours):
    """Outputs equal; then, under one upstream gradient, the gradients of every input and of
    every parameter (matched by name) equal."""
    assert out.shape == ref_out.shape
    assert close(out, ref_out)
    upstream = torch.randn_like(out)
    (ref_out * upstream).sum().backward()
    (out * upstream).sum().backward()
    for a, b in zip(ref_inputs, inputs):
        assert close(b.grad, a.grad)
    ours_params = dict(ours.named_parameters())
    for name, p in ref.named_parameters():
        if p.requires_grad:
            assert close(ours_params[name].grad, p.grad), name


def close(a: torch.Tensor, ref: torch.Tensor) -> bool:
    """max |a - ref| <= TOL, relative to the largest |ref| when that is above 1 (the input
    gradient of AGNN at an all-zero feature row is about 1e11: F.normalize divides by 1e-12)."""
    return bool((a - ref).abs().max() <= TOL * max(1.0, float(ref.abs().max())))


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


# ---------------------------------------------------------------------------- GCN
GCN_OPTIONS = [
    {},
    {"improved": True},
    {"add_self_loops": False},
    {"normalize": False},
    {"bias": False},
    {"cached": True},
    {"improved": True, "add_self_loops": False},
]


@pytest.mark.parametrize("options", GCN_OPTIONS)
@pytest.mark.parametrize("graph", ["random", "cora", "citeseer"])
@pytest.mark.parametrize("weighted", [False, True])
def test_gcn_matches_pyg(graph, options, weighted, rng):
    x, edge_index = graph_input(graph, rng)
    ref, ours = pair(
        pyg_nn.GCNConv(x.shape[1], 6, **options), pyg.GCNConv(x.shape[1], 6, **options)
    )
    assert set(ours.state_dict()) == set(ref.state_dict())
    inputs = [x]
    if weighted:
        inputs.append(torch.from_numpy(rng.random(edge_index.shape[1]) + 0.1))
    ref_inputs, inputs = leaves(*inputs), leaves(*inputs)
    for _ in range(2):  # the second call reuses the graph (and, cached, the values)
        for t in ref_inputs + inputs:
            t.grad = None
        ref.zero_grad()
        ours.zero_grad()
        ref_out = ref(ref_inputs[0], edge_index, *ref_inputs[1:])
        out = ours(inputs[0], edge_index, *inputs[1:])
        check_same(ref_out, out, ref_inputs, inputs, ref, ours)
        if options.get("cached"):
            break  # PyG's second call would backward through the first call's edge_weight


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
@pytest.mark.parametrize("options", [{}, {"improved": True}, {"normalize": False}])
def test_gcn_adj_t_matches_pyg(layout, options, rng):
    x, edge_index = random_graph(rng)
    n = x.shape[0]
    values = torch.from_numpy(rng.random(edge_index.shape[1]) + 0.1)
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), values, (n, n)).coalesce()
    adj_t = adj_t if layout == torch.sparse_coo else adj_t.to_sparse_csr()
    ref, ours = pair(pyg_nn.GCNConv(7, 5, **options), pyg.GCNConv(7, 5, **options))
    (x_ref,), (x_ours,) = leaves(x), leaves(x)
    check_same(ref(x_ref, adj_t), ours(x_ours, adj_t), [x_ref], [x_ours], ref, ours)
    with pytest.raises(ValueError, match="adj_t"):
        ours(x, adj_t, values)


def test_gcn_cached_keeps_the_first_edges(rng):
    x, edge_index = random_graph(rng)
    ref, ours = pair(pyg_nn.GCNConv(7, 4, cached=True), pyg.GCNConv(7, 4, cached=True))
    ref(x, edge_index), ours(x, edge_index)
    other = edge_index[:, : edge_index.shape[1] // 2]
    assert (ours(x, other) - ref(x, other)).abs().max() <= TOL
    assert (ours(x, other) - pyg.GCNConv(7, 4).double()(x, other)).abs().max() > 0
    ours.reset_parameters()
    ours.load_state_dict(ref.state_dict())
    fresh = pyg_nn.GCNConv(7, 4).double()
    fresh.load_state_dict(ref.state_dict())
    assert (ours(x, other) - fresh(x, other)).abs().max() <= TOL


# ---------------------------------------------------------------------------- AGNN
@pytest.mark.parametrize("options", [{}, {"add_self_loops": False}, {"requires_grad": False}])
@pytest.mark.parametrize("graph", ["random", "cora", "citeseer"])
def test_agnn_matches_pyg(graph, options, rng):
    x, edge_index = graph_input(graph, rng)
    ref, ours = pair(pyg_nn.AGNNConv(**options), pyg.AGNNConv(**options))
    assert set(ours.state_dict()) == set(ref.state_dict())
    (x_ref,), (x_ours,) = leaves(x), leaves(x)
    check_same(ref(x_ref, edge_index), ours(x_ours, edge_index), [x_ref], [x_ours], ref, ours)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_agnn_adj_t_matches_edge_index(layout, rng):
    x, edge_index = random_graph(rng)
    n = x.shape[0]
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.shape[1]), (n, n))
    adj_t = adj_t.coalesce() if layout == torch.sparse_coo else adj_t.to_sparse_csr()
    ref, ours = pair(pyg_nn.AGNNConv(), pyg.AGNNConv())
    assert (ours(x, adj_t) - ref(x, edge_index)).abs().max() <= TOL


# ---------------------------------------------------------------------------- GAT
GAT_OPTIONS = [
    {},
    {"heads": 3},
    {"heads": 3, "concat": False},
    {"add_self_loops": False, "heads": 2},
    {"negative_slope": 0.05},
    {"bias": False},
    {"dropout": 0.4},  # compared in eval mode: no dropout
    {"residual": True, "heads": 2},
    {"residual": True, "heads": 2, "concat": False},
]


@pytest.mark.parametrize("options", GAT_OPTIONS)
@pytest.mark.parametrize("graph", ["random", "cora", "citeseer"])
def test_gat_matches_pyg(graph, options, rng):
    x, edge_index = graph_input(graph, rng)
    ref, ours = pair(
        pyg_nn.GATConv(x.shape[1], 4, **options), pyg.GATConv(x.shape[1], 4, **options)
    )
    ref.eval(), ours.eval()
    assert set(ours.state_dict()) == set(ref.state_dict())
    (x_ref,), (x_ours,) = leaves(x), leaves(x)
    out, (edges, alpha) = ours(x_ours, edge_index, return_attention_weights=True)
    ref_out, (ref_edges, ref_alpha) = ref(x_ref, edge_index, return_attention_weights=True)
    assert torch.equal(edges, ref_edges)
    assert alpha.shape == ref_alpha.shape
    assert (alpha - ref_alpha).abs().max() <= TOL
    check_same(ref_out, out, [x_ref], [x_ours], ref, ours)


def test_gat_dropout_in_training(rng):
    x, edge_index = random_graph(rng)
    conv = pyg.GATConv(7, 4, heads=2, dropout=0.5).double()
    conv.eval()
    kept = conv(x, edge_index)
    conv.train()
    torch.manual_seed(0)
    dropped = conv(x, edge_index)
    assert torch.isfinite(dropped).all()
    assert (dropped - kept).abs().max() > 1e-3
    torch.manual_seed(0)
    assert torch.equal(conv(x, edge_index), dropped)


def test_gat_unsupported_options_raise(rng):
    x, edge_index = random_graph(rng)
    with pytest.raises(NotImplementedError, match="edge_dim"):
        pyg.GATConv(7, 4, edge_dim=3)
    with pytest.raises(NotImplementedError, match="in_channels"):
        pyg.GATConv((7, 5), 4)
    conv = pyg.GATConv(7, 4).double()
    with pytest.raises(NotImplementedError, match="bipartite"):
        conv((x, x), edge_index)
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.shape[1]), (60, 60))
    assert (conv(x, adj_t) - conv(x, edge_index)).abs().max() <= TOL
    with pytest.raises(NotImplementedError, match="return_attention_weights"):
        conv(x, adj_t, return_attention_weights=True)


# ---------------------------------------------------------------------------- the graph cache
def count_builds(monkeypatch) -> list:
    calls = []
    build = Graph.from_edge_index.__func__

    def counted(cls, *args, **kwargs):
        calls.append(1)
        return build(cls, *args, **kwargs)

    monkeypatch.setattr(Graph, "from_edge_index", classmethod(counted))
    return calls


def test_graph_built_once_per_edge_index(monkeypatch, rng):
    x, edge_index = random_graph(rng)
    builds = count_builds(monkeypatch)
    conv, second = pyg.GCNConv(7, 3).double(), pyg.GCNConv(7, 3).double()
    first = conv(x, edge_index)
    conv(x, edge_index), second(x, edge_index)
    assert len(builds) == 1
    other = edge_index.clone()
    assert (conv(x, other) - first).abs().max() <= TOL
    assert len(builds) == 2
    edge_index[:, [0, 1]] = edge_index[:, [1, 0]]  # in place: the version moves
    conv(x, edge_index)
    assert len(builds) == 3
    conv(x, edge_index)
    assert len(builds) == 3


def test_graph_cache_lets_the_edge_index_go(rng):
    x, edge_index = random_graph(rng)
    before = len(pyg._EDGES)
    pyg.GCNConv(7, 3).double()(x, edge_index)
    assert len(pyg._EDGES) == before + 1
    del edge_index
    assert len(pyg._EDGES) == before
    for layout in (torch.sparse_coo, torch.sparse_csr):
        adj_t = torch.eye(60, dtype=torch.float64).to_sparse(layout=layout)
        pyg.GCNConv(7, 3).double()(x, adj_t)
        assert len(pyg._EDGES) == before + 1
        del adj_t
        assert len(pyg._EDGES) == before


# ---------------------------------------------------------------------------- bad input
def test_bad_edge_index_raises(rng):
    x, edge_index = random_graph(rng)
    conv = pyg.GCNConv(7, 3).double()
    with pytest.raises(ValueError, match="shape"):
        conv(x, edge_index[0])
    with pytest.raises(ValueError, match="shape"):
        conv(x, torch.cat([edge_index, edge_index[:1]]))
    with pytest.raises(TypeError, match="integer"):
        conv(x, edge_index.double())
    with pytest.raises(ValueError, match="out of range"):
        conv(x, torch.cat([edge_index, torch.tensor([[0], [60]])], 1))
    with pytest.raises(ValueError, match="negative"):
        conv(x, torch.cat([edge_index, torch.tensor([[-1], [3]])], 1))
    with pytest.raises(ValueError, match="duplicate"):
        edge = int((edge_index[0] != edge_index[1]).nonzero()[0, 0])  # not a self-loop
        conv(x, torch.cat([edge_index, edge_index[:, edge : edge + 1]], 1))
    with pytest.raises(TypeError, match="edge_index"):
        conv(x, edge_index.tolist())
    with pytest.raises(ValueError, match="adj_t"):
        conv(x, torch.eye(3).to_sparse())
    with pytest.raises(ValueError, match="edge_weight"):
        conv(x, edge_index, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="input channels"):
        conv(x[:, :3], edge_index)
    with pytest.raises(NotImplementedError, match="bipartite"):
        conv((x, x), edge_index)


# ---------------------------------------------------------------------------- precision
def test_gcn_precision_context_and_autocast(rng):
    x, edge_index = random_graph(rng)
    x = x.float()
    conv = pyg.GCNConv(7, 5)
    exact = conv(x, edge_index)
    with flashgnn.precision("bf16"):
        reduced = conv(x, edge_index)
    assert 0 < (reduced - exact).abs().max() <= 2e-2 * exact.abs().max()
    fixed = pyg.GCNConv(7, 5, precision="bf16")
    fixed.load_state_dict(conv.state_dict())
    assert torch.equal(fixed(x, edge_index), reduced)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = conv(x, edge_index)
    assert torch.isfinite(auto).all()
    assert (auto.float() - exact).abs().max() <= 2e-2 * exact.abs().max()


def test_agnn_and_gat_autocast(rng):
    x, edge_index = random_graph(rng)
    x = x.float()
    for conv in (pyg.AGNNConv(), pyg.GATConv(7, 4, heads=2)):
        exact = conv(x, edge_index)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = conv(x, edge_index)
        assert torch.isfinite(auto).all()
        assert (auto.float() - exact).abs().max() <= 3e-2 * exact.abs().max()


# ---------------------------------------------------------------------------- GPU
# relative (Frobenius) error of the CUDA kernels against PyG in float32, by precision
GPU_TOL = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1.6e-2}


# each layer's class name and its constructor arguments for inputs of a width
GPU_LAYERS = {
    "gcn": ("GCNConv", lambda width: ((width, 16), {})),
    "agnn": ("AGNNConv", lambda width: ((), {})),
    "gat": ("GATConv", lambda width: ((width, 8), {"heads": 4})),
}


@needs_gpu
@pytest.mark.parametrize("precision", list(GPU_TOL))
@pytest.mark.parametrize("layer", list(GPU_LAYERS))
def test_gpu_matches_pyg_on_cora(layer, precision):
    """On the GPU (CUDA kernels), the output and the input gradient against PyG's layer on
    the same GPU, float32, cora."""
    x, edge_index = load("cora")
    x, edge_index = x.float().cuda(), edge_index.cuda()
    name, arguments = GPU_LAYERS[layer]
    args, kwargs = arguments(x.shape[1])
    ref = getattr(pyg_nn, name)(*args, **kwargs).cuda()
    ours = getattr(pyg, name)(*args, **kwargs, precision=precision).cuda()
    ours.load_state_dict(ref.state_dict())
    x_ref, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ref, y = ref(x_ref, edge_index), ours(x_ours, edge_index)
    upstream = torch.randn_like(y_ref)
    (y_ref * upstream).sum().backward()
    (y * upstream).sum().backward()
    assert rel_err(y, y_ref) <= GPU_TOL[precision]
    assert rel_err(x_ours.grad, x_ref.grad) <= GPU_TOL[precision]
