"""Layers on bipartite graphs and DGL blocks: [N_src] sources -> [N_dst] destinations.

References are PyG's layers on the same edges: a block whose destinations are its first
sources (DGL's convention) is, for PyG, a square graph on the N_src sources whose first N_dst
rows of output are the block's; a (feat_src, feat_dst) pair is PyG's GATConv tuple input, and
for AGNN (whose PyG layer takes one tensor) the square graph on cat([feat_dst, feat_src]) with
edges from node N_dst + j to node i. Gradients against PyG's, float64 gradcheck on the CPU,
the GPU against the CPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import functional_call
from torch_geometric.nn import GATConv as PygGATConv

from flashgnn import Graph
from flashgnn.nn import AGNNConv, GATConv, GCNConv
from models import GCN
from tests.graph.test_graph import FakeDGLGraph, random_block_edges
from tests.helpers import host_syncs, needs_gpu
from tests.nn.test_nn_layers import (
    agnn_pair,
    assert_all_close,
    dgl_norm,
    each_layer,
    gat_pair,
    gcn_pair,
)

N_SRC, N_DST = 53, 21


def block_edges(rng, n_src=N_SRC, n_dst=N_DST):
    """(src, dst) int64 [E] of a random block: every destination has an in-edge, destination
    i's own source i among them (as DGL's sampled blocks have)."""
    src, dst, _ = random_block_edges(n_src, n_dst, 0.12, rng)
    own = torch.arange(n_dst)
    has_own = torch.zeros(n_dst, dtype=torch.bool)
    has_own[dst[src == dst]] = True
    return torch.cat([src, own[~has_own]]), torch.cat([dst, own[~has_own]])


def block_graph(rng, **kwargs) -> Graph:
    src, dst = block_edges(rng, **kwargs)
    n_src, n_dst = kwargs.get("n_src", N_SRC), kwargs.get("n_dst", N_DST)
    return Graph.from_edge_index(torch.stack([src, dst]), (n_src, n_dst))


def backward_grads(out, upstream, tensors):
    return torch.autograd.grad((out * upstream).sum(), tensors)


def test_gcn_block_matches_pyg_on_the_embedding_graph(rng):
    """PyG's GCNConv with DGL's block normalisation (out-degrees of the block's sources,
    in-degrees of its destinations) as edge weights, on the N_src-node square graph."""
    g = block_graph(rng)
    ei = g.edge_index
    ours, ref = gcn_pair(9, 5, "both")
    x = torch.randn(N_SRC, 9, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    d_in = np.maximum(np.bincount(ei[1].numpy(), minlength=N_DST), 1)
    d_out = np.maximum(np.bincount(ei[0].numpy(), minlength=N_SRC), 1)
    norm = torch.from_numpy((d_in[ei[1]] * d_out[ei[0]]) ** -0.5).float()
    assert torch.allclose(
        norm, dgl_norm(ei, N_SRC, "both")
    )  # the square graph has the same degrees
    y, y_ref = ours(g, x), ref(x_ref, ei, norm)[:N_DST]
    assert y.shape == (N_DST, 5)
    assert_all_close([y], [y_ref])
    upstream = torch.randn_like(y)
    got = backward_grads(y, upstream, [x, ours.weight, ours.bias])
    want = backward_grads(y_ref, upstream, [x_ref, ref.lin.weight, ref.bias])
    assert_all_close([got[0], got[1].t(), got[2]], want)
    # a (feat_src, feat_dst) pair: GraphConv reads the sources only
    assert torch.equal(ours(g, (x, torch.randn(N_DST, 9))), y)


def test_agnn_block_matches_pyg_on_the_embedding_graph(rng):
    g = block_graph(rng)
    ours, ref = agnn_pair(0.6)
    x = torch.randn(N_SRC, 7, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = ours(g, x), ref(x_ref, g.edge_index)[:N_DST]
    assert y.shape == (N_DST, 7)
    assert_all_close([y], [y_ref])
    upstream = torch.randn_like(y)
    assert_all_close(
        backward_grads(y, upstream, [x, ours.beta]),
        backward_grads(y_ref, upstream, [x_ref, ref.beta]),
    )


def test_agnn_pair_matches_pyg_on_the_concatenated_graph(rng):
    """feat_dst apart from feat_src: PyG's AGNNConv on cat([feat_dst, feat_src]) with the
    sources shifted by N_dst gives the same cosines, softmax and sums."""
    g = block_graph(rng)
    ours, ref = agnn_pair(1.4)
    x_src = torch.randn(N_SRC, 6, requires_grad=True)
    x_dst = torch.randn(N_DST, 6, requires_grad=True)
    joined = torch.cat([x_dst, x_src]).detach().requires_grad_()
    src, dst = g.edge_index
    y = ours(g, (x_src, x_dst))
    y_ref = ref(joined, torch.stack([src + N_DST, dst]))[:N_DST]
    assert_all_close([y], [y_ref])
    upstream = torch.randn_like(y)
    d_src, d_dst, d_beta = backward_grads(y, upstream, [x_src, x_dst, ours.beta])
    d_joined, d_beta_ref = backward_grads(y_ref, upstream, [joined, ref.beta])
    assert_all_close([d_dst, d_src, d_beta], [d_joined[:N_DST], d_joined[N_DST:], d_beta_ref])


@pytest.mark.parametrize("heads, residual", [(1, False), (3, True)])
def test_gat_block_and_pair_match_pyg(heads, residual, rng):
    g = block_graph(rng)
    ours, ref = gat_pair(8, 4, heads, residual=residual, negative_slope=0.1)
    params = [ours.fc.weight, ours.attn_l, ours.attn_r, ours.bias]
    ref_params = [ref.lin.weight, ref.att_src, ref.att_dst, ref.bias]
    # a block: PyG's square graph on the sources, its first N_dst rows
    x = torch.randn(N_SRC, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    y, att = ours(g, x, get_attention=True)
    y_ref, (ei_ref, att_ref) = ref(x_ref, g.edge_index, return_attention_weights=True)
    assert y.shape == (N_DST, heads, 4) and torch.equal(ei_ref, g.edge_index)
    assert_all_close([y.flatten(1), att[..., 0]], [y_ref[:N_DST], att_ref])
    upstream = torch.randn(N_DST, heads * 4)
    assert_all_close(
        backward_grads(y.flatten(1), upstream, [x] + params),
        backward_grads(y_ref[:N_DST], upstream, [x_ref] + ref_params),
    )
    # a pair: PyG's bipartite input
    x_src, x_dst = (
        torch.randn(N_SRC, 8, requires_grad=True),
        torch.randn(N_DST, 8, requires_grad=True),
    )
    pair_ref = [t.detach().clone().requires_grad_() for t in (x_src, x_dst)]
    y = ours(g, (x_src, x_dst)).flatten(1)
    y_ref = ref(tuple(pair_ref), g.edge_index, size=(N_SRC, N_DST))
    assert_all_close([y], [y_ref])
    assert_all_close(
        backward_grads(y, upstream, [x_src, x_dst] + params),
        backward_grads(y_ref, upstream, pair_ref + ref_params),
    )


@pytest.mark.parametrize("residual", [False, True])
def test_gat_with_an_in_feats_pair_matches_pyg(residual, rng):
    """GATConv((in_src, in_dst), ...): fc_src and fc_dst, PyG's lin_src and lin_dst."""
    g = block_graph(rng)
    ours = GATConv((8, 5), 4, 2, residual=residual)
    ref = PygGATConv((8, 5), 4, 2, add_self_loops=False, residual=residual)
    with torch.no_grad():
        ours.bias.normal_()
        for mine, theirs in [
            (ours.fc_src.weight, ref.lin_src.weight),
            (ours.fc_dst.weight, ref.lin_dst.weight),
            (ours.attn_l, ref.att_src),
            (ours.attn_r, ref.att_dst),
            (ours.bias, ref.bias),
        ] + ([(ours.res_fc.weight, ref.res.weight)] if residual else []):
            theirs.copy_(mine)
    assert ours.fc is None and not any(k.startswith("fc.") for k in ours.state_dict())
    x_src, x_dst = (
        torch.randn(N_SRC, 8, requires_grad=True),
        torch.randn(N_DST, 5, requires_grad=True),
    )
    pair_ref = [t.detach().clone().requires_grad_() for t in (x_src, x_dst)]
    y = ours(g, (x_src, x_dst)).flatten(1)
    y_ref = ref(tuple(pair_ref), g.edge_index, size=(N_SRC, N_DST))
    assert_all_close([y], [y_ref])
    upstream = torch.randn_like(y)
    assert_all_close(
        backward_grads(y, upstream, [x_src, x_dst, ours.fc_src.weight, ours.fc_dst.weight]),
        backward_grads(y_ref, upstream, pair_ref + [ref.lin_src.weight, ref.lin_dst.weight]),
    )
    assert len(list(ours.parameters())) == 5 + residual
    with pytest.raises(
        ValueError, match=r"in_feats = \(8, 5\) .* takes a \(feat_src, feat_dst\) pair"
    ):
        ours(g, x_src)
    with pytest.raises(ValueError, match="expected 5 input features, got 8"):
        ours(g, (x_src, torch.randn(N_DST, 8)))


