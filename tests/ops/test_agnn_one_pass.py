"""The one-pass AGNN attention (ops/agnn_one_pass.py) on the CPU: its torch twin of the kernel's
algorithm against the three-kernel path's references (float64: 1e-12), the switch, the backward
that recomputes P from the row statistics, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import ops
from flashgnn._cuda.agnn_one_pass import agnn_one_pass_cuda, lane_features
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.ops import PRECISIONS, agnn_one_pass
from flashgnn.ops.agnn import _operands
from flashgnn.ops.agnn_one_pass import one_pass_enabled, one_pass_reference
from flashgnn.ops.reference import _coords
from tests.helpers import rel_err


def hub_graph(rng, n_rows=45, n_cols=61, hub=300, empty=(2, 9, 10)):
    """A random n_rows x n_cols pattern (n_rows not a multiple of 8) with one hub row of ``hub``
    nonzeros (capped by n_cols) and the rows ``empty`` without any."""
    dense = rng.random((n_rows, n_cols)) < 0.15
    dense[7, rng.choice(n_cols, min(hub, n_cols), replace=False)] = True
    dense[list(empty)] = False
    rows, cols = np.nonzero(dense)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.add.at(indptr, rows + 1, 1)
    return np.cumsum(indptr), cols.astype(np.int64)


def adjacency(rng, k=8, **kw) -> MEBCRS:
    indptr, indices = hub_graph(rng, **kw)
    n_cols = kw.get("n_cols", 61)
    return MEBCRS.from_csr(torch.from_numpy(indptr), torch.from_numpy(indices), n_cols=n_cols, k=k)


@pytest.fixture
def one_pass(monkeypatch):
    monkeypatch.setattr(agnn_one_pass, "ONE_PASS", True)


def _run(a, feat, beta, precision, proj, feat_dst=None):
    feat = feat.clone().requires_grad_()
    beta = beta.clone().requires_grad_()
    inputs = [feat, beta]
    if feat_dst is not None:
        feat_dst = feat_dst.clone().requires_grad_()
        inputs.append(feat_dst)
    out = ops.agnn_propagate(a, feat, beta, precision, feat_dst=feat_dst)
    return (out.detach(), *torch.autograd.grad((out * proj).sum(), inputs))


def _both_paths(monkeypatch, *args, **kw):
    monkeypatch.setattr(agnn_one_pass, "ONE_PASS", False)
    three = _run(*args, **kw)
    monkeypatch.setattr(agnn_one_pass, "ONE_PASS", True)
    return three, _run(*args, **kw)


@pytest.mark.parametrize("with_dst", [False, True])
@pytest.mark.parametrize("k", [8, 4])
def test_float64_matches_three_kernel_path(monkeypatch, rng, k, with_dst):
    """Forward and every gradient within 1e-12 of the three-kernel path in float64."""
    a = adjacency(rng, k=k)
    f = 7
    feat = torch.randn(61, f, dtype=torch.float64)
    feat[4] = 0.0  # a zero row: its norm is clamped
    feat_dst = torch.randn(45, f, dtype=torch.float64) if with_dst else None
    beta = torch.tensor([1.7], dtype=torch.float64)
    proj = torch.randn(45, f, dtype=torch.float64)
    three, one = _both_paths(monkeypatch, a, feat, beta, "fp32", proj, feat_dst=feat_dst)
    for name, x, y in zip(("out", "d feat", "d beta", "d feat_dst"), one, three):
        assert (x - y).abs().max().item() <= 1e-12 * max(y.abs().max().item(), 1.0), name


@pytest.mark.parametrize("block", [1, 3, 8, 32, 1000])
def test_reference_any_block_equals_the_softmax(rng, block):
    """The online softmax over blocks of any size: the statistics are the row max and sum of
    exp(s - max), the output P @ X, all within 1e-12 of the direct computation."""
    a = adjacency(rng)
    x = torch.randn(61, 5, dtype=torch.float64)
    unit = torch.nn.functional.normalize(x, dim=-1)
    beta = torch.tensor([2.5], dtype=torch.float64)
    pattern = (a.row_ptr, a.col_idx, a.vec_mask)
    out, row_max, row_sum = one_pass_reference(
        *pattern, unit[:45], unit, x, beta, 45, a.k, "fp32", block=block
    )
    dense = torch.full((45, 61), float("-inf"), dtype=torch.float64)
    c = _coords(*pattern, a.k)
    dense[c.row, c.col] = 0.0
    s = beta * unit[:45] @ unit.T + dense
    want_max = s.max(1).values
    filled = torch.isfinite(want_max)
    assert torch.equal(torch.isfinite(row_max), filled)  # -inf on the empty rows
    assert (row_max[filled] - want_max[filled]).abs().max() <= 1e-12
    e = torch.exp(s[filled] - want_max[filled, None])
    assert (row_sum[filled] - e.sum(1)).abs().max() <= 1e-12 * e.sum(1).max()
    assert torch.equal(row_sum[~filled], torch.zeros(int((~filled).sum()), dtype=torch.float64))
    want = torch.zeros(45, 5, dtype=torch.float64)
    want[filled] = (e / e.sum(1, keepdim=True)) @ x
    assert (out - want).abs().max() <= 1e-12
    assert torch.equal(out[~filled], want[~filled])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_float32_precisions_near_three_kernel_path(monkeypatch, rng, precision):
    """The twin rounds the operands as the three-kernel path does but keeps P in fp32: within
    the precision's tolerance of that path."""
    a = adjacency(rng, k=4 if precision == "tf32" else 8)
    feat = torch.randn(61, 12)
    beta = torch.tensor([0.9])
    proj = torch.randn(45, 12)
    three, one = _both_paths(monkeypatch, a, feat, beta, precision, proj)
    tol = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}[precision]
    for name, x, y in zip(("out", "d feat", "d beta"), one, three):
        assert rel_err(x, y) <= tol, name


