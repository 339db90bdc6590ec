"""ops.epilogue (bias, ReLU, the next layer's dropout from a counter-based hash, the cast) and
graph_conv's fused epilogue: the hash against a scalar Python implementation, the fused node
against the separate ops in float64 (1e-12) both ways, dropout reproducible from its key,
gradcheck; on the GPU the kernels against the CPU twin (the same mask bits) and the separate
ops per precision, and GCN training with replay."""

from __future__ import annotations

import pytest
import torch

from flashgnn import Graph, ops
from flashgnn.models import GCN
from flashgnn.ops import PRECISIONS
from flashgnn.ops import epilogue as epi
from flashgnn.ops.replay import set_replay
from tests.helpers import needs_gpu, rel_err
from tests.ops.test_graph_conv_op import SHAPE_IDS, SHAPES, _adjacency, _grads, _params

F64 = torch.float64
M32 = 0xFFFFFFFF
TOLERANCE = {"fp16": 2e-3, "tf32": 2e-3, "bf16": 1e-2, "fp32": 1e-5}


def _mix(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def _kept(seed: int, offset: int, stream: int, index: int, p: float) -> bool:
    """kernels/epilogue.cuh's dropout_keeps on Python integers."""
    k = _mix(_mix((seed & M32) ^ 0x9E3779B9) ^ (offset & M32) ^ ((stream * 0x632BE5AB) & M32))
    h = _mix(_mix((index & M32) ^ k) ^ (index >> 32))
    return h >= min(round(p * 2**32), M32)


def _separate(out: torch.Tensor, relu: bool, p: float, key, stream: int) -> torch.Tensor:
    """ReLU and the dropout as separate ops, the mask from ``keeps``."""
    out = torch.relu(out) if relu else out
    if p == 0:
        return out
    kept = epi.keeps(key, stream, out.shape[0], out.shape[1], p)
    return out * kept * (1.0 / (1.0 - p))


def _graph(rng, n=61, edges=400):
    src = torch.from_numpy(rng.integers(0, n, edges))
    dst = torch.from_numpy(rng.integers(0, n, edges))
    return Graph.from_edge_index(torch.unique(torch.stack([src, dst]), dim=1), num_nodes=n)


def test_keeps_matches_the_scalar_hash():
    key = torch.tensor([-123456789012, 2**33 + 5])  # only the low 32 bits count
    kept = epi.keeps(key, 7, 13, 11, 0.3)
    want = [_kept(-123456789012, 2**33 + 5, 7, i, 0.3) for i in range(13 * 11)]
    assert kept.flatten().tolist() == want


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keeps_drops_a_fraction_p(p):
    kept = epi.keeps(torch.tensor([3, 0]), 0, 300, 257, p)
    assert abs(1 - kept.double().mean().item() - p) < 0.01
    assert epi.keeps(torch.tensor([3, 0]), 0, 5, 5, 0.0).all()


def test_masks_depend_on_seed_offset_and_stream():
    base = epi.keeps(torch.tensor([1, 0]), 0, 40, 40, 0.5)
    assert torch.equal(base, epi.keeps(torch.tensor([1, 0]), 0, 40, 40, 0.5))
    for key, stream in (
        (torch.tensor([2, 0]), 0),
        (torch.tensor([1, 1]), 0),
        (torch.tensor([1, 0]), 1),
    ):
        other = epi.keeps(key, stream, 40, 40, 0.5)
        assert 0.3 < (other != base).double().mean().item() < 0.7


def test_advance_moves_the_offset_in_place():
    key = epi.new_key()
    seed = key[0].item()
    before = key.data_ptr()
    epi.advance(key)
    epi.advance(key)
    assert key.tolist() == [seed, 2] and key.data_ptr() == before


@pytest.mark.parametrize("p", [0.0, 0.4])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_fused_equals_separate_ops_in_float64(f_in, f_out, relu, p, rng):
    a, _ = _adjacency(rng)
    feat = torch.randn(a.n_cols, f_in, dtype=F64)
    weight, b = _params(f_in, f_out, F64)
    proj = torch.randn(a.n_rows, f_out or f_in, dtype=F64)
    key = torch.tensor([11, 5])
    ep = epi.Epilogue(relu, p, key if p else None, 3)
    fused = _grads(
        lambda x, w, b_: ops.graph_conv(a, x, w, b_, "fp32", epilogue=ep), feat, weight, b, proj
    )
    separate = _grads(
        lambda x, w, b_: _separate(ops.graph_conv(a, x, w, b_, "fp32"), relu, p, key, 3),
        feat,
        weight,
        b,
        proj,
    )
    for got, ref in zip(fused, separate):
        assert (got is None) == (ref is None)
        assert got is None or (got.dtype == F64 and rel_err(got, ref) <= 1e-12)


def test_fused_casts_to_the_next_input_type(rng):
    a, _ = _adjacency(rng)
    feat = torch.randn(a.n_cols, 9, dtype=torch.float32, requires_grad=True)
    weight, b = _params(9, 5, torch.float32)
    ep = epi.Epilogue(True, 0.0, None, 0, torch.bfloat16)
    out = ops.graph_conv(a, feat, weight, b, "fp32", epilogue=ep)
    ref = torch.relu(ops.graph_conv(a, feat, weight, b, "fp32")).to(torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
    out.float().sum().backward()
    assert feat.grad is not None and feat.grad.dtype == torch.float32


@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_gradcheck_float64(f_in, f_out, rng):
    a, _ = _adjacency(rng)
    feat = torch.randn(a.n_cols, f_in, dtype=F64, requires_grad=True)
    weight, b = (t.requires_grad_() if t is not None else None for t in _params(f_in, f_out, F64))
    ep = epi.Epilogue(True, 0.3, torch.tensor([4, 9]), 1)
    leaves = [t for t in (feat, weight, b) if t is not None]

    def fn(*args):
        x, w, bias = args[0], (args[1] if weight is not None else None), args[-1]
        return ops.graph_conv(a, x, w, bias, "fp32", epilogue=ep)

    assert torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-8)


def test_standalone_epilogue_gradcheck_and_bad_input():
    y = torch.randn(9, 7, dtype=F64, requires_grad=True)
    b = torch.randn(7, dtype=F64, requires_grad=True)
    ep = epi.Epilogue(True, 0.5, torch.tensor([1, 2]), 4)
    assert torch.autograd.gradcheck(lambda y_, b_: epi.epilogue(y_, b_, ep), (y, b))
    ref = _separate(y + b, True, 0.5, ep.key, 4)
    assert torch.equal(epi.epilogue(y, b, ep), ref)
    with pytest.raises(ValueError, match="dropout must be in"):
        epi.Epilogue(dropout=1.0, key=ep.key)
    with pytest.raises(TypeError, match="needs a key"):
        epi.Epilogue(dropout=0.5)
    with pytest.raises(TypeError, match="needs a key"):
        epi.Epilogue(dropout=0.5, key=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="stream must be"):
        epi.Epilogue(stream=-1)
    with pytest.raises(TypeError, match="floating type"):
        epi.Epilogue(dtype=torch.int32)
    with pytest.raises(ValueError, match="bias must have shape"):
        epi.epilogue(y, torch.zeros(3, dtype=F64), ep)
    with pytest.raises(ValueError, match="must be 2-D"):
        epi.epilogue(y[0], None, ep)


def test_gcn_fused_equals_unfused_without_dropout(rng):
    g = _graph(rng).add_self_loops()
    x = torch.randn(g.num_nodes, 11, dtype=F64)
    results = []
    for fused in (True, False):
        torch.manual_seed(5)
        model = GCN(11, 16, 3, num_layers=3, dropout=0.0, fused_epilogue=fused).double()
        out = model(g, x)
        grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
        results.append([out, *grads])
    for got, ref in zip(*results):
        assert rel_err(got, ref) <= 1e-12


def test_gcn_dropout_is_reproducible_from_its_key(rng):
    g = _graph(rng).add_self_loops()
    x = torch.randn(g.num_nodes, 11, dtype=F64)
    model = GCN(11, 16, 3, num_layers=3, dropout=0.5).double()
    start = model.dropout_key.clone()
    first, second = model(g, x), model(g, x)
    assert not torch.equal(first, second)  # the offset advanced
    model.dropout_key.copy_(start)
    assert torch.equal(model(g, x), first)
    model.eval()  # no dropout: the same output, the key left alone
    assert torch.equal(model(g, x), model(g, x))
    assert model.dropout_key.tolist() == [start[0].item(), start[1].item() + 1]


def test_gcn_rejects_an_epilogue_over_another_activation(rng):
    from flashgnn.nn import GCNConv

    g = _graph(rng).add_self_loops()
    layer = GCNConv(4, 3, activation=torch.tanh)
    with pytest.raises(ValueError, match="None or ReLU"):
        layer(g, torch.randn(g.num_nodes, 4), epilogue=epi.Epilogue(relu=True))


@needs_gpu
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_gpu_masks_equal_the_cpu_twins(p):
    key = torch.tensor([987654321, 42])
    y = torch.ones(301, 259, device="cuda")
    out = epi.apply(y, None, epi.Epilogue(dropout=p, key=key.cuda(), stream=5))
    kept = epi.keeps(key, 5, 301, 259, p)
    assert torch.equal((out != 0).cpu(), kept)
    grad = epi.backward(
        y, None, epi.Epilogue(dropout=p, key=key.cuda(), stream=5), None, torch.float32
    )
    assert torch.equal((grad != 0).cpu(), kept)


@needs_gpu
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("in_dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_gpu_kernels_equal_the_twin(in_dtype, out_dtype):
    """Bit for bit: bias, ReLU, dropout, the cast, and the backward."""
    y = torch.randn(77, 45, device="cuda").to(in_dtype)
    b = torch.randn(45, device="cuda")
    ep = epi.Epilogue(True, 0.3, torch.tensor([5, 6], device="cuda"), 2, out_dtype)
    out = epi.apply(y, b, ep)
    twin = epi.apply(y.cpu(), b.cpu(), epi.Epilogue(True, 0.3, ep.key.cpu(), 2, out_dtype))
    assert out.dtype == out_dtype and torch.equal(out.cpu(), twin)
    g = torch.randn(77, 45, device="cuda").to(out_dtype)
    got = epi.backward(g, out, ep, None, torch.float32)
    ref = epi.backward(g.cpu(), twin, epi.Epilogue(True, 0.3, ep.key.cpu(), 2), None, torch.float32)
    assert torch.equal(got.cpu(), ref)


@needs_gpu
@pytest.mark.parametrize("autocast", [False, True], ids=["eager", "autocast"])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_gpu_fused_equals_separate_ops(f_in, f_out, precision, autocast, rng):
    """The forward bit for bit (the same fp32 arithmetic; the masks from ``keeps``), the
    gradients within the precision's tolerance (the fused gradient reaches the layer in the
    output's type)."""
    k = 4 if precision == "tf32" else 8
    a, _ = _adjacency(rng, 300, 280, k=k, device="cuda")
    feat = torch.randn(a.n_cols, f_in, device="cuda")
    weight, b = (t if t is None else t.cuda() for t in _params(f_in, f_out, torch.float32))
    proj = torch.randn(a.n_rows, f_out or f_in, device="cuda")
    key = torch.tensor([77, 3], device="cuda")
    dtype = torch.float16 if autocast else None
    ep = epi.Epilogue(True, 0.25, key, 1, dtype)

    def separate(x, w, b_):
        out = _separate(ops.graph_conv(a, x, w, b_, precision), True, 0.25, key, 1)
        return out if dtype is None else out.to(dtype)

    with torch.autocast("cuda", dtype=torch.float16, enabled=autocast):
        fused = _grads(
            lambda x, w, b_: ops.graph_conv(a, x, w, b_, precision, epilogue=ep),
            feat,
            weight,
            b,
            proj,
        )
        ref = _grads(separate, feat, weight, b, proj)
    assert fused[0].dtype == ref[0].dtype and torch.equal(fused[0], ref[0])
    tol = 3e-3 if autocast else TOLERANCE[precision]
    for got, want in zip(fused[1:], ref[1:]):
        assert (got is None) == (want is None)
        if got is not None:
            assert rel_err(got, want) <= tol


def _train(model, g, x, y, steps):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(g, x).float(), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).cpu()


@needs_gpu
def test_gpu_training_replays_and_draws_new_masks_each_step(rng):
    """GCN with the fused epilogue, dropout 0.5, its layers replayed from CUDA graphs: the
    same losses as without replay (the eager bits), and the key advanced once a step."""
    g = _graph(rng, n=500, edges=4000).add_self_loops().to("cuda")
    x = torch.randn(g.num_nodes, 32, device="cuda")
    y = torch.randint(0, 5, (g.num_nodes,), device="cuda")
    runs = []
    for replay in (True, False):
        torch.manual_seed(3)
        model = set_replay(GCN(32, 64, 5, num_layers=3, dropout=0.5).cuda(), replay)
        runs.append((_train(model, g, x, y, 8), model))
    (replayed, model), (eager, _) = runs
    assert model.layers[1].replay.graphs()[0] > 0
    assert torch.equal(replayed, eager)
    assert model.dropout_key[1].item() == 8
