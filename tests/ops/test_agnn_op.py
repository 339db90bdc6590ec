"""ops.agnn_propagate (one autograd node with a written-out backward) against the composition of
F.normalize and the public sddmm, edge_softmax and spmm ops, which autograd differentiates;
float64 gradcheck; GPU kernels against the CPU path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from flashgnn import ops
from flashgnn.ops import PRECISIONS
from tests.helpers import GPU, rel_err
from tests.ops.test_gat_op import _adjacency as gat_adjacency


def _adjacency(rng, n=45, k=8, device="cpu"):
    """GAT's test adjacency: n x n, directed, with self-loops."""
    return gat_adjacency(rng, n, k, device)[0]


def _composed(a, feat, beta, precision):
    unit = F.normalize(feat, p=2.0, dim=-1)
    prob = ops.edge_softmax(a, beta * ops.sddmm(a, unit, unit, precision))
    return ops.spmm(a, feat, precision, values=prob)


def _run(fn, a, feat, beta, precision, proj):
    feat = feat.clone().requires_grad_()
    beta = beta.clone().requires_grad_()
    out = fn(a, feat, beta, precision)
    grads = torch.autograd.grad((out * proj).sum(), [feat, beta])
    return (out.detach(), *grads)


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_matches_the_composed_ops(precision, k, rng):
    a = _adjacency(rng, k=k)
    feat = torch.randn(a.n_rows, 12)
    feat[3] = 0.0  # a zero row: its norm is clamped, its gradient is dU / eps
    beta = torch.tensor([0.7])
    proj = torch.randn(a.n_rows, 12)
    fused = _run(ops.agnn_propagate, a, feat, beta, precision, proj)
    composed = _run(_composed, a, feat, beta, precision, proj)
    for name, f, c in zip(("out", "d feat", "d beta"), fused, composed):
        assert rel_err(f, c) <= 1e-5, name


def test_gradcheck(rng):
    a = _adjacency(rng, n=21)
    feat = torch.randn(a.n_rows, 5, dtype=torch.float64, requires_grad=True)
    beta = torch.tensor([1.3], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b: ops.agnn_propagate(a, x, b), (feat, beta))


def test_gradient_of_beta_alone(rng):
    a = _adjacency(rng)
    feat = torch.randn(a.n_rows, 6)
    beta = torch.tensor([0.5], requires_grad=True)
    (fused,) = torch.autograd.grad(ops.agnn_propagate(a, feat, beta).sum(), beta)
    (composed,) = torch.autograd.grad(_composed(a, feat, beta, "fp32").sum(), beta)
    assert rel_err(fused, composed) <= 1e-5


def test_bad_input(rng):
    a = _adjacency(rng)
    feat = torch.randn(a.n_rows, 4)
    with pytest.raises(ValueError, match="beta must be a tensor of shape"):
        ops.agnn_propagate(a, feat, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="feat must have"):
        ops.agnn_propagate(a, feat[:-1], torch.tensor([1.0]))
    with pytest.raises(ValueError, match="precision must be one of"):
        ops.agnn_propagate(a, feat, torch.tensor([1.0]), "fp8")


@pytest.mark.parametrize("precision", [pytest.param(p, marks=GPU) for p in PRECISIONS])
def test_gpu_matches_cpu(precision, rng):
    cpu = _adjacency(rng, n=300, k=4 if precision == "tf32" else 8)
    gpu = cpu.to("cuda")
    feat = torch.randn(cpu.n_rows, 33)
    feat[5] = 0.0
    beta = torch.tensor([1.7])
    proj = torch.randn(cpu.n_rows, 33)
    ref = _run(ops.agnn_propagate, cpu, feat, beta, precision, proj)
    got = _run(ops.agnn_propagate, gpu, feat.cuda(), beta.cuda(), precision, proj.cuda())
    bound = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}[precision]
    for name, g, r in zip(("out", "d feat", "d beta"), got, ref):
        assert rel_err(g, r) <= bound, name


@pytest.mark.parametrize(
    "dtype", [pytest.param(d, marks=GPU) for d in (torch.float16, torch.bfloat16)]
)
def test_gpu_half_features(dtype, rng):
    """feat stored in 16 bits (a model cast with .half()): the output keeps feat's dtype, the
    gradients match the CPU path's."""
    cpu = _adjacency(rng, n=200)
    feat = torch.randn(cpu.n_rows, 16).to(dtype)
    beta = torch.tensor([0.9])
    proj = torch.randn(cpu.n_rows, 16).to(dtype)
    ref = _run(ops.agnn_propagate, cpu, feat, beta, "fp16", proj)
    got = _run(ops.agnn_propagate, cpu.to("cuda"), feat.cuda(), beta.cuda(), "fp16", proj.cuda())
    assert got[0].dtype == dtype and got[1].dtype == dtype
    for name, g, r in zip(("out", "d feat", "d beta"), got, ref):
        assert rel_err(g, r) <= 1e-2, name
