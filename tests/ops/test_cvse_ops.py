"""flashgnn.ops.spmm and sddmm on CVSE, on the CPU: every V and precision against float64
scipy and against float64 maths on the rounded inputs, padding slots ignored (SpMM) and written
as 0 (SDDMM), gradients by gradcheck (A^T's own CVSE in the backward, double backward too),
opcheck of the custom ops, and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import ops
from flashgnn.formats import CVSE
from flashgnn.ops.cvse import transpose_args
from tests.helpers import rel_err
from tests.ops.test_ops_cpu import (
    BOUND,
    PRECISIONS,
    WIDTHS,
    check_sddmm_matches_float64,
    check_spmm_matches_float64,
    csr_rows,
    directed,
    padding_mask,
)

VECTORS = (2, 4, 8)


def cvse(a, vector: int, **kw) -> CVSE:
    return CVSE.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1], vector=vector, **kw)


@pytest.fixture(params=VECTORS, ids=lambda v: f"V{v}")
def pair(request, rng):
    """(scipy matrix 37 x 29 with empty rows, its CVSE): 37 is no multiple of any V."""
    a, _ = directed(rng, 8)
    return a, cvse(a, request.param)


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_spmm_matches_float64_scipy(precision, n, pair):
    check_spmm_matches_float64(pair[1], pair[0], precision, n)


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_sddmm_matches_float64_and_zeroes_padding(precision, n, pair):
    check_sddmm_matches_float64(pair[1], pair[0], precision, n)


def test_padding_values_are_ignored_and_dtypes(pair):
    a, fmt = pair
    x = torch.randn(a.shape[1], 6)
    junk = fmt.values.clone()
    junk[padding_mask(fmt)] = float("nan")
    assert torch.equal(ops.spmm(fmt, x, "fp32", values=junk), ops.spmm(fmt, x, "fp32"))
    x16 = x.half()
    assert ops.spmm(fmt, x16, "fp16").dtype == torch.float16
    assert ops.spmm(fmt, x16, "fp16", out_fp32=True).dtype == torch.float32
    y64 = ops.spmm(fmt, x.double())
    assert y64.dtype == torch.float64
    assert rel_err(y64, a.astype(np.float64) @ x.double().numpy()) <= 1e-6
    assert ops.sddmm(fmt, torch.randn(37, 3).double(), x[:, :3].double()).dtype == torch.float64


def test_transpose_is_the_cvse_of_a_transposed(pair):
    a, fmt = pair
    t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = transpose_args(fmt, True)
    assert transpose_args(fmt, True)[0] is t_row_ptr  # built once per pattern
    at = a.T.tocsr()
    at.sort_indices()
    want = cvse(at, fmt.vector)
    for got, name in ((t_row_ptr, "row_ptr"), (t_col_idx, "col_idx"), (t_vec_mask, "vec_mask")):
        assert torch.equal(got, getattr(want, name)), name
    assert torch.equal(t_perm, want.perm)
    # t_src: A's slot of each A^T nonzero, so A's values moved there are A^T's
    assert torch.equal(fmt.values[t_src], want.values[want.perm])
    assert transpose_args(fmt, False) == (None,) * 5


@pytest.mark.parametrize("vector", VECTORS)
def test_gradcheck_spmm(vector, rng):
    a, _ = directed(rng, 8, n_rows=23, n_cols=13, density=0.25)
    fmt = cvse(a, vector)
    values = fmt.values.double().requires_grad_()
    x = torch.randn(13, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, x: ops.spmm(fmt, x, "fp32", values=v), (values, x))
    assert torch.autograd.gradgradcheck(
        lambda v, x: ops.spmm(fmt, x, "fp32", values=v), (values, x)
    )


@pytest.mark.parametrize("vector", VECTORS)
def test_gradcheck_sddmm(vector, rng):
    a, _ = directed(rng, 8, n_rows=23, n_cols=13, density=0.25)
    fmt = cvse(a, vector)
    u = torch.randn(23, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(13, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u, w: ops.sddmm(fmt, u, w, "fp32"), (u, w))
    assert torch.autograd.gradgradcheck(lambda u, w: ops.sddmm(fmt, u, w, "fp32"), (u, w))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_float32_gradients_match_float64(precision, pair):
    """The backward in each precision: dvalues by SDDMM and dX through A^T, against float64
    autograd of dense maths."""
    a, fmt = pair
    values = fmt.values.clone().requires_grad_()
    x = torch.randn(a.shape[1], 5, requires_grad=True)
    grad = torch.randn(a.shape[0], 5)
    ops.spmm(fmt, x, precision, values=values).backward(grad)
    dense = torch.from_numpy(a.toarray()).double().requires_grad_()
    x64 = x.detach().double().requires_grad_()
    (dense @ x64).backward(grad.double())
    assert rel_err(values.grad[fmt.perm], dense.grad[csr_rows(a), a.indices]) <= BOUND[precision]
    assert rel_err(x.grad, x64.grad) <= BOUND[precision]
    assert not values.grad[padding_mask(fmt)].any()


# ---------------------------------------------------------------------------- opcheck
@pytest.mark.parametrize("name", ["cvse_spmm", "cvse_sddmm"])
def test_opcheck(name, rng):
    a, _ = directed(rng, 8, n_rows=21, n_cols=17, density=0.2)
    fmt = cvse(a, 4)
    pattern = (fmt.row_ptr, fmt.col_idx, fmt.vec_mask)
    t = transpose_args(fmt, True)
    if name == "cvse_spmm":
        values = fmt.values.clone().requires_grad_()
        x = torch.randn(17, 5, requires_grad=True)
        args = (*pattern, values, x, 21, 4, "fp32", False, *t)
    else:
        u, w = torch.randn(21, 5, requires_grad=True), torch.randn(17, 5, requires_grad=True)
        args = (*pattern, u, w, 4, "fp32", *t)
    torch.library.opcheck(getattr(torch.ops.flashgnn, name).default, args)


# ---------------------------------------------------------------------------- bad input
def test_bad_inputs(pair):
    a, fmt = pair
    x = torch.randn(a.shape[1], 4)
    with pytest.raises(ValueError, match=r"values must have shape \(\d+,\) \(A's value layout\)"):
        ops.spmm(fmt, x, values=fmt.values[:-1])
    with pytest.raises(ValueError, match="values must be floating point"):
        ops.spmm(fmt, x, values=torch.ones(fmt.n_slots, dtype=torch.int32))
    with pytest.raises(ValueError, match="values is on meta"):
        ops.spmm(fmt, x, values=torch.ones(fmt.n_slots, device="meta"))
    with pytest.raises(ValueError, match="x must have 29 rows"):
        ops.spmm(fmt, torch.randn(30, 4))
    with pytest.raises(ValueError, match="x must be float16, bfloat16, float32 or float64"):
        ops.spmm(fmt, x.to(torch.int64))
    with pytest.raises(ValueError, match="x is on meta"):
        ops.spmm(fmt, x.to("meta"))
    with pytest.raises(ValueError, match="precision must be one of"):
        ops.spmm(fmt, x, "fp8")
    with pytest.raises(ValueError, match="y must have 29 rows"):
        ops.sddmm(fmt, torch.randn(37, 4), torch.randn(28, 4))
    with pytest.raises(ValueError, match="same number of columns"):
        ops.sddmm(fmt, torch.randn(37, 4), torch.randn(29, 5))
