"""flashgnn.nn layers against PyG's GCNConv, AGNNConv and GATConv (weights mapped), float64
gradcheck, the DGL graph path, zero in-degree errors and the precision context.

PyG mapping: PyG's GCNConv normalises with in-degrees on both sides and adds self-loops
itself, so on directed graphs it runs with ``normalize=False`` and the DGL-style factors
computed here in NumPy as its edge weights; on undirected graphs (and cora) its own
normalisation is used. PyG's AGNNConv and GATConv run with ``add_self_loops=False`` on the
edge_index of a flashgnn Graph to which the loops were added explicitly.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call
from torch_geometric.nn import AGNNConv as PygAGNNConv
from torch_geometric.nn import GATConv as PygGATConv
from torch_geometric.nn import GCNConv as PygGCNConv

import flashgnn
from flashgnn import Graph
from flashgnn.nn import AGNNConv, GATConv, GCNConv, ZeroInDegreeError
from tests.graph.test_graph import FakeDGLGraph
from tests.helpers import GPU, data_dir, needs_gpu, random_csr, rel_err

FP32_TOL = 1e-5
# relative (Frobenius) error against PyG in fp32, measured on cora at about 3e-5 (fp16, tf32:
# 10 mantissa bits) and 2.5e-4 (bf16: 7 bits) for GCN; 3e-4 / 2.4e-3 for AGNN
REDUCED_TOL = {"tf32": 2e-3, "fp16": 2e-3, "bf16": 1.6e-2}


def random_graph(n: int, density: float, rng, symmetric: bool) -> Graph:
    """Random graph with a self-loop on every node, edges in a random order."""
    m = random_csr(n, n, density, rng)
    if symmetric:
        m = m + m.T
    m.setdiag(0)
    m.eliminate_zeros()
    coo = m.tocoo()
    order = rng.permutation(coo.nnz)
    ei = torch.from_numpy(np.stack([coo.col[order], coo.row[order]]).astype(np.int64))
    return Graph.from_edge_index(ei, n).add_self_loops()


def dgl_norm(edge_index: torch.Tensor, n: int, norm: str) -> torch.Tensor:
    """DGL GraphConv's per-edge normalisation, float32 [E], from NumPy degree counts."""
    src, dst = edge_index.numpy()
    d_in = np.maximum(np.bincount(dst, minlength=n), 1).astype(np.float64)
    d_out = np.maximum(np.bincount(src, minlength=n), 1).astype(np.float64)
    factor = {
        "both": (d_in[dst] * d_out[src]) ** -0.5,
        "right": 1 / d_in[dst],
        "left": 1 / d_out[src],
        "none": np.ones(len(src)),
    }[norm]
    return torch.from_numpy(factor.astype(np.float32))


def load_cora():
    root = data_dir()
    if root is None or not (root / "cora.npz").is_file():
        pytest.skip("cora not found: set FLASHGNN_DATA or provide ../shared/datasets")
    with np.load(root / "cora.npz") as d:
        n = int(d["num_nodes"])
        graph = Graph.from_csr(d["indptr"].astype(np.int64), d["indices"].astype(np.int64), n)
        return graph, torch.from_numpy(d["x"].astype(np.float32))


def grads(*tensors):
    return [t.grad.clone() for t in tensors]


def assert_all_close(ours, refs, tol=FP32_TOL):
    for i, (a, b) in enumerate(zip(ours, refs)):
        err = rel_err(a, b)
        assert err < tol, f"tensor {i}: relative error {err:.2e} >= {tol:.0e}"


# ---------------------------------------------------------------------------- builders
def gcn_pair(in_feats, out_feats, norm="both", **kwargs):
    ours = GCNConv(in_feats, out_feats, norm=norm, **kwargs)
    ref = PygGCNConv(in_feats, out_feats, add_self_loops=False, normalize=False)
    with torch.no_grad():
        ours.bias.normal_()
        ref.lin.weight.copy_(ours.weight.t())
        ref.bias.copy_(ours.bias)
    return ours, ref


