"""A learnable edge weight stored in a Graph trains through the layers: every step's output and
gradient are float64 dense maths on that step's weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import Graph, NeighborSampler
from flashgnn.nn import GCNConv
from tests.helpers import GPU, random_csr, rel_err

DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
N = 48


def edges(rng, device):
    """(src, dst) int64 [E] of a random square graph of N nodes, in a random edge order."""
    m = random_csr(N, N, 0.12, rng)
    dst = np.repeat(np.arange(N), np.diff(m.indptr))
    order = rng.permutation(m.nnz)
    return (
        torch.from_numpy(m.indices[order].astype(np.int64)).to(device),
        torch.from_numpy(dst[order]).to(device),
    )


def gcn_factor(src, dst, norm: str) -> torch.Tensor:
    """DGL's degree normalisation of every edge, float64 [E] on the CPU."""
    src, dst = src.cpu(), dst.cpu()
    d_in = torch.bincount(dst, minlength=N).clamp(min=1).double()
    d_out = torch.bincount(src, minlength=N).clamp(min=1).double()
    return {
        "both": (d_in[dst] * d_out[src]).rsqrt(),
        "right": 1 / d_in[dst],
        "left": 1 / d_out[src],
        "none": torch.ones(src.numel(), dtype=torch.float64),
    }[norm]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm", ["both", "none"])
def test_gcn_conv_trains_the_graph_weights_for_three_steps(device, norm, rng):
    src, dst = edges(rng, device)
    weight = torch.nn.Parameter(torch.rand(src.numel(), device=device) + 0.5)
    g = Graph.from_edge_index(torch.stack([src, dst]), N, weight)
    conv = GCNConv(6, 4, norm=norm, allow_zero_in_degree=True, precision="fp32").to(device)
    x = torch.randn(N, 6, device=device)
    target = torch.randn(N, 4, device=device)
    optimizer = torch.optim.Adam([weight, *conv.parameters()], lr=0.05)
    factor = gcn_factor(src, dst, norm)
    outputs = []
    for _ in range(3):
        optimizer.zero_grad()
        out = conv(g, x)
        ((out - target) ** 2).sum().backward()

        w64 = weight.detach().cpu().double().requires_grad_()
        a = torch.zeros(N, N, dtype=torch.float64).index_put(
            (dst.cpu(), src.cpu()), w64 * factor, accumulate=True
        )
        lin_w = conv.weight.detach().cpu().double()
        ref = a @ x.cpu().double() @ lin_w + conv.bias.detach().cpu().double()
        ((ref - target.cpu().double()) ** 2).sum().backward()
        assert rel_err(out, ref) < 1e-5
        assert rel_err(weight.grad, w64.grad) < 1e-5
        outputs.append(out.detach())
        optimizer.step()
    assert not torch.equal(outputs[0], outputs[2])


@pytest.mark.parametrize("device", DEVICES)
def test_blocks_sampled_from_a_learnable_weight_train_it(device, rng):
    """A block's weights are gathered from the graph's in every sample, so each step's loss
    reaches the graph's Parameter (at the sampled edges only)."""
    src, dst = edges(rng, device)
    weight = torch.nn.Parameter(torch.rand(src.numel(), device=device) + 0.5)
    g = Graph.from_edge_index(torch.stack([src, dst]), N, weight)
    sampler = NeighborSampler(g, [3])
    conv = GCNConv(5, 2, allow_zero_in_degree=True, precision="fp32").to(device)
    feat = torch.randn(N, 5, device=device)
    optimizer = torch.optim.SGD([weight], lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        input_nodes, (block,) = sampler.sample(torch.arange(0, N, 3, device=device))
        conv(block, feat[input_nodes]).square().sum().backward()
        assert weight.grad is not None and bool(weight.grad.ne(0).any())
        optimizer.step()