def test_dgl_block_interface(rng):
    """A DGL block object goes through Graph.from_dgl with its own eids order."""
    src, dst = block_edges(rng)
    block = FakeDGLGraph(src, dst, N_SRC, rng, num_dst=N_DST)
    g = Graph.from_edge_index(torch.stack([src, dst]), (N_SRC, N_DST))
    x = torch.randn(N_SRC, 6)
    for conv in (GCNConv(6, 3), AGNNConv(0.5), GATConv(6, 2, 2)):
        y = conv(block, x)
        assert y.shape[0] == N_DST and torch.equal(y, conv(g, x)), type(conv).__name__


def gradcheck_pair(conv, graph, feats, names, **kwargs):
    """float64 gradcheck of conv(graph, feats) (a tensor or a pair) w.r.t. the features and the
    named parameters."""
    conv = conv.double()
    params = {
        n: p.detach().clone().requires_grad_() for n, p in conv.named_parameters() if n in names
    }
    assert set(params) == set(names)
    pair = isinstance(feats, tuple)
    inputs = list(feats) if pair else [feats]

    def fn(*tensors):
        feat = tuple(tensors[:2]) if pair else tensors[0]
        out = functional_call(
            conv, dict(zip(params, tensors[len(inputs) :])), (graph, feat), kwargs
        )
        return out[0] if isinstance(out, tuple) else out

    assert torch.autograd.gradcheck(fn, inputs + list(params.values()), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("pair", [False, True], ids=["block", "pair"])
def test_gradcheck_bipartite(pair, rng):
    g = block_graph(rng, n_src=13, n_dst=6)

    def feats(f):
        x = torch.randn(13, f, dtype=torch.float64, requires_grad=True)
        return (x, torch.randn(6, f, dtype=torch.float64, requires_grad=True)) if pair else x

    gradcheck_pair(GCNConv(3, 2, norm="both"), g, feats(3), ["weight", "bias"])
    gradcheck_pair(AGNNConv(0.8), g, feats(4), ["beta"])
    gradcheck_pair(
        GATConv(3, 2, 2, residual=True),
        g,
        feats(3),
        ["fc.weight", "attn_l", "attn_r", "bias", "res_fc.weight"],
        get_attention=True,
    )


def test_model_takes_one_block_per_layer(rng):
    """GCN(blocks, x): layer i on blocks[i], as DGL's mini-batch models run."""
    outer = block_graph(rng, n_src=60, n_dst=N_SRC)
    inner = block_graph(rng)
    model = GCN(5, 8, 3, num_layers=2, dropout=0.0)
    x = torch.randn(60, 5)
    y = model([outer, inner], x)
    assert y.shape == (N_DST, 3)
    h = model.layers[0](outer, x)
    assert torch.equal(y, model.layers[1](inner, h))
    with pytest.raises(ValueError, match="2 graph layers but 3 graphs"):
        model([outer, inner, inner], x)


def test_bad_bipartite_inputs(rng):
    g = block_graph(rng)
    with pytest.raises(ValueError, match=r"feat must have shape \(53, features\)"):
        GCNConv(4, 2)(g, torch.randn(N_DST, 4))
    with pytest.raises(ValueError, match=r"feat_dst must have shape \(21, features\)"):
        AGNNConv()(g, (torch.randn(N_SRC, 4), torch.randn(N_SRC, 4)))
    with pytest.raises(TypeError, match="feat_src is torch.float32 but feat_dst torch.float64"):
        GATConv(4, 2, 1)(g, (torch.randn(N_SRC, 4), torch.randn(N_DST, 4, dtype=torch.float64)))
    with pytest.raises(ValueError, match=r"a feature pair must be \(feat_src, feat_dst\)"):
        AGNNConv()(g, (torch.randn(N_SRC, 4),))
    wide = Graph.from_edge_index(
        torch.tensor([[0, 1], [4, 2]]), (2, 5)
    )  # more destinations than sources
    for conv in (
        AGNNConv(allow_zero_in_degree=True),
        GATConv(3, 2, 1, residual=True, allow_zero_in_degree=True),
    ):
        with pytest.raises(ValueError, match="destination"):
            conv(wide, torch.randn(2, 3))
    assert GCNConv(3, 2, allow_zero_in_degree=True)(wide, torch.randn(2, 3)).shape == (5, 2)


@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize("pair", [False, True], ids=["block", "pair"])
@each_layer
def test_gpu_matches_cpu_on_blocks(make, pair, precision, rng):
    g = block_graph(rng, n_src=700, n_dst=300)
    cpu = make(precision)
    gpu = make(precision).cuda()
    gpu.load_state_dict(cpu.state_dict())
    feats = [torch.randn(700, 9, requires_grad=True)] + (
        [torch.randn(300, 9, requires_grad=True)] if pair else []
    )
    feats_gpu = [t.detach().cuda().requires_grad_() for t in feats]
    y = cpu(g, tuple(feats) if pair else feats[0])
    y_gpu = gpu(g.to("cuda"), tuple(feats_gpu) if pair else feats_gpu[0])
    upstream = torch.randn_like(y)
    read = 1 if isinstance(cpu, GCNConv) else len(feats)  # GraphConv does not read feat_dst
    got = backward_grads(y_gpu, upstream.cuda(), feats_gpu[:read] + list(gpu.parameters()))
    want = backward_grads(y, upstream, feats[:read] + list(cpu.parameters()))
    assert_all_close([y_gpu] + list(got), [y] + list(want), tol=1e-4)


def load_example():
    path = Path(__file__).resolve().parents[2] / "examples" / "dgl_style_model.py"
    spec = importlib.util.spec_from_file_location("dgl_style_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "make",
    [
        lambda: GCNConv(6, 6, norm="right"),
        lambda: AGNNConv(0.7),
        lambda: GATConv(6, 3, 2, residual=True),
    ],
    ids=["gcn", "agnn", "gat"],
)
def test_blocks_of_every_in_edge_give_the_full_graph_output(make, rng):
    """Two layers on the example's sampled blocks, with a fanout above every in-degree (so each
    block keeps all in-edges of its destinations), equal the full-graph layers at the seeds:
    the relabelling, the destinations-first convention and the per-destination softmax and
    mean agree. (GCN's "both" uses the block's out-degrees, as DGL's does, so "right" here.)"""
    example = load_example()
    n = 90
    g = Graph.from_edge_index(
        torch.from_numpy(np.stack(np.nonzero(rng.random((n, n)) < 0.05))), n
    ).add_self_loops()
    src, dst = g.edge_index
    tiny = example.TinyDGLGraph(src, dst, n)
    x = torch.randn(n, 6, dtype=torch.float64)
    layers = [make().double(), make().double()]
    seeds = torch.from_numpy(rng.choice(n, 17, replace=False))

    def two_layers(graphs, h):
        h = layers[0](graphs[0], h).flatten(1)[:, :6]
        return layers[1](graphs[1], h)

    input_nodes, blocks = example.sample_blocks(tiny, seeds, [n, n])
    assert [b.num_dst_nodes() for b in blocks] == [blocks[1].num_src_nodes(), seeds.numel()]
    full = two_layers([g, g], x)[seeds]
    assert_all_close([two_layers(blocks, x[input_nodes])], [full], tol=1e-12)


@needs_gpu
def test_a_new_block_costs_few_host_synchronisations(rng):
    """Mini-batch training builds a graph and its formats for new blocks every step: the DGL
    conversion reads its checks at once (CSR rows, eids, zero in-degree), then the duplicates
    after its sort; A and A^T one read each (A^T from the graph's CSR), which also brings the
    totals of their segments, so the first step reads nothing, nor does a step on the prepared
    graph."""
    src, dst = block_edges(rng, n_src=700, n_dst=300)
    block = FakeDGLGraph(src, dst, 700, rng, num_dst=300)
    for name in ("_indptr", "_indices", "_eids"):
        setattr(block, name, getattr(block, name).cuda())
    graphs = []
    assert host_syncs(lambda: graphs.append(Graph.from_dgl(block))) <= 3
    g = graphs[0]
    assert host_syncs(lambda: g.adj(8).transpose()) <= 2
    x = torch.randn(700, 16, device="cuda", requires_grad=True)
    conv = GCNConv(16, 8).cuda()
    assert host_syncs(lambda: torch.autograd.grad(conv(g, x).sum(), [x])) == 0
    assert host_syncs(lambda: torch.autograd.grad(conv(g, x).sum(), [x])) == 0
