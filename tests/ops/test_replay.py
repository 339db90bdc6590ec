"""Layers replaying their kernels from CUDA graphs (``ops.replay``: GCNConv, AGNNConv, GATConv)
against the same layers run eagerly: the same bits in every precision (and GCN product order,
GAT heads and attention dropout, whose masks are the eager ones step by step), and no replay
over anything a caller, a pending backward or a parameter's ``.grad`` still holds.

On the GPU the graphs are real; on the CPU a stand-in (``EmulatedGraph``) reruns the captured
body at each replay and copies its results into the tensors the capture returned, which is
what a replay writes: the bookkeeping (configurations, slots, which storages are held) is the
same code on both. The stand-in's capture leaves the generator as it found it, as a real
capture's warm-up does and the capture itself (which draws nothing) does."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from flashgnn.cuda_graphs import graphed, rng_kept
from flashgnn.nn import AGNNConv, GATConv, GCNConv
from flashgnn.ops import replay
from flashgnn.training.precision import precision_scope
from tests.helpers import GPU, needs_gpu, rel_err
from tests.nn.test_nn_layers import random_graph
from tests.ops.test_second_derivatives import penalised_gradients


class EmulatedGraph:
    def __init__(self, body, outputs):
        self.body, self.outputs = body, outputs

    def replay(self):
        with torch.no_grad():
            for static, fresh in zip(self.outputs, self.body(), strict=True):
                # an output the body passes through (fp32 W as it is) is not written by a replay
                if (
                    static is not None
                    and static.untyped_storage().data_ptr() != fresh.untyped_storage().data_ptr()
                ):
                    static.copy_(fresh)


def emulated_capture(body, device):
    with torch.no_grad(), rng_kept(device):
        outputs = body()
    return EmulatedGraph(body, outputs), outputs


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=GPU)])
def device(request, monkeypatch):
    if request.param == "cpu":
        monkeypatch.setattr(replay, "capture", emulated_capture)
        monkeypatch.setattr(replay, "current_stream", lambda device: 0)
        monkeypatch.setattr(
            replay.NodeReplay, "applies", lambda self, x, nnz: self.enabled is not False
        )
    return torch.device(request.param)


@pytest.fixture
def graph(device):
    return random_graph(500, 0.02, np.random.default_rng(7), symmetric=False).to(device)


def pair(device, in_feats: int, out_feats: int, bias: bool = True):
    """(eager GCNConv, replayed GCNConv) with the same parameters."""
    eager = GCNConv(in_feats, out_feats, bias=bias, replay=False).to(device)
    replayed = GCNConv(in_feats, out_feats, bias=bias, replay=True).to(device)
    replayed.load_state_dict(eager.state_dict())
    if bias:  # a non-zero bias, so that its gradient and addition show
        with torch.no_grad():
            eager.bias.uniform_(-1, 1)
            replayed.bias.copy_(eager.bias)
    return eager, replayed


class ConcatGAT(GATConv):
    """GATConv 48 -> heads x 48 / heads with its heads concatenated: [N, 48], as the other
    layers give."""

    def __init__(self, heads: int, attn_drop: float, replay: bool):
        super().__init__(48, 48 // heads, heads, attn_drop=attn_drop, replay=replay)

    def forward(self, graph, feat):
        return super().forward(graph, feat).flatten(1)


def gat_pair(device, heads: int = 4, attn_drop: float = 0.0):
    """(eager ConcatGAT, replayed ConcatGAT) with the same parameters."""
    eager = ConcatGAT(heads, attn_drop, replay=False).to(device)
    replayed = ConcatGAT(heads, attn_drop, replay=True).to(device)
    with torch.no_grad():  # a non-zero bias, so that its gradient and addition show
        eager.bias.uniform_(-1, 1)
    replayed.load_state_dict(eager.state_dict())
    return eager, replayed


LAYERS = {
    "gcn": lambda device: pair(device, 48, 48),
    "gat": gat_pair,
    "agnn": lambda device: (
        AGNNConv(0.7, replay=False).to(device),
        AGNNConv(0.7, replay=True).to(device),
    ),
}
layers = pytest.mark.parametrize("make", list(LAYERS.values()), ids=list(LAYERS))


def step(layer, graph, x, proj, precision):
    """Output and the gradients of sum(out * proj) with respect to x and every parameter, copied."""
    with precision_scope(precision, x.device):
        out = layer(graph, x)
        grads = torch.autograd.grad(out, [x, *layer.parameters()], proj)
    return [out.detach().clone(), *(g.clone() for g in grads)]


def assert_equal(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)


# 48 -> 48: (A X) W; 64 -> 16: A (X W)
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize("features", [(48, 48), (64, 16)], ids=["aggregate-first", "project-first"])
@pytest.mark.parametrize("bias", [True, False])
def test_gcn_replay_gives_the_eager_bits(graph, device, precision, features, bias):
    eager, replayed = pair(device, *features, bias)
    x = torch.randn(graph.num_nodes, features[0], device=device, requires_grad=True)
    for i in range(4):
        proj = torch.randn(graph.num_nodes, features[1], device=device)
        assert_equal(
            step(replayed, graph, x, proj, precision), step(eager, graph, x, proj, precision)
        )
    assert replayed.replay.graphs() == (1, 1) and eager.replay.graphs() == (0, 0)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize("learn_beta", [True, False])
def test_agnn_replay_gives_the_eager_bits(graph, device, precision, learn_beta):
    eager = AGNNConv(0.7, learn_beta=learn_beta, replay=False).to(device)
    replayed = AGNNConv(0.7, learn_beta=learn_beta, replay=True).to(device)
    x = torch.randn(graph.num_nodes, 32, device=device, requires_grad=True)
    for i in range(4):
        proj = torch.randn(graph.num_nodes, 32, device=device)
        assert_equal(
            step(replayed, graph, x, proj, precision), step(eager, graph, x, proj, precision)
        )
    assert replayed.replay.graphs() == (1, 1)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("attn_drop", [0.0, 0.4], ids=["no-dropout", "dropout"])
def test_gat_replay_gives_the_eager_bits(graph, device, precision, heads, attn_drop):
    """Both twins seeded alike: every step's output and gradients are the same bits, the
    dropout masks included, and the masks change from step to step (the same input gives
    another output)."""
    eager, replayed = gat_pair(device, heads, attn_drop)
    x = torch.randn(graph.num_nodes, 48, device=device, requires_grad=True)
    projs = [torch.randn(graph.num_nodes, 48, device=device) for _ in range(5)]
    runs = []
    for layer in (eager, replayed):
        torch.manual_seed(3)
        runs.append([step(layer, graph, x, proj, precision) for proj in projs])
    for got, want in zip(*reversed(runs), strict=True):
        assert_equal(got, want)
    outs = [r[0] for r in runs[1]]
    assert all(torch.equal(a, b) != (attn_drop > 0) for a, b in zip(outs, outs[1:]))
    assert replayed.replay.graphs() == (1, 1) and eager.replay.graphs() == (0, 0)


@layers
def test_training_with_an_optimizer_matches_eager(graph, device, make):
    """Weights updated in place between steps: each replay reads the current weights; .grad
    set to None by zero_grad releases the gradient buffers for the next replay."""
    eager, replayed = make(device)
    x = torch.randn(graph.num_nodes, 48, device=device)
    target = torch.randn(graph.num_nodes, 48, device=device)
    for layer in (eager, replayed):
        opt = torch.optim.Adam(layer.parameters(), lr=0.01)
        for _ in range(6):
            opt.zero_grad()
            with precision_scope("fp16", x.device):
                loss = ((layer(graph, x) - target) ** 2).mean()
            loss.backward()
            opt.step()
    assert_equal(list(replayed.parameters()), list(eager.parameters()))
    assert replayed.replay.graphs() == (1, 1)


@layers
def test_an_output_held_across_the_next_forward_keeps_its_values(graph, device, make):
    """``out = layer(g, x)`` in a loop holds the last output while the next forward runs:
    that call takes a second slot, and the held output is never overwritten."""
    eager, replayed = make(device)
    xs = [torch.randn(graph.num_nodes, 48, device=device) for _ in range(5)]
    held = []
    for x in xs:
        out = replayed(graph, x)
        held.append((out, out.clone()))
    for (out, copy_), x in zip(held, xs):
        assert torch.equal(out, copy_) and torch.equal(out, eager(graph, x))
    assert replayed.replay.graphs()[0] == 2


@layers
def test_two_forwards_before_one_backward(graph, device, make):
    eager, replayed = make(device)
    x = torch.randn(graph.num_nodes, 48, device=device, requires_grad=True)
    xs = [torch.randn(graph.num_nodes, 48, device=device) for _ in range(2)]
    results = []
    for layer in (eager, replayed):
        for _ in range(4):  # captured by then
            y = layer(graph, x * 1.5) + layer(graph, x) * 2 + sum(layer(graph, z) for z in xs)
            grads = torch.autograd.grad(y.sum(), [x, *layer.parameters()])
        results.append([y.detach(), *grads])
    assert_equal(results[1], results[0])


@layers
def test_gradients_kept_by_the_caller_are_not_overwritten(graph, device, make):
    eager, replayed = make(device)
    x = torch.randn(graph.num_nodes, 48, device=device, requires_grad=True)
    kept = []
    for i in range(5):
        proj = torch.randn(graph.num_nodes, 48, device=device)
        grads = torch.autograd.grad(replayed(graph, x), [x, next(replayed.parameters())], proj)
        kept.append((grads, [g.clone() for g in grads], proj))
    for grads, copies, proj in kept:
        assert_equal(grads, copies)
        assert_equal(
            grads, torch.autograd.grad(eager(graph, x), [x, next(eager.parameters())], proj)
        )


@layers
def test_gradient_accumulation_without_zero_grad(graph, device, make):
    """AccumulateGrad keeps a replayed backward's gradient as .grad (an alias of the slot's
    buffer): later backward passes that add to it must not replay over it."""
    eager, replayed = make(device)
    x = torch.randn(graph.num_nodes, 48, device=device)
    results = []
    for layer in (eager, replayed):
        feat = x.clone().requires_grad_()
        for _ in range(3):  # captured, with .grad set to None before each backward
            layer.zero_grad()
            feat.grad = None
            layer(graph, feat).square().sum().backward()
        for _ in range(3):
            layer(graph, feat).square().sum().backward()
        results.append([feat.grad, *(p.grad for p in layer.parameters())])
    assert_equal(results[1], results[0])
    assert replayed.replay.graphs() == (1, 1)


@layers
def test_evaluation_between_training_steps_and_retained_graphs(graph, device, make):
    eager, replayed = make(device)
    x = torch.randn(graph.num_nodes, 48, device=device, requires_grad=True)
    for _ in range(4):
        got, want = [], []
        for layer, into in ((eager, want), (replayed, got)):
            with torch.no_grad():
                into.append(layer(graph, x).clone())
            y = layer(graph, x).sum()
            params = list(layer.parameters())
            into.extend(
                g.clone() for g in torch.autograd.grad(y, [x, params[0]], retain_graph=True)
            )
            into.extend(g.clone() for g in torch.autograd.grad(y * 3, [x, params[-1]]))
        assert_equal(got, want)
    assert replayed.replay.graphs() == (2, 1)  # a training and an evaluation configuration


@layers
def test_a_second_derivative_is_recorded_not_replayed(graph, device, make):
    """A gradient penalty (create_graph) through a replayed layer: the forward replays, the
    backward that builds the graph records the composed ops eagerly, and the gradients are the
    eager layer's; plain steps after it replay as before."""
    eager, replayed = make(device)
    x = torch.randn(graph.num_nodes, 48, device=device)
    proj = torch.randn(graph.num_nodes, 48, device=device)
    results = []
    for layer in (eager, replayed):
        feat = x.clone().requires_grad_()
        for _ in range(4):  # the forward captured by then
            got = penalised_gradients(lambda: layer(graph, feat), [feat, *layer.parameters()], proj)
        results.append(got)
    for got, want in zip(*results):
        assert rel_err(got, want) < 1e-5
    assert replayed.replay.graphs()[0] > 0
    feat = x.clone().requires_grad_()
    for _ in range(3):
        assert_equal(
            step(replayed, graph, feat, proj, "fp32"), step(eager, graph, feat, proj, "fp32")
        )
    assert replayed.replay.graphs()[1] == 1


