"""GAT's score terms (flashgnn.ops.score_terms): the torch composition on the CPU and the
kernels on the GPU, forward and gradients, against float64."""

from __future__ import annotations

import pytest
import torch

from flashgnn.ops.score_terms import score_terms
from tests.helpers import needs_gpu, rel_err
from tests.ops.gpu_op_checks import run_twice_poisoned

BOUND = {
    torch.float16: 1e-3,
    torch.bfloat16: 8e-3,
    torch.float32: 1e-6,
}  # d_ft, rounded to ft's type


def _operands(heads, rows, terms, f_dim, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    ft = torch.randn(heads * rows, f_dim, generator=g).to(dtype).to(device)
    attn = torch.randn(heads, terms, f_dim, generator=g).to(device)
    d_terms = torch.randn(heads * rows, terms, generator=g).to(device)
    return ft, attn, d_terms


def _reference(ft, attn, d_terms):
    """(terms, d_ft, d_attn) in float64 from the operands as given."""
    heads, terms, f_dim = attn.shape
    x = ft.double().view(heads, -1, f_dim)
    w, d = attn.double(), d_terms.double().view(heads, -1, terms)
    return (
        torch.einsum("hrf,haf->hra", x, w).reshape(-1, terms),
        torch.einsum("hra,haf->hrf", d, w).reshape(-1, f_dim),
        torch.einsum("hra,hrf->haf", d, x),
    )


def _run(ft, attn, d_terms):
    ft, attn = ft.clone().requires_grad_(), attn.clone().requires_grad_()
    out = score_terms(ft, attn)
    d_ft, d_attn = torch.autograd.grad(out, [ft, attn], d_terms)
    return out.detach(), d_ft, d_attn


@pytest.mark.parametrize("terms", [1, 2])
def test_cpu_matches_float64_and_gradcheck(terms):
    ft, attn, d_terms = _operands(3, 11, terms, 5, torch.float32, "cpu")
    for got, ref in zip(_run(ft, attn, d_terms), _reference(ft, attn, d_terms)):
        assert rel_err(got, ref) <= 1e-6
    ft64, attn64 = ft.double().requires_grad_(), attn.double().requires_grad_()
    assert torch.autograd.gradcheck(score_terms, (ft64, attn64))


def test_bad_shapes():
    with pytest.raises(ValueError, match=r"ft \[heads \* rows, F\] and attn \[heads, A, F\]"):
        score_terms(torch.randn(10, 4), torch.randn(3, 2, 4))  # 10 rows for 3 heads
    with pytest.raises(ValueError, match="score_terms"):
        score_terms(torch.randn(9, 4), torch.randn(3, 2, 5))
    with pytest.raises(ValueError, match="score_terms"):
        score_terms(torch.randn(9, 4), torch.randn(0, 2, 4))  # no head


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("terms", [1, 2])
@pytest.mark.parametrize(
    "heads,rows,f_dim", [(1, 1, 1), (3, 37, 7), (4, 5000, 16), (2, 70_001, 33), (1, 50, 300)]
)
def test_gpu_kernels_match_float64(heads, rows, f_dim, terms, dtype):
    """Every output written (NaN-poisoned allocations), within fp32 rounding of float64 (d_ft
    within its type's rounding), the same bits on a second call; several blocks per head
    reduce d_attn at 70k rows; 300 features (over the kernels' 256) take torch's ops."""
    ft, attn, d_terms = _operands(heads, rows, terms, f_dim, dtype, "cuda")
    first, second = run_twice_poisoned(lambda: _run(ft, attn, d_terms), "cuda")
    out, d_ft, d_attn = first
    assert out.dtype == torch.float32 and d_ft.dtype == dtype and d_attn.dtype == torch.float32
    for t in first:
        assert not torch.isnan(t).any(), "an output element was not written"
    ref_out, ref_d_ft, ref_d_attn = _reference(ft, attn, d_terms)
    assert rel_err(out, ref_out) <= 1e-6
    assert rel_err(d_ft, ref_d_ft) <= BOUND[dtype]
    assert rel_err(d_attn, ref_d_attn) <= 1e-5
    assert all(torch.equal(a, b) for a, b in zip(first, second))


@needs_gpu
def test_gpu_matches_the_cpu_composition():
    ft, attn, d_terms = _operands(4, 300, 2, 16, torch.float16, "cpu")
    gpu = _run(ft.cuda(), attn.cuda(), d_terms.cuda())
    cpu = _run(ft, attn, d_terms)
    for g, c in zip(gpu, cpu):
        assert g.dtype == c.dtype
        assert rel_err(g, c) <= (1e-6 if g.dtype == torch.float32 else 1e-3)  # d_ft: fp16 roundings