def agnn_pair(beta=0.7, **kwargs):
    ours = AGNNConv(init_beta=beta, **kwargs)
    ref = PygAGNNConv(requires_grad=True, add_self_loops=False)
    with torch.no_grad():
        ref.beta.fill_(beta)
    return ours, ref


def gat_pair(in_feats, out_feats, heads, residual=False, negative_slope=0.2, **kwargs):
    ours = GATConv(
        in_feats, out_feats, heads, negative_slope=negative_slope, residual=residual, **kwargs
    )
    ref = PygGATConv(
        in_feats,
        out_feats,
        heads,
        negative_slope=negative_slope,
        add_self_loops=False,
        residual=residual,
    )
    with torch.no_grad():
        ours.bias.normal_()
        ref.lin.weight.copy_(ours.fc.weight)
        ref.att_src.copy_(ours.attn_l)
        ref.att_dst.copy_(ours.attn_r)
        ref.bias.copy_(ours.bias)
        if residual:
            res = (
                ours.res_fc.weight
                if isinstance(ours.res_fc, torch.nn.Linear)
                else torch.eye(in_feats)
            )
            ref.res.weight.copy_(res)
    return ours, ref


def gat_params(conv):
    return [conv.fc.weight, conv.attn_l, conv.attn_r, conv.bias]


def pyg_gat_params(conv):
    return [conv.lin.weight, conv.att_src, conv.att_dst, conv.bias]


# ---------------------------------------------------------------------------- GCN
@pytest.mark.parametrize("norm", ["both", "right", "left", "none"])
@pytest.mark.parametrize("in_feats, out_feats", [(12, 5), (5, 12)])
def test_gcn_directed_weighted_matches_pyg(norm, in_feats, out_feats, rng):
    g = random_graph(70, 0.06, rng, symmetric=False)
    ei = g.edge_index
    ours, ref = gcn_pair(in_feats, out_feats, norm)
    x = torch.randn(g.num_nodes, in_feats, requires_grad=True)
    w = torch.rand(g.num_edges, requires_grad=True)
    x_ref, w_ref = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y = ours(g, x, edge_weight=w)
    y_ref = ref(x_ref, ei, w_ref * dgl_norm(ei, g.num_nodes, norm))
    assert_all_close([y], [y_ref])
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    assert_all_close(
        grads(x, w, ours.bias) + [ours.weight.grad.t()],
        grads(x_ref, w_ref, ref.bias) + [ref.lin.weight.grad],
    )


def test_gcn_graph_weights_and_external_weight(rng):
    g = random_graph(40, 0.1, rng, symmetric=False)
    w = torch.rand(g.num_edges)
    weighted = Graph.from_edge_index(g.edge_index, g.num_nodes, edge_weight=w)
    ours, ref = gcn_pair(6, 4, "right")
    x = torch.randn(g.num_nodes, 6)
    # the graph's own weights are used when forward gets no edge_weight
    assert_all_close([ours(weighted, x)], [ours(g, x, edge_weight=w)])
    external = GCNConv(6, 4, norm="right", weight=False, bias=False)
    assert_all_close([external(g, x, weight=ours.weight) + ours.bias], [ours(g, x)])
    assert_all_close(
        [external(g, x)],
        [ref.propagate(g.edge_index, x=x, edge_weight=dgl_norm(g.edge_index, 40, "right"))],
    )
    with pytest.raises(ValueError, match="weight=False"):
        ours(g, x, weight=ours.weight)
    with pytest.raises(ValueError, match="norm must be one of"):
        GCNConv(6, 4, norm="sym")


def test_gcn_undirected_matches_pyg_normalisation(rng):
    g = random_graph(90, 0.05, rng, symmetric=True)
    ours, _ = gcn_pair(8, 6)
    ref = PygGCNConv(8, 6, add_self_loops=False)  # its own D^-1/2 (A + I) D^-1/2
    with torch.no_grad():
        ref.lin.weight.copy_(ours.weight.t())
        ref.bias.copy_(ours.bias)
    x = torch.randn(g.num_nodes, 8)
    assert_all_close([ours(g, x)], [ref(x, g.edge_index)])