def test_new_edge_weights_or_parameters_are_new_configurations(graph, device):
    eager, replayed = pair(device, 48, 48)
    x = torch.randn(graph.num_nodes, 48, device=device)
    for i in range(3):
        w = torch.rand(graph.num_edges, device=device) + 0.5
        for _ in range(3):
            assert torch.equal(replayed(graph, x, edge_weight=w), eager(graph, x, edge_weight=w))
    replayed.weight.data = replayed.weight.data * 2  # a new storage behind the same parameter
    eager.weight.data = eager.weight.data * 2
    for _ in range(3):
        assert torch.equal(replayed(graph, x), eager(graph, x))


@layers
def test_a_deepcopy_starts_without_graphs(graph, device, make):
    eager, replayed = make(device)
    x = torch.randn(graph.num_nodes, 48, device=device, requires_grad=True)
    proj = torch.randn(graph.num_nodes, 48, device=device)
    want = step(eager, graph, x, proj, "fp16")
    for _ in range(3):
        step(replayed, graph, x, proj, "fp16")
    twin = copy.deepcopy(replayed)
    assert twin.replay.graphs() == (0, 0) and replayed.replay.graphs() == (1, 1)
    for _ in range(3):
        assert_equal(step(twin, graph, x, proj, "fp16"), want)


@needs_gpu
@layers
def test_inside_a_captured_step(make):
    graph = random_graph(500, 0.02, np.random.default_rng(7), symmetric=False).to("cuda")
    eager, replayed = make("cuda")
    x = torch.randn(graph.num_nodes, 48, device="cuda", requires_grad=True)
    proj = torch.randn(graph.num_nodes, 48, device="cuda")
    want = step(eager, graph, x, proj, "fp16")
    for _ in range(3):
        step(replayed, graph, x, proj, "fp16")
    captured = graphed(
        lambda: step(replayed, graph, x, proj, "fp16")
    )  # the layer runs eagerly inside
    assert_equal(captured(), want)
    # the step's warm-up calls and its capture run the layer eagerly: no configuration of their own
    assert replayed.replay.graphs() == (1, 1)
    assert_equal(step(replayed, graph, x, proj, "fp16"), want)  # outside, the layer replays again
