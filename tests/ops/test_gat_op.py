"""ops.gat_attention (one autograd node with a written-out backward) against dense float64
maths, against the composition of the public sddmm, edge_softmax, dropout and spmm ops (which
autograd differentiates) in every precision, with dropout and edge values; float64 gradcheck;
what the node keeps for its backward; GPU kernels against the composition."""

from __future__ import annotations

import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from flashgnn import ops
from flashgnn.ops import PRECISIONS
from flashgnn.ops import gat as gat_module
from flashgnn.ops.precision import half_storage
from flashgnn.ops.replay import NodeReplay
from flashgnn.precision_context import block_width
from tests.helpers import GPU, mebcrs_of, needs_gpu, random_csr, rel_err, without_rows

BOUND = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}


def _adjacency(rng, n=45, k=8, device="cpu", empty_row=None):
    a = (random_csr(n, n, 0.12, rng) + sp.eye(n)).tocsr()  # directed, with self-loops
    if empty_row is not None:
        a = without_rows(a, empty_row)
    a.sort_indices()
    return mebcrs_of(a, k, device), a


def _gat(a, ft, terms, *args, **kwargs):
    """ops.gat_attention with er and el the columns of terms [N, 2]."""
    return ops.gat_attention(a, ft, terms[:, :1], terms[:, 1:], *args, **kwargs)


def _composed(a, ft, terms, slope, drop, precision, edge_values=None):
    return _gat(
        a, ft, terms, slope, drop, precision, edge_values=edge_values, return_attention=True
    )[0]


def _run(fn, a, ft, terms, precision, proj, drop=0.0, edge_values=None, seed=0):
    ft = ft.clone().requires_grad_()
    terms = terms.clone().requires_grad_()
    torch.manual_seed(seed)  # the same dropout draws for both paths
    out = fn(a, ft, terms, 0.15, drop, precision, edge_values=edge_values)
    grads = torch.autograd.grad((out * proj).sum(), [ft, terms])
    return (out.detach(), *grads)


def test_float64_matches_dense_attention(rng):
    a, csr = _adjacency(rng, n=30, empty_row=4)
    ft = torch.randn(30, 6, dtype=torch.float64)
    terms = torch.randn(30, 2, dtype=torch.float64)
    out = _gat(a, ft, terms, 0.2)
    mask = torch.from_numpy(csr.toarray() != 0)
    scores = F.leaky_relu(terms[:, :1] + terms[:, 1:].t(), 0.2).masked_fill(~mask, float("-inf"))
    prob = torch.softmax(scores, 1).nan_to_num(0.0)  # row 4 has no neighbour: its output is 0
    assert rel_err(out, prob @ ft) <= 1e-12
    assert torch.equal(out[4], torch.zeros(6, dtype=torch.float64))


def test_float64_gradients_match_dense_attention(rng):
    """float64 gradients stay float64: er's, summed over rows, as el's over columns."""
    a, csr = _adjacency(rng, n=30, empty_row=4)
    ft = torch.randn(30, 6, dtype=torch.float64, requires_grad=True)
    terms = torch.randn(30, 2, dtype=torch.float64, requires_grad=True)
    proj = torch.randn(30, 6, dtype=torch.float64)
    got = torch.autograd.grad((_gat(a, ft, terms, 0.2) * proj).sum(), [ft, terms])
    mask = torch.from_numpy(csr.toarray() != 0)
    scores = F.leaky_relu(terms[:, :1] + terms[:, 1:].t(), 0.2).masked_fill(~mask, float("-inf"))
    prob = torch.softmax(scores, 1).nan_to_num(0.0)
    want = torch.autograd.grad((prob @ ft * proj).sum(), [ft, terms])
    for g, w in zip(got, want):
        assert g.dtype == torch.float64 and rel_err(g, w) <= 1e-12


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_matches_the_composed_ops(precision, k, rng):
    a, _ = _adjacency(rng, k=k)
    ft, terms, proj = torch.randn(a.n_rows, 12), torch.randn(a.n_rows, 2), torch.randn(a.n_rows, 12)
    fused = _run(_gat, a, ft, terms, precision, proj)
    composed = _run(_composed, a, ft, terms, precision, proj)
    for name, f, c in zip(("out", "d ft", "d terms"), fused, composed):
        assert rel_err(f, c) <= 1e-5, name


