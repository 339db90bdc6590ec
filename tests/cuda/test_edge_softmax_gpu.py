"""Edge softmax kernels (kernels/edge_softmax.cu) against the float64 reference, through the
launchers and through the custom op with autograd; GAT's scores computed in the kernels
against the ops they stand for."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import flashgnn._cuda.edge_softmax as cuda_softmax
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.ops import edge_softmax, sddmm
from flashgnn.ops._pattern import transposed_values
from flashgnn.ops.reference import edge_softmax_backward_reference, edge_softmax_reference
from tests.cuda.kernel_cases import CASES
from tests.helpers import GPU

pytestmark = GPU


def gpu_format(a, k: int) -> MEBCRS:
    return MEBCRS.from_csr(
        a.indptr, a.indices, torch.from_numpy(a.data), n_cols=a.shape[1], k=k
    ).to("cuda")


def pattern(f: MEBCRS):
    return f.row_ptr, f.col_idx, f.vec_mask


def reference_forward(f: MEBCRS, scores: torch.Tensor) -> torch.Tensor:
    return edge_softmax_reference(
        *(t.cpu() for t in pattern(f)), scores.cpu().double(), f.n_rows, f.k
    )


def reference_backward(f: MEBCRS, probs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return edge_softmax_backward_reference(
        *(t.cpu() for t in pattern(f)), probs.cpu().double(), grad.cpu().double(), f.n_rows, f.k
    )


def real_slots(f: MEBCRS) -> torch.Tensor:
    real = torch.zeros(8 * f.n_vectors, dtype=torch.bool)
    real[f.perm.cpu()] = True
    return real


def nan_buffer(f: MEBCRS) -> torch.Tensor:
    return torch.full((8 * f.n_vectors,), float("nan"), device="cuda")


def assert_matches(
    got: torch.Tensor, ref: torch.Tensor, real: torch.Tensor, atol: float = 1e-7
) -> None:
    """fp32 result against the float64 reference; padding slots exactly 0. Backward values
    p * (g - dot) can cancel to near 0, hence a larger atol there."""
    got = got.cpu()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=2e-5, atol=atol)
    assert torch.equal(got[~real], torch.zeros(int((~real).sum()))), (
        "a padding slot is not exactly 0"
    )


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_backward_match_reference(case, k, rng):
    f = gpu_format(CASES[case](rng), k)
    real = real_slots(f)
    scores = torch.randn(8 * f.n_vectors, device="cuda") * 4
    probs = cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores, k, out=nan_buffer(f))
    assert_matches(probs, reference_forward(f, scores), real)

    grad = torch.randn(8 * f.n_vectors, device="cuda")
    d = cuda_softmax.edge_softmax_backward_cuda(
        f.row_ptr, f.vec_mask, probs, grad, k, out=nan_buffer(f)
    )
    assert_matches(d, reference_backward(f, probs, grad), real, atol=1e-6)


@pytest.mark.parametrize("case", ["hub_1003x20011", "square_61x61", "all_empty_10x5"])
def test_scale_read_on_the_device_equals_scaling_first(case, rng):
    """softmax(scale * s) with the scale applied in the kernel gives the bits of the kernel on
    the product computed by torch first (split hub windows included)."""
    f = gpu_format(CASES[case](rng), 8)
    scores = torch.randn(8 * f.n_vectors, device="cuda")
    for beta in (0.37, -2.5, 0.0):
        scale = torch.tensor([beta], device="cuda")
        scaled = cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores, 8, scale=scale)
        assert torch.equal(
            scaled, cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scale * scores, 8)
        )
    with pytest.raises(ValueError, match="scale must be a float32 tensor"):
        cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores, 8, scale=scale.double())


def test_hub_window_is_split_and_deterministic(rng):
    f = gpu_format(CASES["hub_1003x20011"](rng), 8)
    assert int(torch.diff(f.row_ptr).max()) > 256, "no window is long enough to be split over warps"
    scores = torch.randn(8 * f.n_vectors, device="cuda")
    first = cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores, 8)
    second = cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores, 8)
    assert torch.equal(first, second)
    # every real row sums to 1, the hub row included
    c = f.slot_coords()
    sums = torch.zeros(f.n_rows, dtype=torch.float64).index_add_(
        0, c.row.cpu(), first.cpu()[c.slot.cpu()].double()
    )
    has_entries = torch.bincount(c.row.cpu(), minlength=f.n_rows) > 0
    torch.testing.assert_close(
        sums[has_entries],
        torch.ones(int(has_entries.sum()), dtype=torch.float64),
        rtol=0,
        atol=1e-5,
    )


def test_op_runs_the_kernels_with_autograd(rng, monkeypatch):
    f = gpu_format(CASES["hub_1003x20011"](rng), 4)
    calls = []
    for name in ("edge_softmax_cuda", "edge_softmax_backward_cuda"):
        original = getattr(cuda_softmax, name)
        monkeypatch.setattr(
            cuda_softmax,
            name,
            lambda *a, _f=original, _n=name, **kw: calls.append(_n) or _f(*a, **kw),
        )
    scores = (torch.randn(8 * f.n_vectors, device="cuda") * 3).requires_grad_()
    grad = torch.randn(8 * f.n_vectors, device="cuda")
    probs = edge_softmax(f, scores)
    probs.backward(grad)
    assert calls == ["edge_softmax_cuda", "edge_softmax_backward_cuda"]
    real = real_slots(f)
    ref = reference_forward(f, scores.detach())
    assert_matches(probs.detach(), ref, real)
    assert_matches(scores.grad, reference_backward(f, ref, grad), real, atol=1e-6)


def test_half_scores_and_float64_fallback(rng):
    f = gpu_format(CASES["square_61x61"](rng), 8)
    for dtype in (torch.float16, torch.bfloat16):
        scores = torch.randn(8 * f.n_vectors, device="cuda").to(dtype)
        assert_matches(edge_softmax(f, scores), reference_forward(f, scores), real_slots(f))
    scores = torch.randn(8 * f.n_vectors, device="cuda", dtype=torch.float64)
    out = edge_softmax(f, scores)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out.cpu(), reference_forward(f, scores), rtol=1e-12, atol=1e-15)


def test_special_values_follow_the_reference(rng):
    f = gpu_format(CASES["square_61x61"](rng), 8)
    c = f.slot_coords()
    rows = c.row.cpu()
    scores = torch.randn(8 * f.n_vectors)
    busy = torch.bincount(rows).argmax()  # a row with several entries
    slots = c.slot.cpu()[rows == busy]
    scores[slots[0]] = float("-inf")  # an excluded neighbour: probability exactly 0
    other = rows[rows != busy][0]
    scores[c.slot.cpu()[rows == other][0]] = float("nan")  # poisons its row, as in the reference
    out = cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores.cuda(), 8).cpu()
    ref = reference_forward(f, scores)
    torch.testing.assert_close(out.double(), ref, rtol=2e-5, atol=1e-7, equal_nan=True)
    assert out[slots[0]] == 0 and torch.isfinite(out[slots[1:]]).all()


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_gat_scores_give_the_bits_of_the_ops(case, k, rng):
    """softmax(leaky_relu(er_i + el_j)) with the scores formed in the kernel, its backward
    through the leaky ReLU, and P^T computed in A^T's layout from the row records equal the
    rank-2 fp32 SDDMM, leaky ReLU, the stored-score kernels and moving P bit for bit (split hub
    windows included); every slot written; the backward's row sums match float64 sums and
    repeat their bits."""
    f = gpu_format(CASES[case](rng), k)
    slope = 0.15
    er = torch.randn(f.n_rows, device="cuda")
    el = torch.randn(f.n_cols, device="cuda")
    scores = sddmm(
        f,
        torch.stack([er, torch.ones_like(er)], 1),
        torch.stack([torch.ones_like(el), el], 1),
        "fp32",
    )
    probs = cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, F.leaky_relu(scores, slope), k)
    got, row_info = cuda_softmax.gat_softmax_cuda(
        f.row_ptr, f.col_idx, f.vec_mask, er, el, slope, k, out=nan_buffer(f)
    )
    assert torch.equal(got, probs)
    t = f.transpose()
    moved = transposed_values(probs, t.fmt.col_idx, t.fmt.perm, t.src_slot)
    computed = cuda_softmax.gat_softmax_transposed_cuda(
        t.fmt.row_ptr, t.fmt.col_idx, t.fmt.vec_mask, el, slope, row_info, k
    )
    real_t = real_slots(t.fmt).cuda()
    assert torch.equal(computed[real_t], moved[real_t])
    assert not computed[~real_t].any()

    grad = torch.randn(8 * f.n_vectors, device="cuda")
    d = cuda_softmax.edge_softmax_backward_cuda(f.row_ptr, f.vec_mask, probs, grad, k)
    want = torch.ops.aten.leaky_relu_backward(d, scores, slope, False)
    got, row_sums = cuda_softmax.gat_softmax_backward_cuda(
        f.row_ptr, f.col_idx, f.vec_mask, er, el, slope, row_info, grad, k, out=nan_buffer(f)
    )
    assert torch.equal(got, want)
    # its sums over each row (the gradient of er), split windows included, in a fixed order
    c = f.slot_coords()
    ref = torch.zeros(8 * (f.row_ptr.numel() - 1), dtype=torch.float64).index_add_(
        0, c.row.cpu(), want.cpu()[c.slot.cpu()].double()
    )
    torch.testing.assert_close(row_sums.cpu().double(), ref, rtol=1e-5, atol=1e-5)
    again = cuda_softmax.gat_softmax_backward_cuda(
        f.row_ptr, f.col_idx, f.vec_mask, er, el, slope, row_info, grad, k
    )
    assert torch.equal(again[1], row_sums)
    assert (scores[real_slots(f).cuda()] <= 0).any() or f.nnz == 0, "no score took the leaky branch"


def test_gat_terms_are_checked(rng):
    f = gpu_format(CASES["tall_100x7"](rng), 8)
    er, el = torch.randn(f.n_rows, device="cuda"), torch.randn(f.n_cols, device="cuda")
    args = (f.row_ptr, f.col_idx, f.vec_mask)
    with pytest.raises(ValueError, match="er must have one term per row"):
        cuda_softmax.gat_softmax_cuda(*args, er[:90], el, 0.2, 8)
    with pytest.raises(ValueError, match="el must be a 1-D float32 tensor"):
        cuda_softmax.gat_softmax_cuda(*args, er, el.double(), 0.2, 8)
    with pytest.raises(ValueError, match="col_idx must be int32"):
        cuda_softmax.gat_softmax_cuda(f.row_ptr, f.col_idx.long(), f.vec_mask, er, el, 0.2, 8)
    # strided terms (columns of a [N, 2] tensor) are read as their values
    terms = torch.stack([er, er + 1], 1)
    probs, row_info = cuda_softmax.gat_softmax_cuda(*args, er, el, 0.2, 8)
    assert torch.equal(cuda_softmax.gat_softmax_cuda(*args, terms[:, 0], el, 0.2, 8)[0], probs)
    t = f.transpose().fmt
    t_args = (t.row_ptr, t.col_idx, t.vec_mask)
    with pytest.raises(ValueError, match="el must have one term per row"):
        cuda_softmax.gat_softmax_transposed_cuda(*t_args, torch.cat([el, el]), 0.2, row_info, 8)
    with pytest.raises(ValueError, match="row_info must be gat_softmax_cuda's"):
        cuda_softmax.gat_softmax_transposed_cuda(*t_args, el, 0.2, row_info[:-1], 8)
    with pytest.raises(ValueError, match=r"row_info must be gat_softmax_cuda's \[104, 4\]"):
        cuda_softmax.gat_softmax_backward_cuda(*args, er, el, 0.2, row_info[:96], probs, 8)


@pytest.mark.parametrize("name", ["cora", "musae_github"])
def test_dataset_graph(name, load_graph, rng):
    a = load_graph(name)
    for k in (8, 4):
        f = gpu_format(a, k)
        scores = torch.randn(8 * f.n_vectors, device="cuda") * 4
        probs = cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores, k, out=nan_buffer(f))
        assert_matches(probs, reference_forward(f, scores), real_slots(f))


def test_bad_inputs_are_clear_errors(rng):
    f = gpu_format(CASES["square_61x61"](rng), 8)
    scores = torch.randn(8 * f.n_vectors, device="cuda")
    with pytest.raises(ValueError, match="scores must have shape"):
        cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores[1:], 8)
    with pytest.raises(ValueError, match="float64 takes the reference"):
        cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores.double(), 8)
    with pytest.raises(ValueError, match="k must be 8 or 4"):
        cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores, 2)
    with pytest.raises(ValueError, match="out must be"):
        cuda_softmax.edge_softmax_cuda(f.row_ptr, f.vec_mask, scores, 8, out=scores[:5])
