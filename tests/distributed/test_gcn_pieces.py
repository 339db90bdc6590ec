"""The pieces of the distributed GCN without processes, against the ops they stand for
(float64, dense): the epilogue (projection, bias, ReLU, dropout by blocks of rows, one bit per
element kept) against the separate ops, the projection streamed by blocks against the whole
product (on the GPU, its copies ordered after the work queued before them), and the
aggregation over own and halo sources against the dense matrices, in place or not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn._torch_private import gpu_sleep
from flashgnn.distributed import epilogue as epilogue_module
from flashgnn.distributed import projection
from flashgnn.distributed.aggregation import Exchanges, SplitRows, aggregate
from flashgnn.distributed.epilogue import epilogue, pack_bits, unpack_bits
from flashgnn.distributed.full_graph import features_on_host
from flashgnn.distributed.projection import project
from flashgnn.distributed.shard import local_graph, rows_of_part
from tests.distributed.test_shard import as_dense, weighted_graph
from tests.helpers import needs_gpu

F64 = torch.float64


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 3 rows (of 10 float64 columns) in the epilogue and the host copies."""
    monkeypatch.setattr(epilogue_module, "ROW_BLOCK_BYTES", 3 * 4 * 10)
    monkeypatch.setattr(projection, "HOST_BLOCK_BYTES", 3 * 8 * 10)