@pytest.mark.parametrize("with_values", [False, True], ids=["plain", "edge values"])
def test_dropout_and_edge_values_match_the_composed_ops(with_values, rng):
    """Both paths draw the same dropout mask from the same seed (torch.native_dropout is what
    F.dropout runs), so the results agree; the dropout does change the result."""
    a, _ = _adjacency(rng)
    ft, terms, proj = torch.randn(a.n_rows, 7), torch.randn(a.n_rows, 2), torch.randn(a.n_rows, 7)
    values = torch.rand(a.n_slots) + 0.5 if with_values else None
    fused = _run(_gat, a, ft, terms, "fp32", proj, drop=0.4, edge_values=values)
    composed = _run(_composed, a, ft, terms, "fp32", proj, drop=0.4, edge_values=values)
    undropped = _run(_gat, a, ft, terms, "fp32", proj, edge_values=values)
    for name, f, c in zip(("out", "d ft", "d terms"), fused, composed):
        assert rel_err(f, c) <= 1e-6, name
    assert rel_err(fused[0], undropped[0]) > 0.1


@pytest.mark.parametrize(
    "precision, dtype",
    [
        ("fp16", torch.float32),
        ("fp16", torch.float16),
        ("bf16", torch.float32),
        ("bf16", torch.bfloat16),
    ],
)
def test_16_bit_kernel_operands_change_nothing(precision, dtype, rng, monkeypatch):
    """On CUDA the node hands fp32 features to the kernels converted to 16 bits; converting
    them on the CPU too must give the very same results and dtypes (the reference rounds its
    inputs the same way), so an fp32 result is not rounded through the storage type."""
    a, _ = _adjacency(rng)
    ft, terms, proj = (
        torch.randn(a.n_rows, 9).to(dtype),
        torch.randn(a.n_rows, 2),
        torch.randn(a.n_rows, 9).to(dtype),
    )
    plain = _run(_gat, a, ft, terms, precision, proj, drop=0.3)
    storage = half_storage(precision)
    monkeypatch.setattr(
        gat_module,
        "kernel_operands",
        lambda p, *ts: [
            t.to(storage) if t is not None and t.dtype == torch.float32 else t for t in ts
        ],
    )
    converted = _run(_gat, a, ft, terms, precision, proj, drop=0.3)
    for p, c in zip(plain, converted):
        assert p.dtype == c.dtype and torch.equal(p, c)


def test_gradcheck(rng):
    a, _ = _adjacency(rng, n=21, empty_row=2)
    ft = torch.randn(a.n_rows, 3, dtype=torch.float64, requires_grad=True)
    terms = torch.randn(a.n_rows, 2, dtype=torch.float64, requires_grad=True)
    values = torch.rand(a.n_slots, dtype=torch.float64) + 0.5

    def fn(x, t):
        torch.manual_seed(0)  # one dropout mask for every evaluation
        return _gat(a, x, t, 0.1, 0.3, edge_values=values)

    assert torch.autograd.gradcheck(fn, (ft, terms))


@pytest.mark.parametrize("drop", [0.0, 0.3])
def test_a_replay_off_cuda_runs_eagerly(drop, rng):
    """Given a layer's NodeReplay on CPU tensors, the op captures nothing and gives the bits of
    a call without one (the same dropout draws from the same seed), call after call; float64
    gradcheck still passes through it."""
    a, _ = _adjacency(rng)
    ft, terms, proj = torch.randn(a.n_rows, 7), torch.randn(a.n_rows, 2), torch.randn(a.n_rows, 7)
    replay = NodeReplay(True)

    def replayed(*args, **kwargs):
        return _gat(*args, replay=replay, **kwargs)

    for seed in range(3):
        got = _run(replayed, a, ft, terms, "fp16", proj, drop=drop, seed=seed)
        want = _run(_gat, a, ft, terms, "fp16", proj, drop=drop, seed=seed)
        assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
    assert replay.graphs() == (0, 0) and repr(replay).endswith("configurations=0)")
    a64, _ = _adjacency(rng, n=21)
    x = torch.randn(a64.n_rows, 3, dtype=torch.float64, requires_grad=True)
    t = torch.randn(a64.n_rows, 2, dtype=torch.float64, requires_grad=True)

    def fn(x, t):
        torch.manual_seed(0)  # one dropout mask for every evaluation
        return _gat(a64, x, t, 0.1, drop, replay=replay)

    assert torch.autograd.gradcheck(fn, (x, t))


