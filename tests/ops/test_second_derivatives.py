"""Second derivatives through the fused ops (graph_conv, agnn_propagate, gat_attention and GAT's
score terms) and the ops they compose (spmm, sddmm, edge_softmax): gradgradcheck in float64;
stand-ins for inputs (casts, A X) against the composed ops; a first-order backward that takes
the fused kernels' path and records nothing; on the GPU in fp32, a gradient penalty against
the same in float64 on the CPU."""

from __future__ import annotations

import importlib

import pytest
import torch

from flashgnn import ops
from flashgnn.ops import _autograd
from flashgnn.ops import agnn as agnn_module
from flashgnn.ops import gat as gat_module
from flashgnn.ops import score_terms as score_terms_module
from flashgnn.ops.graph_conv import _composed
from flashgnn.ops.precision import half_storage
from flashgnn.ops.score_terms import score_terms
from tests.helpers import mebcrs_of, needs_gpu, random_csr, rel_err
from tests.ops.test_gat_op import _adjacency, _gat
from tests.ops.test_graph_conv_op import SHAPE_IDS, SHAPES, _params
from tests.ops.test_graph_conv_op import _adjacency as _rectangular

# the package exports the function of the same name
graph_conv_module = importlib.import_module("flashgnn.ops.graph_conv")


def penalised_gradients(forward, tensors, proj):
    """Gradients, with respect to ``tensors``, of ``L + sum_t |dL/dt|^2`` with
    ``L = sum(tanh(forward()) * proj)``: a gradient penalty, whose backward differentiates the
    first backward (``create_graph``)."""
    out = forward()
    loss = (torch.tanh(out) * proj.to(out)).sum()
    first = torch.autograd.grad(loss, tensors, create_graph=True)
    total = loss + sum(g.square().sum() for g in first)
    return torch.autograd.grad(total, tensors)


def _bipartite(rng, n_rows=9, n_cols=14, k=4):
    return mebcrs_of(random_csr(n_rows, n_cols, 0.3, rng), k)


