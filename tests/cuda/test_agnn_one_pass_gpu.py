"""The one-pass AGNN attention kernel (kernels/agnn_one_pass.cu) on the GPU: forward, row
statistics and the backward that recomputes P, against a float64 reference (the CPU path in
float64, its operands rounded to the precision) and the three-kernel GPU path, on random graphs
with hub rows (windows split over segments), empty rows and n not a multiple of 8, and on the
shared graphs; its peak memory against the three-kernel path's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import ops
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.ops import PRECISIONS, agnn_one_pass
from flashgnn.ops.agnn import _operands
from flashgnn.ops.agnn_one_pass import one_pass_attention, one_pass_reference
from tests.helpers import GPU, graph_params, load_npz_graph, rel_err

pytestmark = GPU

BOUND = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}


def hub_graph(rng, n=4003, degree=6, hubs=(5, 2000), hub_degree=3500, empty=(0, 17, 4002)):
    """indptr, indices (int64) of an n x n pattern: ``degree`` random columns per row, the rows
    ``hubs`` with ``hub_degree`` (their windows split over many segments), the rows ``empty``
    without any; n not a multiple of 8."""
    rows = [np.repeat(np.arange(n), degree)]
    cols = [rng.integers(0, n, n * degree)]
    for h in hubs:
        rows.append(np.full(hub_degree, h))
        cols.append(rng.choice(n, hub_degree, replace=False))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    keep = ~np.isin(rows, empty)
    key = np.unique(rows[keep].astype(np.int64) * n + cols[keep])
    rows, cols = key // n, key % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, rows + 1, 1)
    return np.cumsum(indptr), cols


def formats(indptr, indices, n, k):
    """(CPU, CUDA) ME-BCRS of one pattern."""
    cpu = MEBCRS.from_csr(torch.from_numpy(indptr), torch.from_numpy(indices), n_cols=n, k=k)
    return cpu, cpu.to("cuda")


def run(a, feat, beta, precision, proj, one_pass, monkeypatch, feat_dst=None):
    """(out, d feat, d beta[, d feat_dst]) of agnn_propagate on the chosen path."""
    monkeypatch.setattr(agnn_one_pass, "ONE_PASS", one_pass)
    inputs = [feat.clone().requires_grad_(), beta.clone().requires_grad_()]
    if feat_dst is not None:
        inputs.append(feat_dst.clone().requires_grad_())
    out = ops.agnn_propagate(a, inputs[0], inputs[1], precision, feat_dst=(inputs[2:] or [None])[0])
    return (out.detach(), *torch.autograd.grad((out.float() * proj).sum(), inputs))


def check_against_both(cpu, gpu, feat, beta, precision, proj, monkeypatch, feat_dst=None):
    """The one-pass GPU path against the float64 reference and the three-kernel GPU path."""
    double = (None if t is None else t.double() for t in (feat, beta, proj, feat_dst))
    f64, b64, p64, d64 = double
    ref = run(cpu, f64, b64, precision, p64, False, monkeypatch, d64)
    cuda = (None if t is None else t.cuda() for t in (feat, beta, proj, feat_dst))
    fc, bc, pc, dc = cuda
    three = run(gpu, fc, bc, precision, pc, False, monkeypatch, dc)
    one = run(gpu, fc, bc, precision, pc, True, monkeypatch, dc)
    assert one[0].dtype == feat.dtype
    names = ("out", "d feat", "d beta", "d feat_dst")
    for name, o, t, r in zip(names, one, three, ref):
        assert rel_err(o, r) <= BOUND[precision], f"{name} vs float64"
        # two approximations, each within the bound of float64
        assert rel_err(o, t) <= 2 * BOUND[precision], f"{name} vs three kernels"


@pytest.mark.parametrize("n_features", [1, 7, 32, 64, 128, 130])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_random_hub_graph(precision, n_features, rng, monkeypatch):
    n = 4003
    cpu, gpu = formats(*hub_graph(rng, n), n, 4 if precision == "tf32" else 8)
    feat = torch.randn(n, n_features)
    feat[9] = 0.0  # a zero row: its norm is clamped
    proj = torch.randn(n, n_features)
    check_against_both(cpu, gpu, feat, torch.tensor([1.3]), precision, proj, monkeypatch)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_statistics(precision, rng):
    """The row max and sum against the torch twin's in float64; empty rows -inf and 0."""
    n = 4003
    indptr, indices = hub_graph(rng, n)
    cpu, gpu = formats(indptr, indices, n, 4 if precision == "tf32" else 8)
    x = torch.randn(n, 40)
    beta = torch.tensor([2.0])
    unit, x_k, _, unit_dst, _ = _operands(x.cuda(), None, n, precision)
    out, row_max, row_sum = one_pass_attention(
        (gpu.row_ptr, gpu.col_idx, gpu.vec_mask), unit_dst, unit, x_k, beta.cuda(), n, gpu.k,
        precision, torch.float32,
    )  # fmt: skip
    ref_unit, ref_x = unit.cpu().double(), x_k.cpu().double()
    ref = one_pass_reference(
        cpu.row_ptr, cpu.col_idx, cpu.vec_mask, ref_unit, ref_unit, ref_x, beta.double(), n,
        cpu.k, precision,
    )  # fmt: skip
    empty = torch.from_numpy(np.diff(indptr) == 0)
    assert torch.isinf(row_max.cpu()[empty]).all() and (row_sum.cpu()[empty] == 0).all()
    assert (out.cpu()[empty] == 0).all()
    for name, got, want in zip(("out", "max", "sum"), (out, row_max, row_sum), ref):
        got, want = got.cpu()[~empty], want[~empty]
        assert rel_err(got, want) <= BOUND[precision], name


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_feat_dst(precision, rng, monkeypatch):
    """Destinations of their own (a bipartite block): 1001 x 4003."""
    n_dst, n = 1001, 4003
    indptr, indices = hub_graph(rng, n)
    indptr = indptr[: n_dst + 1]
    indices = indices[: indptr[-1]]
    cpu, gpu = formats(indptr, indices, n, 8)
    feat, feat_dst = torch.randn(n, 33), torch.randn(n_dst, 33)
    proj = torch.randn(n_dst, 33)
    check_against_both(cpu, gpu, feat, torch.tensor([0.7]), precision, proj, monkeypatch, feat_dst)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_features(dtype, rng, monkeypatch):
    """feat stored in 16 bits: the kernel writes the output in feat's dtype."""
    n = 4003
    cpu, gpu = formats(*hub_graph(rng, n), n, 8)
    precision = "fp16" if dtype == torch.float16 else "bf16"
    feat = torch.randn(n, 64).to(dtype)
    proj = torch.randn(n, 64)
    monkeypatch.setattr(agnn_one_pass, "ONE_PASS", True)
    got = run(gpu, feat.cuda(), torch.tensor([1.1]).cuda(), precision, proj.cuda(), True,
              monkeypatch)  # fmt: skip
    ref = run(cpu, feat.double(), torch.tensor([1.1]).double(), precision, proj.double(), False,
              monkeypatch)  # fmt: skip
    assert got[0].dtype == dtype and got[1].dtype == dtype
    for name, g, r in zip(("out", "d feat", "d beta"), got, ref):
        assert rel_err(g, r) <= 1e-2, name