def test_bits_round_trip():
    rng = np.random.default_rng(0)
    for width in (1, 7, 8, 13, 64):
        mask = torch.from_numpy(rng.random((5, width)) < 0.5)
        packed = pack_bits(mask)
        assert packed.dtype == torch.uint8 and packed.shape == (5, -(-width // 8))
        assert torch.equal(unpack_bits(packed, width), mask)


def _inputs(seed: int, rows: int = 11, width_in: int = 10, width_out: int = 10):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, width_in, generator=g, dtype=F64)
    weight = torch.randn(width_in, width_out, generator=g, dtype=F64)
    bias = torch.randn(width_out, generator=g, dtype=F64)
    grad = torch.randn(rows, width_out, generator=g, dtype=F64)
    return a, weight, bias, grad


@pytest.mark.parametrize("projected", [False, True])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_epilogue_equals_the_separate_ops(small_blocks, projected, relu, with_bias):
    a, weight, bias, grad = _inputs(1)
    leaves = [t.clone().requires_grad_() for t in (a, weight, bias)]
    y = leaves[0] @ leaves[1] if projected else leaves[0]
    y = y + leaves[2] if with_bias else y
    ref = torch.relu(y) if relu else y
    ref.backward(grad)
    mine = [t.clone().requires_grad_() for t in (a, weight, bias)]
    out = epilogue(
        mine[0],
        mine[1] if projected else None,
        mine[2] if with_bias else None,
        relu,
        0.0,
        None,
        F64,
    )
    out.backward(grad)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    for ours, theirs, used in zip(mine, leaves, (True, projected, with_bias)):
        if used:
            assert torch.allclose(ours.grad, theirs.grad, rtol=1e-12, atol=1e-12)
        else:
            assert ours.grad is None


@pytest.mark.parametrize("relu", [False, True])
def test_epilogue_dropout_keeps_the_mask_it_drew(small_blocks, relu):
    """Dropout's mask (recovered from the output: the inputs are never 0) scales the kept
    elements by 1 / (1 - p) forward and backward; about p of them are dropped."""
    a, weight, bias, grad = _inputs(2, rows=40)
    mine = [t.clone().requires_grad_() for t in (a, weight, bias)]
    torch.manual_seed(3)
    out = epilogue(*mine, relu, 0.25, None, F64)
    out.backward(grad)
    leaves = [t.clone().requires_grad_() for t in (a, weight, bias)]
    y = leaves[0] @ leaves[1] + leaves[2]
    y = torch.relu(y) if relu else y
    kept = (out != 0).to(F64)
    ref = y * kept / 0.75
    ref.backward(grad)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(mine, leaves):
        assert torch.allclose(ours.grad, theirs.grad, rtol=1e-12, atol=1e-12)
    dropped = float((out == 0).double().mean()) if not relu else None
    assert dropped is None or 0.1 < dropped < 0.4


@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_epilogue_then_the_next_weight_equals_the_two_steps(small_blocks, dropout):
    """With ``then``, the result times the next layer's weight, made block by block and made
    again in the backward: the epilogue followed by the product, the same dropout masks."""
    a, weight, bias, _ = _inputs(8, rows=17)
    then = torch.randn(10, 4, dtype=F64)
    grad = torch.randn(17, 4, dtype=F64)
    results = []
    for fused in (False, True):
        leaves = [t.clone().requires_grad_() for t in (a, weight, bias, then)]
        torch.manual_seed(9)
        if fused:
            out = epilogue(*leaves[:3], True, dropout, None, F64, then=leaves[3])
        else:
            out = epilogue(*leaves[:3], True, dropout, None, F64) @ leaves[3]
        out.backward(grad)
        results.append((out, [t.grad for t in leaves]))
    (two_steps, grads), (fused, fused_grads) = results
    assert torch.allclose(fused, two_steps, rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(fused_grads, grads):
        assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    if dropout == 0:
        ref = torch.relu(a @ weight + bias) @ then
        assert torch.allclose(fused, ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="then needs a weight"):
        epilogue(a, None, bias, True, 0.0, None, F64, then=then)


def test_epilogue_writes_into_the_next_type_and_reuses_the_gradient(small_blocks):
    a, _, bias, grad = _inputs(4)
    a32 = a.float().requires_grad_()
    out = epilogue(a32, None, bias.float(), True, 0.0, torch.float16, torch.float32)
    assert out.dtype == torch.float16
    assert torch.equal(out, torch.relu(a32 + bias.float()).half())
    incoming = grad.half()
    expected = (incoming.float() * (out > 0)).float()
    a16 = a.half().requires_grad_()
    reused = epilogue(a16, None, None, True, 0.0, None, torch.float16, reuse_grad=True)
    (d_a,) = torch.autograd.grad(reused, a16, incoming)
    assert d_a.data_ptr() == incoming.data_ptr()  # written into the incoming gradient
    assert torch.equal(d_a, (incoming.float() * (a16 > 0)).half())
    out.backward(grad.half())
    assert torch.equal(a32.grad, expected)


def test_projection_streamed_by_blocks_equals_the_whole_product(small_blocks):
    x, weight, _, _ = _inputs(5, rows=11, width_out=4)
    grad = torch.randn(11, 4, dtype=F64)
    results = []
    for host in (False, True):
        w = weight.clone().requires_grad_()
        out = project(x, w, torch.device("cpu"), F64, host)
        out.backward(grad)
        results.append((out, w.grad))
    (whole, d_whole), (streamed, d_streamed) = results
    assert torch.allclose(streamed, whole, rtol=1e-12, atol=0)
    assert torch.allclose(d_streamed, d_whole, rtol=1e-12, atol=0)
    assert torch.allclose(whole, x @ weight, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="take no gradient"):
        project(x.clone().requires_grad_(), weight, torch.device("cpu"), F64, True)


@needs_gpu
def test_host_copies_wait_for_the_work_queued_before_them():
    """The copy buffers take memory the allocator has just taken back from a tensor that a
    kernel still queued on the compute stream writes: the copies into them wait for it."""
    device = torch.device("cuda")
    x = projection.host_buffer((4096, 64), torch.float32, device)
    x.copy_(torch.randn(4096, 64))
    stale = torch.empty((4096, 64), device=device)  # a buffer's size: one block
    gpu_sleep(50_000_000)  # tens of milliseconds: the copy would long be done
    stale.fill_(7.0)
    del stale
    blocks = [b.clone() for _, _, b in projection.streamed(x, device, torch.float32, True)]
    assert torch.equal(torch.cat(blocks).cpu(), x)


@pytest.mark.parametrize("in_place", [False, True])
def test_aggregation_over_own_and_halo_sources(in_place):
    graph = weighted_graph(30, 160, seed=6).add_self_loops()
    identity = torch.arange(30)
    indptr, indices, weight = rows_of_part(graph, identity, identity, 10, 20)
    local, halo_ids = local_graph(indptr, indices, weight, 10, 20, "cpu")
    degrees = graph.out_degrees()[torch.cat([torch.arange(10, 20), halo_ids])]
    rows = SplitRows.build(local, 10, degrees, "both", 8)
    g = torch.Generator().manual_seed(7)
    h = torch.randn(10, 6, generator=g, dtype=F64)
    h_halo = torch.randn(halo_ids.numel(), 6, generator=g, dtype=F64)
    grad = torch.randn(10, 6, generator=g, dtype=F64)
    own, halo = as_dense(rows.own), as_dense(rows.halo)
    leaf, leaf_halo = h.clone().requires_grad_(), h_halo.clone().requires_grad_()
    start = leaf * 1.0 if in_place else leaf  # an intermediate may be overwritten, a leaf not
    out = aggregate(start, rows, Exchanges(None, True), "fp32", leaf_halo, in_place)
    out.backward(grad.clone())  # in place, the backward writes into the gradient it is given
    assert torch.allclose(out, own @ h + halo @ h_halo, rtol=1e-12, atol=1e-12)
    assert (out.data_ptr() == start.data_ptr()) == in_place
    assert torch.allclose(leaf.grad, own.t() @ grad, rtol=1e-12, atol=1e-12)
    assert torch.allclose(leaf_halo.grad, halo.t() @ grad, rtol=1e-12, atol=1e-12)


def test_features_stay_on_the_host_as_placed():
    cpu = torch.device("cpu")
    assert features_on_host("host", 10, cpu) and not features_on_host("device", 10**12, cpu)
    assert not features_on_host("auto", 10**12, cpu)  # on the CPU the device is the host
    with pytest.raises(ValueError, match="features must be one of"):
        features_on_host("gpu", 10, cpu)