def test_gcn_cora_matches_pyg():
    graph, x = load_cora()
    ours, _ = gcn_pair(x.shape[1], 16)
    ref = PygGCNConv(x.shape[1], 16)  # adds the self-loops itself
    with torch.no_grad():
        ref.lin.weight.copy_(ours.weight.t())
        ref.bias.copy_(ours.bias)
    looped = graph.add_self_loops()
    y, y_ref = ours(looped, x), ref(x, graph.edge_index)
    assert_all_close([y], [y_ref])
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    assert_all_close([ours.weight.grad.t(), ours.bias.grad], [ref.lin.weight.grad, ref.bias.grad])
    for precision, tol in REDUCED_TOL.items():
        reduced = GCNConv(x.shape[1], 16, precision=precision)
        reduced.load_state_dict(ours.state_dict())
        err = rel_err(reduced(looped, x), y_ref)
        assert 0 < err < tol, f"{precision}: relative error {err:.2e}"


# ---------------------------------------------------------------------------- AGNN
@pytest.mark.parametrize("symmetric", [False, True])
def test_agnn_matches_pyg(symmetric, rng):
    g = random_graph(80, 0.06, rng, symmetric)
    ours, ref = agnn_pair(0.7)
    x = torch.randn(g.num_nodes, 10)
    x[3] = 0  # a zero vector: cosine 0 through normalize's eps, in both
    x.requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = ours(g, x), ref(x_ref, g.edge_index)
    assert_all_close([y], [y_ref])
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    assert_all_close([x.grad, ours.beta.grad], [x_ref.grad, ref.beta.grad])
    assert ours.beta.grad.abs().item() > 0


def test_agnn_fixed_beta_is_a_buffer():
    conv = AGNNConv(init_beta=2.0, learn_beta=False)
    assert list(conv.parameters()) == [] and conv.beta.item() == 2.0
    assert "beta" in conv.state_dict()


def test_agnn_cora_matches_pyg():
    graph, x = load_cora()
    looped = graph.add_self_loops()
    ours, ref = agnn_pair(1.3)
    y_ref = ref(x, looped.edge_index)
    assert_all_close([ours(looped, x)], [y_ref])
    for precision, tol in REDUCED_TOL.items():
        with flashgnn.precision(precision):
            err = rel_err(ours(looped, x), y_ref)
        assert 0 < err < tol, f"{precision}: relative error {err:.2e}"