def test_keeps_one_slot_sized_tensor_and_the_mask(rng):
    """The node saves the softmax output (and the dropout mask, 1 byte a slot) of the tensors as
    large as A's value layout; the composition saves the scores, the softmax output, the
    mask and the dropped attention."""
    a, _ = _adjacency(rng)
    ft = torch.randn(a.n_rows, 8, requires_grad=True)
    terms = torch.randn(a.n_rows, 2, requires_grad=True)

    def saved_slot_tensors(return_attention):
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            _gat(a, ft, terms, 0.2, 0.5, return_attention=return_attention)
        return {(t.data_ptr(), str(t.dtype)) for t in saved if t.numel() == a.n_slots}

    assert sorted(dtype for _, dtype in saved_slot_tensors(False)) == [
        "torch.bool",
        "torch.float32",
    ]
    assert len(saved_slot_tensors(True)) >= 4


@needs_gpu
def test_gpu_keeps_no_slot_sized_tensor_without_dropout(rng):
    """On the kernels the backward computes P from 16-byte row records: without dropout the
    node keeps nothing the size of A's value layout; with it, P and the mask as on the CPU."""
    a, _ = _adjacency(rng)
    a = a.to("cuda")
    ft = torch.randn(a.n_rows, 8, device="cuda", requires_grad=True)
    terms = torch.randn(a.n_rows, 2, device="cuda", requires_grad=True)

    def saved_slot_tensors(drop):
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            _gat(a, ft, terms, 0.2, drop)
        return sorted(str(t.dtype) for t in saved if t.numel() == a.n_slots)

    assert saved_slot_tensors(0.0) == []
    assert saved_slot_tensors(0.5) == ["torch.bool", "torch.float32"]


def _hub_adjacency(rng, n=300, empty_window=False, k=8):
    """A square pattern (block width k) with a hub row and a hub column: windows of A and of A^T
    split over segments (on the GPU); with ``empty_window``, rows 16-23 without nonzeros."""
    _, m = _adjacency(rng, n=n)
    m = m.tolil()
    m[rng.choice(n, 250, replace=False), 7] = (
        1.0  # a hub column: its window of A^T split over segments
    )
    m[9, rng.choice(n, 290, replace=False)] = 1.0  # a hub row: its window of A split
    m = m.tocsr()
    if empty_window:
        m = without_rows(m, slice(16, 24))
    m.sort_indices()
    return mebcrs_of(m, k, "cuda")


@needs_gpu
@pytest.mark.parametrize("f_dim", [16, 33])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_gpu_fused_kernels_match_the_stored_attention_path(precision, f_dim, rng, monkeypatch):
    """Without dropout, on tensor cores: the forward's SpMM computes P and dH's P^T from the row
    records as they stage them (the softmax forward stores only the records), and the SDDMM
    sums the terms' gradients without storing dP or the scores' gradient. Against P written by
    the softmax, P^T by gat_softmax_transposed and dP by the SDDMM, read by the other kernels:
    the output and dH have the same bits; the terms' gradients are sums in another order."""
    a = _hub_adjacency(rng, k=block_width(precision))
    ft, terms, proj = (torch.randn(a.n_rows, f, device="cuda") for f in (f_dim, 2, f_dim))
    out, d_ft, d_terms = _run(_gat, a, ft, terms, precision, proj)
    monkeypatch.setattr(gat_module, "GAT_BLOCK_WIDTH", {})
    stored = _run(_gat, a, ft, terms, precision, proj)
    assert torch.equal(out, stored[0]) and torch.equal(d_ft, stored[1])
    assert rel_err(d_terms, stored[2]) < 1e-5