def _leaf(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


# ---------------------------------------------------------------------------- gradgradcheck
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_graph_conv_gradgradcheck(f_in, f_out, bias, rng):
    a, _ = _rectangular(rng, 13, 11)
    values = a.values.double()
    weight, b = _params(f_in, f_out, torch.float64, bias)
    inputs = [_leaf(a.n_cols, f_in)] + [t.requires_grad_() for t in (weight, b) if t is not None]

    def fn(feat, *rest):
        rest = list(rest)
        w = None if weight is None else rest.pop(0)
        return ops.graph_conv(a, feat, w, rest.pop(0) if bias else None, values=values)

    assert torch.autograd.gradgradcheck(fn, inputs)


def test_agnn_gradgradcheck(rng):
    a, _ = _adjacency(rng, n=21)
    beta = torch.tensor([0.8], dtype=torch.float64, requires_grad=True)
    feat = _leaf(a.n_rows, 5)
    assert torch.autograd.gradgradcheck(lambda x, b: ops.agnn_propagate(a, x, b), (feat, beta))
    # the destinations' own features; and one tensor given as both
    bipartite = _bipartite(rng)
    assert torch.autograd.gradgradcheck(
        lambda x, y, b: ops.agnn_propagate(bipartite, x, b, feat_dst=y),
        (_leaf(14, 3), _leaf(9, 3), beta),
    )
    assert torch.autograd.gradgradcheck(
        lambda x, b: ops.agnn_propagate(a, x, b, feat_dst=x), (feat, beta)
    )


def test_gat_gradgradcheck(rng):
    a, _ = _adjacency(rng, n=21, empty_row=4)
    ft, terms = _leaf(a.n_rows, 3), _leaf(a.n_rows, 2)
    assert torch.autograd.gradgradcheck(lambda x, t: _gat(a, x, t, 0.2), (ft, terms))
    values = torch.rand(a.n_slots, dtype=torch.float64) + 0.5

    def dropped(x, t):
        torch.manual_seed(0)  # one dropout mask for every evaluation
        return _gat(a, x, t, 0.1, 0.3, edge_values=values)

    assert torch.autograd.gradgradcheck(dropped, (ft, terms))
    # one tensor as both terms; only some inputs need a gradient
    column = _leaf(a.n_rows, 1)
    assert torch.autograd.gradgradcheck(
        lambda x, t: ops.gat_attention(a, x, t, t, 0.2), (ft, column)
    )
    assert torch.autograd.gradgradcheck(lambda x: _gat(a, x, terms.detach(), 0.2), (ft,))
    assert torch.autograd.gradgradcheck(lambda t: _gat(a, ft.detach(), t, 0.2), (terms,))


def test_edge_softmax_gradgradcheck(rng):
    a, _ = _adjacency(rng, n=21, empty_row=4)
    scores = _leaf(a.n_slots)
    assert torch.autograd.gradgradcheck(lambda s: ops.edge_softmax(a, s), (scores,))


def _emulated_score_kernels(monkeypatch):
    """The score terms' kernel node on the CPU, its kernels emulated by torch."""
    monkeypatch.setattr(score_terms_module, "supported", lambda ft, attn: True)
    monkeypatch.setattr(score_terms_module, "score_terms_cuda", score_terms_module._products)

    def backward(ft, attn, d_terms):
        heads, terms, f_dim = attn.shape
        d = d_terms.view(heads, -1, terms)
        d_ft = torch.bmm(d, attn).view(-1, f_dim).to(ft.dtype)
        return d_ft, torch.bmm(d.transpose(1, 2), ft.view(heads, -1, f_dim).to(attn.dtype))

    monkeypatch.setattr(score_terms_module, "score_terms_backward_cuda", backward)


@pytest.mark.parametrize("kernels", [False, True], ids=["torch", "kernel node"])
def test_score_terms_gradgradcheck(kernels, monkeypatch):
    if kernels:
        _emulated_score_kernels(monkeypatch)
    ft, attn = _leaf(3 * 7, 4), _leaf(3, 2, 4)
    assert torch.autograd.gradgradcheck(score_terms, (ft, attn))


# ---------------------------------------------------------------------------- stand-ins
@pytest.mark.parametrize("f_in,f_out", SHAPES[:2], ids=SHAPE_IDS[:2])
def test_graph_conv_under_autocast_matches_the_composition(f_in, f_out, rng):
    """Under autocast the node keeps casts of X and W (and A X): a higher derivative reaches
    feat and weight through them as through the composition's casts."""
    a, _ = _rectangular(rng)
    weight, b = _params(f_in, f_out, torch.float32)
    feat = torch.randn(a.n_cols, f_in)
    proj = torch.randn(a.n_rows, f_out)
    results = []
    for fn in (ops.graph_conv, lambda *args: _composed(*args, a.values)):
        x, w, b_ = (t.clone().requires_grad_() for t in (feat, weight, b))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results.append(penalised_gradients(lambda: fn(a, x, w, b_, "bf16"), [x, w, b_], proj))
    for got, want in zip(*results):
        assert rel_err(got, want) < 2e-2, rel_err(got, want)


# ---------------------------------------------------------------------------- the fast path
def _count_recorded_calls(monkeypatch) -> list:
    """Counts the calls, from the fused ops, of what records gradients: the registered ops'
    entries and ``recorded_gradients``."""
    calls = []

    def counted(fn):
        return lambda *args, **kwargs: calls.append(fn) or fn(*args, **kwargs)

    for module in (graph_conv_module, agnn_module, gat_module, score_terms_module):
        for name in ("spmm_call", "sddmm_call", "edge_softmax_call", "recorded_gradients"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, counted(getattr(module, name)))
    return calls


FUSED = {
    "gcn-project-first": lambda a, x, p: ops.graph_conv(a, x, p[:, :3], p[0, :3]),
    "gcn-aggregate-first": lambda a, x, p: ops.graph_conv(a, x[:, :2], p[:2], p[0]),
    "agnn": lambda a, x, p: ops.agnn_propagate(a, x, p[0, :1]),
    "gat": lambda a, x, p: ops.gat_attention(a, x, x[:, :1] @ p[:1, :1], x[:, 1:2] @ p[1:2, 1:2]),
}


@pytest.mark.parametrize("op", list(FUSED.values()), ids=list(FUSED))
def test_first_order_backward_takes_the_fast_path(op, rng, monkeypatch):
    """Without create_graph the backward runs the fused kernels' path, recording nothing; with
    it, the composed ops' entries record the same gradients."""
    a, _ = _adjacency(rng, n=30)
    x, p = _leaf(a.n_rows, 4), _leaf(4, 4)
    calls = _count_recorded_calls(monkeypatch)
    out = op(a, x, p)
    proj = torch.randn_like(out)
    plain = torch.autograd.grad(out, [x, p], proj, retain_graph=True)
    assert calls == [] and all(g.grad_fn is None and not g.requires_grad for g in plain)
    recorded = torch.autograd.grad(out, [x, p], proj, create_graph=True)
    assert calls and all(g.requires_grad for g in recorded)
    for got, want in zip(recorded, plain):
        assert rel_err(got, want) < 1e-12


# ---------------------------------------------------------------------------- GPU
def _gpu_matches_float64(fn, *tensors, tol=1e-4):
    """The gradient penalty of ``fn(*tensors)`` on the GPU in fp32 against the CPU in float64."""
    results, proj = [], None
    for device, dtype in (("cpu", torch.float64), ("cuda", torch.float32)):
        leaves = [t.detach().to(device, dtype).requires_grad_() for t in tensors]
        if proj is None:
            proj = torch.randn(fn(device, *leaves).shape, dtype=torch.float64)
        results.append(penalised_gradients(lambda: fn(device, *leaves), leaves, proj))
    results.reverse()  # (GPU, float64)
    for i, (got, want) in enumerate(zip(*results)):
        assert rel_err(got, want) < tol, f"input {i}: {rel_err(got, want):.2e}"


@needs_gpu
def test_gpu_ops_second_derivatives(rng):
    a, _ = _adjacency(rng, n=300)
    on = {"cpu": a, "cuda": a.to("cuda")}
    values, x = a.values + 0.5, torch.randn(a.n_cols, 8)
    _gpu_matches_float64(lambda d, v, x: ops.spmm(on[d], x, values=v), values, x)
    _gpu_matches_float64(lambda d, x, y: ops.sddmm(on[d], x, y), x, torch.randn(a.n_cols, 8))
    _gpu_matches_float64(lambda d, s: ops.edge_softmax(on[d], s), torch.randn(a.n_slots))
    _gpu_matches_float64(
        lambda d, ft, attn: score_terms(ft, attn), torch.randn(3 * 100, 16), torch.randn(3, 2, 16)
    )


@needs_gpu
@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_gpu_graph_conv_second_derivatives(f_in, f_out, rng):
    a, _ = _rectangular(rng, 300, 280)
    on = {"cpu": a, "cuda": a.to("cuda")}
    weight, b = _params(f_in, f_out, torch.float32)
    tensors = [torch.randn(a.n_cols, f_in)] + [t for t in (weight, b) if t is not None]

    def fn(device, feat, *rest):
        w, b_ = rest if weight is not None else (None, rest[0])
        values = on[device].values.to(feat.dtype)
        return ops.graph_conv(on[device], feat, w, b_, values=values)

    _gpu_matches_float64(fn, *tensors)


@needs_gpu
def test_gpu_agnn_and_gat_second_derivatives(rng):
    a, _ = _adjacency(rng, n=300)
    on = {"cpu": a, "cuda": a.to("cuda")}
    feat, beta = torch.randn(a.n_rows, 16), torch.tensor([0.7])
    _gpu_matches_float64(lambda d, x, b: ops.agnn_propagate(on[d], x, b), feat, beta)
    values = torch.rand(a.n_slots) + 0.5
    for edge_values in (None, values):
        _gpu_matches_float64(
            lambda d, x, t: _gat(
                on[d], x, t, 0.2, edge_values=None if edge_values is None else edge_values.to(x)
            ),
            feat,
            torch.randn(a.n_rows, 2),
        )


@needs_gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gpu_16_bit_stand_ins_match_the_composition(precision, rng):
    """fp32 inputs read in 16 bits: the nodes keep casts of them (GAT's features; under
    autocast GCN's X and W), through which a higher derivative reaches the inputs as through
    the composition's casts."""
    a, _ = _adjacency(rng, n=300, device="cuda")
    ft, terms = torch.randn(a.n_rows, 16, device="cuda"), torch.randn(a.n_rows, 2, device="cuda")
    proj = torch.randn(a.n_rows, 16, device="cuda")
    results = []
    for returned in (False, True):  # the node; the composed ops, which also return P
        x, t = ft.clone().requires_grad_(), terms.clone().requires_grad_()

        def forward():
            out = _gat(a, x, t, 0.2, 0.0, precision, return_attention=returned)
            return out[0] if returned else out

        results.append(penalised_gradients(forward, [x, t], proj))
    tol = {"fp16": 1e-2, "bf16": 3e-2}[precision]
    for got, want in zip(*results):
        assert rel_err(got, want) < tol
    weight, b = torch.randn(16, 24, device="cuda"), torch.randn(24, device="cuda")
    # scaled so that the composition's fp16 gradients (about 1e5 unscaled) stay below fp16's max
    proj = torch.randn(a.n_rows, 24, device="cuda") / 64
    results = []
    for fn in (ops.graph_conv, lambda *args: _composed(*args, a.values)):
        x, w, b_ = (t.clone().requires_grad_() for t in (ft, weight, b))
        with torch.autocast("cuda", dtype=half_storage(precision)):
            results.append(
                penalised_gradients(lambda: fn(a, x, w, b_, precision), [x, w, b_], proj)
            )
    for got, want in zip(*results):
        assert rel_err(got, want) < tol


def test_recorded_gradients_alias_each_input():
    """One tensor given as two inputs gets the gradient of each, not their sum twice."""
    t = torch.randn(3, dtype=torch.float64, requires_grad=True)
    g = torch.ones(3, dtype=torch.float64)
    d_x, d_y = _autograd.recorded_gradients(lambda x, y: x * 2 + y * 3, (t, t), (True, True), g)
    assert torch.equal(d_x, 2 * g) and torch.equal(d_y, 3 * g)