# ---------------------------------------------------------------------------- GAT
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize(
    "in_feats, residual, heads", [(7, False, 3), (7, True, 3), (12, True, 3), (7, False, 1)]
)
@pytest.mark.parametrize("returned", [False, True], ids=["one node", "with attention"])
def test_gat_matches_pyg(symmetric, in_feats, residual, heads, returned, rng):
    """Both paths: the one-node attention (ops.gat_attention) and the composed ops that also
    return the attention."""
    g = random_graph(60, 0.07, rng, symmetric)
    ours, ref = gat_pair(
        in_feats, 4, heads, residual=residual, negative_slope=0.15
    )  # 12 = 3 heads x 4: identity
    x = torch.randn(g.num_nodes, in_feats, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    y, att = ours(g, x, get_attention=True) if returned else (ours(g, x), None)
    y_ref, (ei_ref, att_ref) = ref(x_ref, g.edge_index, return_attention_weights=True)
    assert y.shape == (g.num_nodes, heads, 4)
    assert torch.equal(ei_ref, g.edge_index)
    assert_all_close([y.flatten(1)], [y_ref])
    if returned:
        assert att.shape == (g.num_edges, heads, 1)
        assert_all_close([att[..., 0]], [att_ref])
    upstream = torch.randn_like(y_ref)
    (y.flatten(1) * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    ours_p, ref_p = gat_params(ours), pyg_gat_params(ref)
    if residual and in_feats != 12:
        ours_p, ref_p = ours_p + [ours.res_fc.weight], ref_p + [ref.res.weight]
    assert_all_close([x.grad] + [p.grad for p in ours_p], [x_ref.grad] + [p.grad for p in ref_p])


def test_gat_attention_dropout_and_edge_weight(rng):
    g = random_graph(50, 0.1, rng, symmetric=False)
    conv = GATConv(5, 3, 2, attn_drop=0.5, activation=F.elu)
    x = torch.randn(g.num_nodes, 5)
    conv.eval()
    _, att_eval = conv(g, x, get_attention=True)
    conv.train()
    y, att = conv(g, x, get_attention=True)
    kept = att != 0
    assert 0.3 < kept.float().mean() < 0.7
    assert torch.allclose(
        att[kept], 2 * att_eval[kept]
    )  # inverted dropout scales survivors by 1/(1-p)
    # the output aggregates exactly the returned (dropped) attention
    ft = conv.fc(x).view(-1, 2, 3)
    src, dst = g.edge_index
    dense = torch.zeros(g.num_nodes, 2, 3).index_add_(0, dst, att * ft[src])
    assert_all_close([y], [F.elu(dense + conv.bias.view(1, 2, 3))])
    # DGL multiplies the attention by edge_weight after the softmax
    conv.eval()
    w = torch.rand(g.num_edges)
    _, att_w = conv(g, x, edge_weight=w, get_attention=True)
    assert_all_close([att_w], [att_eval * w[:, None, None]])


def test_gat_cora_matches_pyg():
    graph, x = load_cora()
    looped = graph.add_self_loops()
    ours, ref = gat_pair(x.shape[1], 8, 2)
    y, y_ref = ours(looped, x).flatten(1), ref(x, looped.edge_index)
    assert_all_close([y], [y_ref])
    y.sum().backward()
    y_ref.sum().backward()
    assert_all_close([p.grad for p in gat_params(ours)], [p.grad for p in pyg_gat_params(ref)])
    for precision, tol in REDUCED_TOL.items():
        with flashgnn.precision(precision):
            err = rel_err(ours(looped, x).flatten(1), y_ref)
        assert 0 < err < tol, f"{precision}: relative error {err:.2e}"


# ---------------------------------------------------------------------------- gradcheck
def small_directed_graph() -> Graph:
    """11 nodes, directed, node 10 has no in-edge and node 4 only a self-loop."""
    src = [0, 1, 2, 3, 5, 6, 7, 8, 9, 0, 2, 3, 6, 10, 4, 1, 8]
    dst = [1, 2, 3, 0, 6, 7, 8, 9, 5, 5, 0, 3, 2, 1, 4, 9, 0]
    g = Graph.from_edge_index(torch.tensor([src, dst]), 11)
    assert g.in_degrees()[10] == 0
    return g


def gradcheck_module(conv, graph, inputs: dict, names, kwargs=None, check=torch.autograd.gradcheck):
    """gradcheck (or ``check``: gradgradcheck) of conv(graph, **inputs) in float64 w.r.t. the
    inputs and the named parameters."""
    conv = conv.double()
    params = {
        name: p.detach().clone().requires_grad_()
        for name, p in conv.named_parameters()
        if name in names
    }
    assert set(params) == set(names)
    keys = list(inputs) + list(params)

    def fn(*tensors):
        values = dict(zip(keys, tensors))
        args = {k: values[k] for k in inputs}
        out = functional_call(
            conv, {k: values[k] for k in params}, (graph,), {**args, **(kwargs or {})}
        )
        return out[0] if isinstance(out, tuple) else out

    tensors = [inputs[k] for k in inputs] + [params[k] for k in params]
    assert check(fn, tensors, eps=1e-6, atol=1e-7)


def test_gradcheck_gcn():
    g = small_directed_graph()
    for norm in ("both", "left"):
        x = torch.randn(11, 3, dtype=torch.float64, requires_grad=True)
        w = torch.rand(g.num_edges, dtype=torch.float64, requires_grad=True)
        gradcheck_module(
            GCNConv(3, 2, norm=norm, allow_zero_in_degree=True),
            g,
            {"feat": x, "edge_weight": w},
            ["weight", "bias"],
        )


def test_gradcheck_agnn():
    g = small_directed_graph()
    x = torch.randn(11, 4, dtype=torch.float64, requires_grad=True)
    gradcheck_module(AGNNConv(0.8, allow_zero_in_degree=True), g, {"feat": x}, ["beta"])


@pytest.mark.parametrize("returned", [False, True], ids=["one node", "with attention"])
def test_gradcheck_gat(returned):
    g = small_directed_graph()
    x = torch.randn(11, 3, dtype=torch.float64, requires_grad=True)
    conv = GATConv(3, 2, 2, residual=True, allow_zero_in_degree=True)
    gradcheck_module(
        conv,
        g,
        {"feat": x},
        ["fc.weight", "attn_l", "attn_r", "bias", "res_fc.weight"],
        kwargs={"get_attention": returned},
    )


# ---------------------------------------------------------------------------- DGL path
def test_dgl_graph_path_matches_pyg(rng):
    n = 45
    g = random_graph(n, 0.1, rng, symmetric=False)
    src, dst = g.edge_index
    fake = FakeDGLGraph(src, dst, n, rng)
    assert not torch.equal(fake.adj_tensors("csc")[2], torch.arange(g.num_edges))
    w = torch.rand(g.num_edges)  # in DGL edge-id order
    x = torch.randn(n, 6)

    gcn, gcn_ref = gcn_pair(6, 5, "both")
    assert_all_close(
        [gcn(fake, x, edge_weight=w)],
        [gcn_ref(x, g.edge_index, w * dgl_norm(g.edge_index, n, "both"))],
    )
    agnn, agnn_ref = agnn_pair(0.9)
    assert_all_close([agnn(fake, x)], [agnn_ref(x, g.edge_index)])
    gat, gat_ref = gat_pair(6, 2, 2)
    y, att = gat(fake, x, get_attention=True)
    y_ref, (_, att_ref) = gat_ref(x, g.edge_index, return_attention_weights=True)
    assert_all_close([y.flatten(1), att[..., 0]], [y_ref, att_ref])


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "make", [lambda: GCNConv(4, 3), lambda: AGNNConv(), lambda: GATConv(4, 3, 2)]
)
def test_zero_in_degree_raises_unless_allowed(make):
    g = Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), 4)  # node 3 is isolated
    x = torch.randn(4, 4)
    with pytest.raises(ZeroInDegreeError, match="0-in-degree"):
        make()(g, x)
    conv = make()
    conv.allow_zero_in_degree = True
    out = conv(g, x).reshape(4, -1)
    bias = getattr(conv, "bias", None)
    expected = torch.zeros_like(out[3]) if bias is None else bias.detach()
    assert torch.equal(out[3], expected)  # no message reaches node 3
    make()(g.add_self_loops(), x)  # self-loops cure it


