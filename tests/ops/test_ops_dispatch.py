"""How the ops are entered: torch.compile goes through torch.library's dispatcher (fake and
autograd registrations) and gives what the eager path (which skips it) gives; constant SpMM
values are transposed for the backward once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import Graph, ops
from flashgnn.nn import AGNNConv, GATConv, GCNConv
from flashgnn.ops import _pattern
from tests.helpers import GPU, random_csr


@pytest.fixture
def graph(rng):
    a = random_csr(53, 53, 0.1, rng, dtype=np.float32)
    return Graph.from_scipy(a).add_self_loops()


def _grads(layer, graph, x, compiled: bool):
    def step(x):
        return layer(graph, x)

    fn = torch.compile(step, backend="aot_eager", fullgraph=False) if compiled else step
    x = x.clone().requires_grad_()
    out = fn(x)
    proj = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    params = [p for p in layer.parameters() if p.requires_grad]
    return (out.detach(), *torch.autograd.grad((out * proj).sum(), [x, *params]))


LAYERS = {
    "gcn": lambda: GCNConv(6, 5),
    "agnn": lambda: AGNNConv(),
    "gat": lambda: GATConv(6, 5, 2, residual=True),
}


@pytest.mark.parametrize("layer_type", LAYERS)
def test_compiled_layers_match_eager(graph, layer_type):
    """Compiled, each layer runs the composed registered ops; eager, its one-node op."""
    torch.manual_seed(0)
    layer = LAYERS[layer_type]()
    x = torch.randn(graph.num_nodes, 6)
    torch._dynamo.reset()
    eager = _grads(layer, graph, x, compiled=False)
    compiled = _grads(layer, graph, x, compiled=True)
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)


def test_constant_values_are_transposed_once(graph):
    layer = GCNConv(6, 5)
    x = torch.randn(graph.num_nodes, 6, requires_grad=True)
    layer(graph, x).sum().backward()
    values = graph.gcn_values("both")
    first = _pattern._TRANSPOSED.get(values)[1]
    for _ in range(2):
        layer(graph, x).sum().backward()
    assert _pattern._TRANSPOSED.get(values)[1] is first
    t = graph.adj().transpose()
    real = t.fmt.perm
    assert torch.equal(first[real], t.values_from(values)[real])
    # values that need a gradient change every call and are not kept
    trainable = values.clone().requires_grad_()
    ops.spmm(graph.adj(), x, values=trainable).sum().backward()
    assert _pattern._TRANSPOSED.get(trainable) is None


@pytest.mark.parametrize(
    "dtype", [pytest.param(d, marks=GPU) for d in (torch.float32, torch.float16, torch.float64)]
)
def test_transposed_values_on_the_gpu(graph, dtype):
    """A's values moved into A^T's layout by the move_values kernel equal the CPU's on every
    real slot of A^T."""
    a = graph.adj()
    values = torch.randn(a.n_slots).to(dtype)
    t = a.transpose()
    args = (t.fmt.col_idx, t.fmt.perm, t.src_slot)
    cpu = _pattern.transposed_values(values, *args)
    gpu_t = a.to("cuda").transpose()
    gpu = _pattern.transposed_values(
        values.cuda(), gpu_t.fmt.col_idx, gpu_t.fmt.perm, gpu_t.src_slot
    )
    real = t.fmt.perm
    assert torch.equal(gpu.cpu()[real], cpu[real])
