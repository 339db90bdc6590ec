"""Second derivatives through GCNConv, AGNNConv and GATConv: gradgradcheck in float64, and a
gradient penalty (``create_graph=True``, then a backward through the gradients) against dense
float64 maths (GCN) and PyG's layers with the same parameters (AGNN, GAT), on the CPU in
float64 and on the GPU in fp32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import AGNNConv as PygAGNNConv

from flashgnn.nn import AGNNConv, GATConv, GCNConv
from tests.helpers import GPU, rel_err
from tests.nn.test_nn_layers import (
    gat_pair,
    gat_params,
    gradcheck_module,
    pyg_gat_params,
    random_graph,
    small_directed_graph,
)
from tests.ops.test_second_derivatives import penalised_gradients

DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
# the GPU runs the layers in fp32 against float64 references
TOL = {"cpu": 1e-10, "cuda": 1e-4}


def leaves(*tensors, dtype=torch.float64, device="cpu"):
    return [t.detach().to(device, dtype).requires_grad_() for t in tensors]


def dense_gcn_adjacency(graph, norm: str, edge_weight=None) -> torch.Tensor:
    """A[dst, src] = c_ij w_ji, float64, with DGL's normalisation by unweighted degrees
    clamped to 1."""
    src, dst = graph.edge_index
    n = graph.num_nodes
    d_in = torch.bincount(dst, minlength=n).clamp_min(1).double()
    d_out = torch.bincount(src, minlength=n).clamp_min(1).double()
    factor = {
        "both": (d_in[dst] * d_out[src]).rsqrt(),
        "right": 1 / d_in[dst],
        "left": 1 / d_out[src],
        "none": torch.ones(len(src), dtype=torch.float64),
    }[norm]
    if edge_weight is not None:
        factor = factor * edge_weight.double()
    return torch.zeros(n, n, dtype=torch.float64).index_put_((dst, src), factor, accumulate=True)


# ---------------------------------------------------------------------------- gradgradcheck
@pytest.mark.parametrize(
    "in_feats, out_feats", [(3, 2), (2, 3)], ids=["project-first", "aggregate-first"]
)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "edge-weights"])
def test_gradgradcheck_gcn(in_feats, out_feats, bias, weighted):
    g = small_directed_graph()
    x = torch.randn(11, in_feats, dtype=torch.float64, requires_grad=True)
    kwargs = {"edge_weight": torch.rand(g.num_edges, dtype=torch.float64)} if weighted else None
    gradcheck_module(
        GCNConv(in_feats, out_feats, norm="left", bias=bias, allow_zero_in_degree=True),
        g,
        {"feat": x},
        ["weight", "bias"] if bias else ["weight"],
        kwargs,
        check=torch.autograd.gradgradcheck,
    )


def test_gradgradcheck_agnn():
    g = small_directed_graph()
    x = torch.randn(11, 4, dtype=torch.float64, requires_grad=True)
    gradcheck_module(
        AGNNConv(0.8, allow_zero_in_degree=True),
        g,
        {"feat": x},
        ["beta"],
        check=torch.autograd.gradgradcheck,
    )


def test_gradgradcheck_gat():
    g = small_directed_graph()
    x = torch.randn(11, 3, dtype=torch.float64, requires_grad=True)
    gradcheck_module(
        GATConv(3, 2, 3, allow_zero_in_degree=True),
        g,
        {"feat": x},
        ["fc.weight", "attn_l", "attn_r", "bias"],
        check=torch.autograd.gradgradcheck,
    )


# ---------------------------------------------------------------------------- gradient penalty
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "in_feats, out_feats", [(12, 5), (5, 12)], ids=["project-first", "aggregate-first"]
)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "edge-weights"])
def test_gcn_gradient_penalty_matches_dense_maths(in_feats, out_feats, bias, weighted, device):
    g = random_graph(40, 0.1, np.random.default_rng(5), symmetric=False)
    conv = GCNConv(in_feats, out_feats, bias=bias)
    if bias:
        torch.nn.init.uniform_(conv.bias, -1, 1)
    x, proj = torch.randn(g.num_nodes, in_feats), torch.randn(g.num_nodes, out_feats)
    w = torch.rand(g.num_edges) + 0.5 if weighted else None
    dtype = torch.float64 if device == "cpu" else torch.float32
    conv = conv.to(device, dtype)
    params = [conv.weight] + ([conv.bias] if bias else [])
    feat = leaves(x, dtype=dtype, device=device)[0]
    got = penalised_gradients(
        lambda: conv(g.to(device), feat, edge_weight=None if w is None else w.to(device, dtype)),
        [feat, *params],
        proj.to(device, dtype),
    )

    dense = dense_gcn_adjacency(g, "both", w)
    ref_x, *ref_params = leaves(x, *params)

    def reference():
        out = dense @ (ref_x @ ref_params[0])
        return out + ref_params[1] if bias else out

    want = penalised_gradients(reference, [ref_x, *ref_params], proj.double())
    for name, a, b in zip(["x", "weight", "bias"], got, want):
        assert rel_err(a, b) < TOL[device], name


@pytest.mark.parametrize("device", DEVICES)
def test_agnn_gradient_penalty_matches_pyg(device):
    g = random_graph(50, 0.08, np.random.default_rng(6), symmetric=False)
    dtype = torch.float64 if device == "cpu" else torch.float32
    ours = AGNNConv().to(device, dtype)
    ref = PygAGNNConv(requires_grad=True, add_self_loops=False).double()
    with torch.no_grad():
        ours.beta.fill_(0.7)
        ref.beta.fill_(0.7)
    x, proj = torch.randn(g.num_nodes, 6), torch.randn(g.num_nodes, 6)
    feat = leaves(x, dtype=dtype, device=device)[0]
    got = penalised_gradients(
        lambda: ours(g.to(device), feat), [feat, ours.beta], proj.to(device, dtype)
    )
    ref_x = leaves(x)[0]
    want = penalised_gradients(lambda: ref(ref_x, g.edge_index), [ref_x, ref.beta], proj.double())
    for name, a, b in zip(["x", "beta"], got, want):
        assert rel_err(a, b) < TOL[device], name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", [1, 3])
def test_gat_gradient_penalty_matches_pyg(device, heads):
    g = random_graph(50, 0.08, np.random.default_rng(8), symmetric=False)
    dtype = torch.float64 if device == "cpu" else torch.float32
    ours, ref = gat_pair(7, 4, heads, negative_slope=0.15)
    ours, ref = ours.to(device, dtype), ref.double()
    x, proj = torch.randn(g.num_nodes, 7), torch.randn(g.num_nodes, heads * 4)
    feat = leaves(x, dtype=dtype, device=device)[0]
    got = penalised_gradients(
        lambda: ours(g.to(device), feat).flatten(1),
        [feat, *gat_params(ours)],
        proj.to(device, dtype),
    )
    ref_x = leaves(x)[0]
    want = penalised_gradients(
        lambda: ref(ref_x, g.edge_index), [ref_x, *pyg_gat_params(ref)], proj.double()
    )
    for name, a, b in zip(["x", "fc.weight", "attn_l", "attn_r", "bias"], got, want):
        assert rel_err(a, b.view_as(a)) < TOL[device], name