@needs_gpu
@pytest.mark.parametrize("k_dim", [5, 16, 64])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_gpu_terms_gradients_by_the_sddmm(precision, k_dim, rng):
    """gat_softmax_backward_tensor_core against the SDDMM's dP fed to gat_softmax_backward_cuda,
    whose gradient of the scores is summed per row and per column in float64: split windows of
    A and A^T and an empty window included; the same bits in two runs."""
    from flashgnn._cuda.edge_softmax import gat_softmax_backward_cuda, gat_softmax_cuda
    from flashgnn._cuda.sddmm import gat_softmax_backward_tensor_core, sddmm_tensor_core
    from flashgnn.formats.mebcrs import decode_slots

    a = _hub_adjacency(
        rng, n=330, empty_window=True
    )  # rows 328-329: a last window of two real rows
    t = a.transpose().fmt
    pattern, transposed = (a.row_ptr, a.col_idx, a.vec_mask), (t.row_ptr, t.col_idx, t.vec_mask)
    er, el = torch.randn(a.n_rows, device="cuda"), torch.randn(a.n_cols, device="cuda")
    grad, ft = (
        torch.randn(a.n_rows, k_dim, device="cuda"),
        torch.randn(a.n_cols, k_dim, device="cuda"),
    )
    _, records = gat_softmax_cuda(*pattern, er, el, 0.2, a.k, write=False)
    d_er, d_el = gat_softmax_backward_tensor_core(
        pattern, transposed, grad, ft, precision, el, records, 0.2
    )
    d_prob = sddmm_tensor_core(*pattern, grad, ft, a.k, precision)
    d, _ = gat_softmax_backward_cuda(*pattern, er, el, 0.2, records, d_prob, a.k)
    coords = decode_slots(*pattern, a.k)
    values = d[coords.slot].double()
    ref_er = torch.zeros(d_er.numel(), dtype=torch.float64, device="cuda").index_add_(
        0, coords.row, values
    )
    ref_el = torch.zeros(d_el.numel(), dtype=torch.float64, device="cuda").index_add_(
        0, coords.col, values
    )
    scale = values.abs().max()  # sums of terms of both signs: bound the error by the terms' size
    assert (d_er.double() - ref_er).abs().max() < 1e-5 * scale
    assert (d_el.double() - ref_el).abs().max() < 1e-5 * scale
    again = gat_softmax_backward_tensor_core(
        pattern, transposed, grad, ft, precision, el, records, 0.2
    )
    assert torch.equal(d_er, again[0]) and torch.equal(d_el, again[1])
    with pytest.raises(ValueError, match="fp16, bf16 or tf32"):
        gat_softmax_backward_tensor_core(pattern, transposed, grad, ft, "fp32", el, records, 0.2)
    with pytest.raises(ValueError, match="el must be"):
        gat_softmax_backward_tensor_core(
            pattern, transposed, grad, ft, precision, el[1:], records, 0.2
        )


def test_no_dropout_without_a_probability(rng):
    a, _ = _adjacency(rng)
    ft, terms = torch.randn(a.n_rows, 4), torch.randn(a.n_rows, 2)
    torch.manual_seed(1)
    first = _gat(a, ft, terms)
    torch.manual_seed(2)
    assert torch.equal(first, _gat(a, ft, terms))
    assert torch.equal(_gat(a, ft, terms, attn_drop=1.0), torch.zeros_like(first))


def test_bad_input(rng):
    a, _ = _adjacency(rng)
    ft, terms = torch.randn(a.n_rows, 4), torch.randn(a.n_rows, 2)
    with pytest.raises(ValueError, match=r"er and el must be columns \[N, 1\]"):
        ops.gat_attention(a, ft, terms, terms[:, 1:])
    with pytest.raises(ValueError, match="er must have"):
        _gat(a, ft, terms[:-1])
    with pytest.raises(ValueError, match="el must have 45 rows"):
        ops.gat_attention(a, ft, terms[:, :1], terms[:-2, 1:])
    with pytest.raises(ValueError, match="attn_drop must be a probability"):
        _gat(a, ft, terms, attn_drop=1.5)
    with pytest.raises(ValueError, match="edge_values must have shape"):
        _gat(a, ft, terms, edge_values=torch.ones(3))
    with pytest.raises(ValueError, match="precision must be one of"):
        _gat(a, ft, terms, precision="fp8")


@pytest.mark.parametrize("precision", [pytest.param(p, marks=GPU) for p in PRECISIONS])
def test_gpu_matches_the_composition(precision, rng):
    """On the GPU both paths draw the same mask too (F.dropout runs torch.native_dropout's
    kernel), and the node's kernels agree with the CPU path."""
    cpu, _ = _adjacency(rng, n=300, k=4 if precision == "tf32" else 8)
    gpu = cpu.to("cuda")
    ft, terms, proj = (
        torch.randn(cpu.n_rows, 33),
        torch.randn(cpu.n_rows, 2),
        torch.randn(cpu.n_rows, 33),
    )
    args = (ft.cuda(), terms.cuda(), precision, proj.cuda())
    for drop in (0.3, 0.0):  # P^T moved into A^T's layout, or computed there
        fused = _run(_gat, gpu, *args, drop=drop)
        composed = _run(_composed, gpu, *args, drop=drop)
        for name, f, c in zip(("out", "d ft", "d terms"), fused, composed):
            assert rel_err(f, c) <= 1e-5, (name, drop)
    ref = _run(_gat, cpu, ft, terms, precision, proj)
    got = _run(_gat, gpu, *args)
    for name, g, r in zip(("out", "d ft", "d terms"), got, ref):
        assert rel_err(g, r) <= BOUND[precision], name