def test_bad_layer_inputs(rng):
    g = random_graph(10, 0.2, rng, symmetric=False)
    conv = GCNConv(4, 3)
    with pytest.raises(ValueError, match=r"shape \(10, features\)"):
        conv(g, torch.randn(9, 4))
    with pytest.raises(ValueError, match="expected 4 input features"):
        conv(g, torch.randn(10, 5))
    with pytest.raises(TypeError, match="floating point"):
        conv(g, torch.ones(10, 4, dtype=torch.int64))
    with pytest.raises(TypeError, match="flashgnn.Graph or a DGL graph"):
        conv(g.edge_index, torch.randn(10, 4))
    with pytest.raises(ValueError, match="one value per edge"):
        conv(g, torch.randn(10, 4), edge_weight=torch.ones(g.num_edges + 1))
    with pytest.raises(ValueError, match="precision must be one of"):
        GATConv(4, 3, 2, precision="fp8")


# ---------------------------------------------------------------------------- precision
def test_precision_context(rng, monkeypatch):
    g = random_graph(40, 0.1, rng, symmetric=False)
    x = torch.randn(40, 6)
    conv = GCNConv(6, 6)
    y32 = conv(g, x)
    assert flashgnn.get_precision() == "fp32"
    with flashgnn.precision("fp16"):
        assert flashgnn.get_precision() == "fp16"
        y16 = conv(g, x)
        with flashgnn.precision("bf16"):
            ybf = conv(g, x)
        assert flashgnn.get_precision() == "fp16"
        pinned = GCNConv(6, 6, precision="fp32")
        pinned.load_state_dict(conv.state_dict())
        assert torch.equal(pinned(g, x), y32)  # a layer's own precision wins over the context
    assert flashgnn.get_precision() == "fp32"
    explicit = GCNConv(6, 6, precision="fp16")
    explicit.load_state_dict(conv.state_dict())
    assert torch.equal(explicit(g, x), y16)
    assert not torch.equal(y16, y32) and 0 < rel_err(y16, y32) < REDUCED_TOL["fp16"]
    assert rel_err(ybf, y32) > rel_err(y16, y32)
    with pytest.raises(ValueError, match="precision must be one of"):
        with flashgnn.precision("fp64"):
            pass

    # tf32 runs on the k = 4 format, the others on k = 8
    widths = []
    graph_conv = flashgnn.nn.gcn_conv.graph_conv
    monkeypatch.setattr(
        flashgnn.nn.gcn_conv,
        "graph_conv",
        lambda a, *args, **kw: widths.append(a.k) or graph_conv(a, *args, **kw),
    )
    for precision in ("tf32", "fp32", "bf16"):
        with flashgnn.precision(precision):
            conv(g, x)
    assert widths == [4, 8, 8]

    # the context is per thread
    seen = []
    with flashgnn.precision("bf16"):
        thread = threading.Thread(target=lambda: seen.append(flashgnn.get_precision()))
        thread.start()
        thread.join()
    assert seen == ["fp32"]