@pytest.mark.parametrize("name", graph_params())
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_shared_graphs(name, precision, monkeypatch):
    adj = load_npz_graph(name)
    n = adj.shape[0]
    indptr, indices = adj.indptr.astype(np.int64), adj.indices.astype(np.int64)
    cpu, gpu = formats(indptr, indices, n, 8)
    torch.manual_seed(0)
    feat = torch.randn(n, 32)
    proj = torch.randn(n, 32)
    check_against_both(cpu, gpu, feat, torch.tensor([1.0]), precision, proj, monkeypatch)


def test_peak_memory_below_three_kernels(rng, monkeypatch):
    """On 1.2M nonzeros the one-pass forward (with what it keeps for the backward) peaks lower
    than the three-kernel path's, which writes and keeps the cosines and P."""
    n = 200_003
    indptr, indices = hub_graph(rng, n, degree=6, hubs=(5,), hub_degree=20_000, empty=(1,))
    a = MEBCRS.from_csr(torch.from_numpy(indptr), torch.from_numpy(indices), n_cols=n, k=8)
    a = a.to("cuda")
    assert a.nnz >= 1_000_000
    feat = torch.randn(n, 64, device="cuda", requires_grad=True)
    beta = torch.tensor([1.0], device="cuda", requires_grad=True)
    peaks = {}
    for one_pass in (False, True):
        monkeypatch.setattr(agnn_one_pass, "ONE_PASS", one_pass)
        ops.agnn_propagate(a, feat, beta, "fp16").sum().backward()  # warm up: kernels, A^T
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = ops.agnn_propagate(a, feat, beta, "fp16")
        torch.cuda.synchronize()
        peaks[one_pass] = torch.cuda.max_memory_allocated() - base
        del out
    assert peaks[True] < peaks[False], peaks
