"""A Graph's derived values follow its edge weights: modified in place, replaced, or learned.

The formats' values, A^T's, GCN's normalised values and the layers' outputs are checked
against float64 dense maths on the weights as they are at each call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import Graph, ops
from flashgnn.nn import GCNConv
from tests.helpers import GPU, random_csr, rel_err

DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
N = 40


def random_graph(rng, device, weight=None):
    """(graph on ``device``, src, dst, its weights [E] float32), from a random square graph of
    N nodes in a random edge order; ``weight``: the weights to store instead (a Parameter)."""
    m = random_csr(N, N, 0.15, rng)
    dst = np.repeat(np.arange(N), np.diff(m.indptr))
    order = rng.permutation(m.nnz)
    src = torch.from_numpy(m.indices[order].astype(np.int64)).to(device)
    dst = torch.from_numpy(dst[order]).to(device)
    if weight is None:
        weight = torch.from_numpy(rng.uniform(0.5, 1.5, m.nnz).astype(np.float32)).to(device)
    return Graph.from_edge_index(torch.stack([src, dst]), N, weight), src, dst, weight


def dense(src, dst, weight) -> torch.Tensor:
    """A [dst, src] in float64 on the CPU; differentiable in ``weight``."""
    a = torch.zeros(N, N, dtype=torch.float64)
    return a.index_put((dst.cpu(), src.cpu()), weight.cpu().double(), accumulate=True)


def both_norm(src, dst) -> torch.Tensor:
    """GCN's "both" factor of every edge, 1 / sqrt(d_in(dst) d_out(src)), float64 [E]."""
    d_in = torch.bincount(dst.cpu(), minlength=N).clamp(min=1).double()
    d_out = torch.bincount(src.cpu(), minlength=N).clamp(min=1).double()
    return (d_in[dst.cpu()] * d_out[src.cpu()]).rsqrt()


def observe(g: Graph, x: torch.Tensor, conv: GCNConv) -> dict:
    """Everything a Graph derives from its weights, as dense float64 CPU tensors."""
    a = g.adj()
    out = {
        "adj": a.to_dense(),
        "adj k=4": g.adj(4).to_dense(),
        "A^T": a.transpose().fmt.to_dense(),
        "spmm": ops.spmm(a, x),
        "gcn_values": a.with_values(g.gcn_values("both")).to_dense(),
        "GCNConv": conv(g, x),
    }
    return {name: t.detach().cpu().double() for name, t in out.items()}


def expected(src, dst, weight, x, conv: GCNConv) -> dict:
    a = dense(src, dst, weight)
    x64 = x.cpu().double()
    normed = dense(src, dst, weight.cpu().double() * both_norm(src, dst))
    w64, b64 = conv.weight.detach().cpu().double(), conv.bias.detach().cpu().double()
    return {
        "adj": a,
        "adj k=4": a,
        "A^T": a.t(),
        "spmm": a @ x64,
        "gcn_values": normed,
        "GCNConv": normed @ x64 @ w64 + b64,
    }


def assert_matches(got: dict, want: dict) -> None:
    for name in want:
        assert rel_err(got[name], want[name]) < 1e-6, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("change", ["mul_", "index_fill_", "replace"])
def test_every_derived_value_follows_a_weight_change(device, change, rng):
    """Each derived value was cached by the first calls; a weight modified in place or
    replaced after them reaches every later call."""
    g, src, dst, weight = random_graph(rng, device)
    x = torch.randn(N, 6, device=device)
    conv = GCNConv(6, 3, allow_zero_in_degree=True, precision="fp32").to(device)
    assert_matches(observe(g, x, conv), expected(src, dst, weight, x, conv))
    observe(g, x, conv)  # cached and replayed
    if change == "mul_":
        weight.mul_(3)
    elif change == "index_fill_":
        weight.index_fill_(0, torch.tensor([0, 5], device=device), 7.0)
    else:
        weight = torch.rand_like(weight) + 0.5
        g.edge_weight = weight
    assert g.edge_weight is weight
    assert_matches(observe(g, x, conv), expected(src, dst, weight, x, conv))


