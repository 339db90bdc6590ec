"""Exactness on a reordered graph (CPU, float64): SpMM, SDDMM and the GCN, AGNN and GAT layers
computed on ``Graph.reorder``'s graph from ``apply_to_nodes``'s inputs and mapped back with
``restore`` equal the same computation on the original graph, and a float64 scipy product,
within float64 round-off; gradients too."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import Graph, ops
from flashgnn.nn import AGNNConv, GATConv, GCNConv

METHODS = ("rcm", "community", "degree")
TOL = 1e-12


def weighted_graph(rng, n: int = 300, edges: int = 1500) -> tuple[Graph, sp.csr_matrix]:
    """A random directed graph with self-loops and float64 weights in [0.5, 1.5), and its
    A[dst, src] in scipy."""
    src = rng.integers(0, n, edges)
    dst = (src + rng.integers(0, 40, edges)) % n
    keys = np.unique(np.concatenate([dst * n + src, np.arange(n) * (n + 1)]))
    dst, src = keys // n, keys % n
    order = rng.permutation(len(keys))  # edge ids in no particular order
    src, dst = src[order], dst[order]
    weight = rng.uniform(0.5, 1.5, len(keys))
    g = Graph.from_edge_index(torch.from_numpy(np.stack([src, dst])), n, torch.from_numpy(weight))
    return g, sp.csr_matrix((weight, (dst, src)), shape=(n, n))


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) <= TOL * max(float(b.abs().max()), 1.0)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [8, 4])
def test_spmm_on_the_reordered_graph_restores_to_the_original(rng, method, k):
    g, a = weighted_graph(rng)
    new, r = g.reorder(method)
    x = torch.from_numpy(rng.standard_normal((g.num_nodes, 17)))
    values = g.edge_values(g.edge_weight, k)
    want = ops.spmm(g.adj(k), x, "fp32", values=values)
    got = r.restore(
        ops.spmm(
            new.adj(k), r.apply_to_nodes(x), "fp32", values=new.edge_values(new.edge_weight, k)
        )
    )
    assert got.dtype == torch.float64
    assert close(got, want)
    assert close(got, torch.from_numpy(a @ x.numpy()))


@pytest.mark.parametrize("method", METHODS)
def test_sddmm_on_the_reordered_graph_gives_each_edge_its_value(rng, method):
    g, a = weighted_graph(rng)
    new, r = g.reorder(method)
    x = torch.from_numpy(rng.standard_normal((g.num_nodes, 9)))
    y = torch.from_numpy(rng.standard_normal((g.num_nodes, 9)))
    per_edge = ops.sddmm(g.adj(8), x, y, "fp32")[g.edge_slots()]  # edge-id order
    new_per_edge = ops.sddmm(new.adj(8), r.apply_to_nodes(x), r.apply_to_nodes(y), "fp32")
    got = new_per_edge[new.edge_slots()]  # the same edge ids
    assert close(got, per_edge)
    src, dst = g.edge_index
    assert close(got, (x[dst] * y[src]).sum(1))


def layers():
    torch.manual_seed(0)
    return {
        "gcn": GCNConv(6, 5, norm="both", weight=True, bias=True),
        "agnn": AGNNConv(init_beta=0.7),
        "gat": GATConv(6, 4, num_heads=3),
    }


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["gcn", "agnn", "gat"])
def test_layer_on_the_reordered_graph_restores_to_the_original(rng, method, name):
    g, _ = weighted_graph(rng)
    if name != "gcn":
        g.edge_weight = None  # AGNN and GAT weigh edges by their attention
    new, r = g.reorder(method)
    layer = layers()[name].double()
    x = torch.from_numpy(rng.standard_normal((g.num_nodes, 6))).requires_grad_()
    want = layer(g, x)
    grad_out = torch.from_numpy(rng.standard_normal(tuple(want.shape)))
    want_grads = torch.autograd.grad(want, [x, *layer.parameters()], grad_out)
    got = r.restore(layer(new, r.apply_to_nodes(x)))
    got_grads = torch.autograd.grad(got, [x, *layer.parameters()], grad_out)
    assert close(got, want)
    for g_got, g_want in zip(got_grads, want_grads):
        assert close(g_got, g_want)