# ---------------------------------------------------------------------------- GPU
# ``make(precision)`` builds one layer of each kind on 9 input features (the GPU tests build
# it twice, for the CPU and the GPU)
each_layer = pytest.mark.parametrize(
    "make",
    [
        lambda p: GCNConv(9, 6, precision=p),
        lambda p: AGNNConv(0.8, precision=p),
        lambda p: GATConv(9, 4, 3, residual=True, precision=p),
    ],
    ids=["gcn", "agnn", "gat"],
)


@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
@each_layer
def test_gpu_matches_cpu(make, precision, rng):
    """The same layer on the GPU (CUDA kernels) and the CPU (reference ops emulating the same
    rounding): outputs and every gradient agree up to the order of fp32 accumulation."""
    g = random_graph(300, 0.02, rng, symmetric=False)
    cpu = make(precision)
    gpu = make(precision).cuda()
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(g.num_nodes, 9, requires_grad=True)
    x_gpu = x.detach().cuda().requires_grad_()
    y, y_gpu = cpu(g, x), gpu(g.to("cuda"), x_gpu)
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    (y_gpu * upstream.cuda()).sum().backward()
    assert_all_close(
        [y_gpu, x_gpu.grad] + [p.grad for p in gpu.parameters()],
        [y, x.grad] + [p.grad for p in cpu.parameters()],
        tol=1e-4,
    )


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU)])
@pytest.mark.parametrize(
    "make",
    [lambda: GCNConv(6, 4), AGNNConv, lambda: GATConv(6, 3, 2)],
    ids=["GCNConv", "AGNNConv", "GATConv"],
)
def test_graph_first_used_under_inference_mode_trains_afterwards(make, device, rng):
    """Formats, segments and normalised values cached during a torch.inference_mode call are
    normal tensors: a later call with autograd saves them for backward, and gets the same
    output."""
    graph = random_graph(41, 0.1, rng, symmetric=False).add_self_loops().to(device)
    layer = make().to(device)
    x = torch.randn(graph.num_nodes, 6, device=device)
    with torch.inference_mode():
        inferred = layer(graph, x)
    trained = layer(graph, x.requires_grad_())
    (grad,) = torch.autograd.grad(trained.sum(), [x])
    assert torch.allclose(trained.detach(), inferred) and torch.isfinite(grad).all()