def test_gradcheck(one_pass, rng):
    a = adjacency(rng, n_rows=21, n_cols=21, hub=15, empty=(3,))
    feat = torch.randn(21, 4, dtype=torch.float64, requires_grad=True)
    beta = torch.tensor([1.3], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b: ops.agnn_propagate(a, x, b), (feat, beta))
    assert torch.autograd.gradgradcheck(lambda x, b: ops.agnn_propagate(a, x, b), (feat, beta))


def test_switch(monkeypatch):
    monkeypatch.setattr(agnn_one_pass, "ONE_PASS", None)
    monkeypatch.delenv(agnn_one_pass.ENV, raising=False)
    assert not one_pass_enabled()  # off by default
    monkeypatch.setenv(agnn_one_pass.ENV, "1")
    assert one_pass_enabled()
    monkeypatch.setenv(agnn_one_pass.ENV, "0")
    assert not one_pass_enabled()
    monkeypatch.setattr(agnn_one_pass, "ONE_PASS", True)
    assert one_pass_enabled()


def test_switch_takes_the_one_pass_path(monkeypatch, rng):
    """With the switch on, the forward computes no edge-sized tensor: the three-kernel path's
    SDDMM is not called."""
    a = adjacency(rng)
    calls = []
    monkeypatch.setattr(
        ops.agnn, "_sddmm", lambda *args: calls.append(args) or pytest.fail("SDDMM called")
    )
    monkeypatch.setattr(agnn_one_pass, "ONE_PASS", True)
    out = ops.agnn_propagate(a, torch.randn(61, 3), torch.tensor([1.0]))
    assert out.shape == (45, 3) and not calls


def test_lane_features():
    assert [lane_features(f) for f in (1, 32, 33, 64, 65, 128, 129, 1000)] == [
        1,
        1,
        2,
        2,
        4,
        4,
        4,
        4,
    ]


def test_bad_input(rng):
    a = adjacency(rng)
    pattern = (a.row_ptr, a.col_idx, a.vec_mask)
    x = torch.randn(61, 4)
    unit, _, _, unit_dst, _ = _operands(x, None, 45, "fp32")
    beta = torch.tensor([1.0])
    with pytest.raises(ValueError, match="block must be at least 1"):
        one_pass_reference(*pattern, unit_dst, unit, x, beta, 45, a.k, "fp32", block=0)
    with pytest.raises(ValueError, match="x must be a contiguous torch.float16"):
        agnn_one_pass_cuda(*pattern, unit_dst.half(), unit.half(), x, beta, 45, "fp16", x.dtype)
    with pytest.raises(ValueError, match="unit_dst must be a contiguous"):
        agnn_one_pass_cuda(*pattern, unit_dst[:-1], unit, x, beta, 45, "fp32", x.dtype)
    with pytest.raises(ValueError, match="unit and x must have one row per column"):
        agnn_one_pass_cuda(*pattern, unit_dst, unit[:-1], x, beta, 45, "fp32", x.dtype)
    with pytest.raises(ValueError, match="beta must be a float32"):
        agnn_one_pass_cuda(*pattern, unit_dst, unit, x, beta.double(), 45, "fp32", x.dtype)
    with pytest.raises(ValueError, match="out_dtype must be"):
        agnn_one_pass_cuda(*pattern, unit_dst, unit, x, beta, 45, "fp32", torch.int32)