def test_a_weight_change_keeps_the_pattern_and_caches_the_new_values(rng):
    g, _, _, weight = random_graph(rng, "cpu")
    a, values = g.adj(), g.gcn_values("both")
    t = a.transpose()
    assert g.adj() is a and g.gcn_values("both") is values
    weight.mul_(2)
    b = g.adj()
    assert b is not a and g.adj() is b and g.gcn_values("both") is g.gcn_values("both")
    assert b.row_ptr is a.row_ptr and b.col_idx is a.col_idx and b.perm is a.perm
    assert torch.equal(b.values, 2 * a.values)
    assert b.transpose().fmt.row_ptr is t.fmt.row_ptr  # A^T's pattern is not rebuilt
    assert torch.equal(b.transpose().fmt.values, 2 * t.fmt.values)
    assert b.transpose() is b.transpose()


def test_a_replaced_weight_is_checked(rng):
    g, _, _, weight = random_graph(rng, "cpu")
    with pytest.raises(ValueError, match="one value per edge"):
        g.edge_weight = weight[:-1]
    with pytest.raises(TypeError, match="floating point"):
        g.edge_weight = weight.long()
    with pytest.raises(ValueError, match="NaN or infinite"):
        g.edge_weight = weight.clone().index_fill_(0, torch.tensor([1]), float("nan"))
    g.edge_weight = None
    assert torch.equal(g.adj().values[g.adj().perm], torch.ones(g.num_edges))


@pytest.mark.parametrize("device", DEVICES)
def test_a_learnable_weight_gets_its_gradient_on_every_step(device, rng):
    """``spmm(graph.adj(), x)`` and ``graph.gcn_values`` with an nn.Parameter as the graph's
    weights: each step's outputs and gradient are those of float64 dense maths on the
    weights of that step."""
    g, src, dst, _ = random_graph(rng, device)
    weight = torch.nn.Parameter(torch.rand(g.num_edges, device=device) + 0.5)
    g.edge_weight = weight
    x = torch.randn(N, 5, device=device)
    target = torch.randn(N, 5, device=device)
    optimizer = torch.optim.SGD([weight], lr=0.05)
    norm = both_norm(src, dst)
    for _ in range(3):
        optimizer.zero_grad()
        y = ops.spmm(g.adj(), x)
        z = ops.spmm(g.adj(), x, values=g.gcn_values("both"))
        (((y - target) ** 2).sum() + ((z - target) ** 2).sum()).backward()
        w64 = weight.detach().cpu().double().requires_grad_()
        x64, t64 = x.cpu().double(), target.cpu().double()
        y64 = dense(src, dst, w64) @ x64
        z64 = dense(src, dst, w64 * norm) @ x64
        (((y64 - t64) ** 2).sum() + ((z64 - t64) ** 2).sum()).backward()
        assert rel_err(y, y64) < 1e-6 and rel_err(z, z64) < 1e-6
        assert rel_err(weight.grad, w64.grad) < 1e-5
        optimizer.step()


def test_a_learnable_weight_is_cached_detached_without_autograd(rng):
    g, _, _, _ = random_graph(rng, "cpu")
    weight = torch.nn.Parameter(torch.rand(g.num_edges) + 0.5)
    g.edge_weight = weight
    with torch.no_grad():
        a = g.adj()
        assert g.adj() is a and not a.values.requires_grad
        assert not g.gcn_values("both").requires_grad
    learning = g.adj()
    assert learning is not g.adj() and learning.values.requires_grad
    assert learning.row_ptr is a.row_ptr  # the cached pattern, fresh values
    assert g.gcn_values("both").requires_grad
    with torch.no_grad():
        weight.mul_(2)
        assert torch.equal(g.adj().values, 2 * a.values)


def test_a_learnable_weight_is_not_copied_into_a_new_graph(rng):
    """add_self_loops and a move would snapshot the Parameter's values: refused with a clear
    error; a weight derived in this step (a sampled block's) moves as before."""
    g, _, _, _ = random_graph(rng, "cpu")
    weight = torch.nn.Parameter(torch.rand(g.num_edges) + 0.5)
    g.edge_weight = weight
    with pytest.raises(ValueError, match="add_self_loops would copy the edge weights"):
        g.add_self_loops()
    with pytest.raises(ValueError, match=r"to\('meta'\) would copy the edge weights"):
        g.to("meta")
    assert g.to("cpu").edge_weight is weight
    derived = Graph.from_edge_index(g.edge_index, N, weight * 2)
    assert derived.add_self_loops().edge_weight.requires_grad
