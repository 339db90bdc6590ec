"""A layer's forward + backward captured in a CUDA graph (torch.cuda.graph): every replay
computes what an eager call computes, bit for bit, also after the inputs change in place.
Capture fails on any host synchronisation or host-to-device copy, so this also checks that no
op does one once warmed up; the graph has a hub window of more than 64 segments, so the split
window paths (in-kernel sums and the spmm_reduce launch) are captured too."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import Graph
from flashgnn.cuda_graphs import graphed
from flashgnn.nn import AGNNConv, GATConv, GCNConv
from flashgnn.ops import PRECISIONS
from flashgnn.training.precision import precision_scope
from tests.helpers import GPU

pytestmark = GPU

N_NODES, HUB_DEGREE = 6000, 5000


def hub_graph(rng: np.random.Generator) -> Graph:
    src = rng.integers(0, N_NODES, 40_000)
    dst = rng.integers(0, N_NODES, 40_000)
    src = np.concatenate(
        [src, np.arange(1, HUB_DEGREE + 1)]
    )  # node 0's window: > 64 segments of 64
    dst = np.concatenate([dst, np.zeros(HUB_DEGREE, dtype=np.int64)])
    edges = np.unique(np.stack([src, dst]), axis=1)
    return Graph.from_edge_index(torch.from_numpy(edges), N_NODES).add_self_loops().to("cuda")


LAYERS = {
    "gcn": (lambda: GCNConv(32, 32), 32),
    "agnn": (lambda: AGNNConv(0.7), 32),
    "gat": (lambda: GATConv(32, 8, 4, residual=True), 32),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("layer", LAYERS)
def test_captured_step_replays_like_eager(layer, precision, rng):
    make, features = LAYERS[layer]
    graph = hub_graph(rng)
    conv = make().cuda()
    x = torch.randn(N_NODES, features, device="cuda", requires_grad=True)
    params = [x, *conv.parameters()]

    def step():
        with precision_scope(precision, x.device):
            out = conv(graph, x)
            grads = torch.autograd.grad(out, params, torch.ones_like(out))
        return (out.detach(), *grads)

    replay = graphed(step)
    for _ in range(2):
        with torch.no_grad():
            x.copy_(torch.randn_like(x))
            for p in conv.parameters():
                p.mul_(1.25)
        replayed = [t.clone() for t in replay()]
        eager = step()
        for r, e in zip(replayed, eager):
            assert torch.equal(r, e)
