"""flashgnn.models: each network against the same network built from PyG layers (weights
mapped, eval mode), build_model, dropout, precision plumbing and a short training run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import AGNNConv as PygAGNNConv
from torch_geometric.nn import GATConv as PygGATConv
from torch_geometric.nn import GCNConv as PygGCNConv

import flashgnn
from flashgnn import Graph
from flashgnn.models import AGNN, GAT, GCN, build_model
from tests.graph.test_graph import FakeDGLGraph
from tests.helpers import rel_err
from tests.nn.test_nn_layers import random_graph

TOL = 1e-5


def undirected_graph(rng, n=60):
    return random_graph(n, 0.08, rng, symmetric=True)


def test_gcn_matches_pyg_stack(rng):
    g = undirected_graph(rng)
    model = GCN(9, 8, 4, num_layers=3).eval()
    refs = [PygGCNConv(a, b, add_self_loops=False) for a, b in ((9, 8), (8, 8), (8, 4))]
    with torch.no_grad():
        for layer, ref in zip(model.layers, refs):
            layer.bias.normal_()
            ref.lin.weight.copy_(layer.weight.t())
            ref.bias.copy_(layer.bias)
    x = torch.randn(g.num_nodes, 9)
    h = x
    for i, ref in enumerate(refs):
        h = ref(h, g.edge_index)
        h = F.relu(h) if i < 2 else h
    assert rel_err(model(g, x), h) < TOL


def test_agnn_matches_pyg_stack(rng):
    g = undirected_graph(rng)
    model = AGNN(9, 8, 4, num_layers=3, init_beta=0.6).eval()
    x = torch.randn(g.num_nodes, 9)
    h = F.relu(model.encoder(x))
    for _ in range(3):
        ref = PygAGNNConv(add_self_loops=False)
        with torch.no_grad():
            ref.beta.fill_(0.6)
        h = ref(h, g.edge_index)
    assert rel_err(model(g, x), model.decoder(h)) < TOL
    assert len([p for n, p in model.named_parameters() if n.endswith("beta")]) == 3


def test_agnn_first_beta_is_fixed(rng):
    """first_beta: the first layer's beta a buffer at that value (PyG's AGNNConv with
    requires_grad=False), the others learned from init_beta."""
    g = undirected_graph(rng)
    model = AGNN(9, 8, 4, num_layers=3, init_beta=0.6, first_beta=0.0).eval()
    betas = dict(model.named_parameters())
    assert sorted(n for n in betas if n.endswith("beta")) == ["layers.1.beta", "layers.2.beta"]
    assert model.layers[0].beta.tolist() == [0.0] and "layers.0.beta" in dict(model.named_buffers())
    x = torch.randn(g.num_nodes, 9)
    h = F.relu(model.encoder(x))
    for beta in (0.0, 0.6, 0.6):
        ref = PygAGNNConv(requires_grad=beta != 0.0, add_self_loops=False)
        with torch.no_grad():
            ref.beta.fill_(beta)
        h = ref(h, g.edge_index)
    assert rel_err(model(g, x), model.decoder(h)) < TOL
    with pytest.raises(ValueError, match="first_beta must be a finite number or None"):
        AGNN(9, 8, 4, first_beta=float("nan"))


@pytest.mark.parametrize("concat", [True, False])
def test_gat_matches_pyg_stack(concat, rng):
    g = undirected_graph(rng)
    model = GAT(9, 5, 4, num_layers=3, heads=3, out_heads=2, concat=concat).eval()
    hidden = 5 * 3 if concat else 5
    refs = [
        PygGATConv(9, 5, 3, concat=concat, add_self_loops=False),
        PygGATConv(hidden, 5, 3, concat=concat, add_self_loops=False),
        PygGATConv(hidden, 4, 2, concat=False, add_self_loops=False),
    ]
    with torch.no_grad():
        for layer, ref in zip(model.layers, refs):
            layer.bias.normal_()
            ref.lin.weight.copy_(layer.fc.weight)
            ref.att_src.copy_(layer.attn_l)
            ref.att_dst.copy_(layer.attn_r)
            # our bias is per head before averaging; PyG's after
            ref.bias.copy_(layer.bias if ref.concat else layer.bias.view(ref.heads, -1).mean(0))
    x = torch.randn(g.num_nodes, 9)
    h = x
    for i, ref in enumerate(refs):
        h = ref(h, g.edge_index)
        h = F.elu(h) if i < 2 else h
    assert rel_err(model(g, x), h) < TOL


def test_build_model():
    gcn = build_model("GCN", 10, 3)
    assert isinstance(gcn, GCN) and gcn.layers[0].out_feats == 16 and len(gcn.layers) == 2
    gat = build_model("gat", 10, 3, hidden_feats=4, heads=2, num_layers=3, precision="bf16")
    assert isinstance(gat, GAT) and len(gat.layers) == 3
    assert gat.layers[1].in_feats == 8 and all(layer.precision == "bf16" for layer in gat.layers)
    agnn = build_model("agnn", 10, 3, num_layers=2, learn_beta=False)
    assert isinstance(agnn, AGNN) and len(agnn.layers) == 2 and agnn.decoder.out_features == 3
    assert not any(name.endswith("beta") for name, _ in agnn.named_parameters())
    with pytest.raises(ValueError, match="unknown model 'sage'"):
        build_model("sage", 10, 3)
    with pytest.raises(TypeError):
        build_model("gcn", 10, 3, heads=8)
    with pytest.raises(ValueError, match="num_layers must be >= 1"):
        build_model("gcn", 10, 3, num_layers=0)


def test_gcn_input_dropout_acts_on_the_features_in_training_only(rng):
    g = undirected_graph(rng)
    x = torch.randn(g.num_nodes, 7)
    plain = build_model("gcn", 7, 3, dropout=0.0)
    dropped = build_model("gcn", 7, 3, dropout=0.0, input_dropout=0.5)
    dropped.load_state_dict(plain.state_dict())  # dropout holds no parameters
    for m in (plain, dropped):
        m.eval()
    assert torch.equal(plain(g, x), dropped(g, x))
    dropped.train()
    torch.manual_seed(0)
    out = dropped(g, x)
    torch.manual_seed(0)
    mask = torch.nn.functional.dropout(torch.ones_like(x), 0.5, True)  # the same draw
    plain.train()
    torch.testing.assert_close(out, plain(g, x * mask))
    assert plain.input_dropout is None  # off by default: DGL's example
    with pytest.raises(ValueError, match="input_dropout"):
        build_model("gcn", 7, 3, input_dropout=1.5)


@pytest.mark.parametrize("name", ["gcn", "agnn", "gat"])
def test_dropout_precision_and_dgl_graph(name, rng):
    g = undirected_graph(rng)
    x = torch.randn(g.num_nodes, 7)
    model = build_model(name, 7, 3, dropout=0.5) if name != "gat" else build_model(name, 7, 3)
    model.train()
    assert not torch.equal(model(g, x), model(g, x))  # dropout is active in training
    model.eval()
    y = model(g, x)
    assert torch.equal(model(g, x), y)
    # a DGL-like graph object gives the same logits
    src, dst = g.edge_index
    assert torch.equal(model(FakeDGLGraph(src, dst, g.num_nodes, rng), x), y)
    # the constructor's precision reaches every sparse op, like the context does
    with flashgnn.precision("bf16"):
        y_ctx = model(g, x)
    pinned = build_model(name, 7, 3, precision="bf16").eval()
    pinned.load_state_dict(model.state_dict())
    assert torch.equal(pinned(g, x), y_ctx)
    assert 0 < rel_err(y_ctx, y) < 2e-2


def planted_partition(rng, n=240, classes=3, feats=16):
    """A graph whose edges mostly join nodes of the same class and whose features carry a
    weak class signal, so propagating over the graph helps."""
    y = rng.integers(0, classes, n)
    src, dst = rng.integers(0, n, (2, 8 * n))
    keep = (y[src] == y[dst]) | (rng.random(8 * n) < 0.1)
    pairs = np.unique(np.stack([src[keep], dst[keep]]), axis=1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    ei = torch.from_numpy(np.concatenate([pairs, pairs[::-1]], 1))
    ei = torch.unique(ei, dim=1)
    centers = rng.standard_normal((classes, feats))
    x = torch.from_numpy((0.4 * centers[y] + rng.standard_normal((n, feats))).astype(np.float32))
    return Graph.from_edge_index(ei, n).add_self_loops(), x, torch.from_numpy(y)


@pytest.mark.parametrize("name", ["gcn", "agnn", "gat"])
def test_models_learn(name, rng):
    g, x, y = planted_partition(rng)
    train = torch.from_numpy(rng.random(g.num_nodes) < 0.5)
    model = build_model(
        name,
        x.shape[1],
        3,
        **({"dropout": 0.2} if name != "gat" else {"feat_drop": 0.2, "attn_drop": 0.2}),
    )
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    with flashgnn.precision("fp16"):
        for _ in range(40):
            opt.zero_grad()
            loss = F.cross_entropy(model(g, x)[train], y[train])
            loss.backward()
            opt.step()
        model.eval()
        acc = (model(g, x).argmax(1)[~train] == y[~train]).float().mean().item()
    # features alone give about 55% (weak signal); neighbourhoods make the classes separable
    assert acc > 0.85, f"{name}: held-out accuracy {acc:.2f}"
