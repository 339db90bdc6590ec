"""flashgnn.ops on CPU: spmm, sddmm and edge_softmax against float64 scipy/NumPy references
for every precision, the precision emulation itself, gradients, opcheck and bad inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import ops
from flashgnn.formats import CVSE
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.ops.cvse import sddmm_call as cvse_sddmm_call
from flashgnn.ops.cvse import spmm_call as cvse_spmm_call
from flashgnn.ops.precision import round_tf32
from flashgnn.ops.sddmm import sddmm_call as mebcrs_sddmm_call
from flashgnn.ops.spmm import spmm_call as mebcrs_spmm_call
from tests.helpers import (
    csr_from_coo,
    graph_names,
    graph_params,
    load_dlmc,
    random_csr,
    random_values,
    rel_err,
)

PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]
# relative error against float64 on unrounded inputs: input rounding (unit roundoff 2^-24,
# 2^-11, 2^-11, 2^-8) times a small factor; accumulation is fp32 throughout
BOUND = {"fp32": 1e-6, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}
WIDTHS = [1, 7, 16, 33]


def tf32_numpy(x: np.ndarray) -> np.ndarray:
    """float32 -> tf32 (10 mantissa bits), nearest with ties away from zero, computed
    arithmetically (frexp, float64) rather than on bits; zeros, inf and NaN pass through."""
    x = np.asarray(x, np.float32)
    out = x.copy()
    finite = np.isfinite(x) & (x != 0)
    mag = np.abs(x[finite].astype(np.float64))
    _, exp = np.frexp(mag)  # mag = m * 2^exp, m in [0.5, 1)
    ulp = np.ldexp(1.0, np.maximum(exp - 1, -126) - 10)  # subnormals share 2^-126's spacing
    rounded = np.floor(mag / ulp + 0.5) * ulp  # exact in float64; + 0.5 then floor: ties up
    with np.errstate(over="ignore"):
        out[finite] = (np.sign(x[finite]) * rounded).astype(np.float32)
    return out


def round_numpy(x: np.ndarray, precision: str) -> np.ndarray:
    """float64 copy of float32 ``x`` rounded to ``precision``'s storage type, without flashgnn."""
    x = np.asarray(x, np.float32)
    if precision == "fp16":
        return x.astype(np.float16).astype(np.float64)
    if precision == "bf16":  # NumPy has no bfloat16; torch's conversion is round-to-nearest-even
        return torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy()
    if precision == "tf32":
        return tf32_numpy(x).astype(np.float64)
    return x.astype(np.float64)


def directed(rng, k: int, n_rows: int = 37, n_cols: int = 29, density: float = 0.15):
    """(scipy matrix, its MEBCRS): rectangular and unsymmetric, two empty rows, a row with a
    single nonzero, float32 values, last window partly beyond n_rows."""
    a = random_csr(n_rows, n_cols, density, rng, dtype=np.float32).tolil()
    a[[3, 17]] = 0
    a[20] = 0
    a[20, 5] = 0.75
    a = sp.csr_matrix(a)
    a.sort_indices()
    return a, MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=n_cols, k=k)


def csr_rows(a: sp.csr_matrix) -> np.ndarray:
    return np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))


def padding_mask(fmt) -> torch.Tensor:
    """bool [n_slots], True on the slots of a format's value layout that hold no nonzero."""
    real = torch.zeros(fmt.n_slots, dtype=torch.bool)
    real[fmt.perm] = True
    return ~real


def check_spmm_matches_float64(fmt, a: sp.csr_matrix, precision: str, n: int):
    """``ops.spmm(fmt, x)`` for a standard normal x [n_cols, n], ``fmt`` any format of the
    float32 matrix ``a``: float32 [n_rows, n], within BOUND of float64 scipy and within 1e-6
    of float64 maths on the inputs rounded to the precision. Returns (x, the product)."""
    x = torch.randn(a.shape[1], n)
    y = ops.spmm(fmt, x, precision)
    assert y.dtype == torch.float32 and y.shape == (a.shape[0], n)
    assert rel_err(y, a.astype(np.float64) @ x.double().numpy()) <= BOUND[precision]
    # emulation: inputs rounded to the storage type, products summed in fp32
    rounded = sp.csr_matrix((round_numpy(a.data, precision), a.indices, a.indptr), shape=a.shape)
    assert rel_err(y, rounded @ round_numpy(x.numpy(), precision)) <= 1e-6
    return x, y


def check_sddmm_matches_float64(fmt, a: sp.csr_matrix, precision: str, n: int):
    """``ops.sddmm(fmt, u, w)`` for standard normal u [n_rows, n] and w [n_cols, n]: float32
    [n_slots], each nonzero's slot (``fmt.perm``) within BOUND of float64 and within 1e-6 of
    float64 maths on the rounded inputs, every other slot 0. Returns (u, w, the result)."""
    u, w = torch.randn(a.shape[0], n), torch.randn(a.shape[1], n)
    out = ops.sddmm(fmt, u, w, precision)
    assert out.dtype == torch.float32 and out.shape == (fmt.n_slots,)
    rows, cols = csr_rows(a), a.indices
    exact = (u.double().numpy()[rows] * w.double().numpy()[cols]).sum(1)
    assert rel_err(out[fmt.perm], exact) <= BOUND[precision]
    ur, wr = round_numpy(u.numpy(), precision), round_numpy(w.numpy(), precision)
    assert rel_err(out[fmt.perm], (ur[rows] * wr[cols]).sum(1)) <= 1e-6
    assert not out[padding_mask(fmt)].any(), "sddmm wrote a padding slot"
    return u, w, out


# ---------------------------------------------------------------------------- spmm
@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_spmm_matches_float64_scipy(precision, n, k, rng):
    a, fmt = directed(rng, k)
    x, y = check_spmm_matches_float64(fmt, a, precision, n)
    if precision != "fp32":
        exact = a.astype(np.float64) @ x.double().numpy()
        assert rel_err(y, exact) > 1e-5, "inputs were not rounded"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_spmm_accumulates_in_fp32(precision):
    """One row of 4097 ones times ones: fp16 accumulation stalls at 2048, bf16 at 256; fp32
    accumulation gives 4097 exactly."""
    n = 4097
    fmt = MEBCRS.from_csr(np.array([0, n]), np.arange(n), np.ones(n, np.float32), k=8)
    x = torch.ones(n, 3, dtype=torch.float16)
    y = ops.spmm(fmt, x, precision, out_fp32=True)
    assert y.dtype == torch.float32
    assert y.tolist() == [[4097.0] * 3]


def test_spmm_output_dtypes(rng):
    a, fmt = directed(rng, 8)
    x16 = torch.randn(a.shape[1], 9).to(torch.float16)
    y32 = ops.spmm(fmt, x16, "fp16", out_fp32=True)
    y16 = ops.spmm(fmt, x16, "fp16")
    assert (y32.dtype, y16.dtype) == (torch.float32, torch.float16)
    assert torch.equal(y16, y32.to(torch.float16))
    assert ops.spmm(fmt, x16.to(torch.bfloat16), "bf16").dtype == torch.bfloat16
    y64 = ops.spmm(fmt, x16.double())
    assert y64.dtype == torch.float64
    assert rel_err(y64, a.astype(np.float64) @ x16.double().numpy()) <= 1e-12


def test_spmm_custom_values(rng):
    a, fmt = directed(rng, 4)
    csr_values = random_values(a.nnz, rng)
    values = fmt.values_from_csr(torch.from_numpy(csr_values).float())
    x = torch.randn(a.shape[1], 16)
    y = ops.spmm(fmt, x, values=values)
    other = sp.csr_matrix((csr_values, a.indices, a.indptr), shape=a.shape)
    assert rel_err(y, other @ x.double().numpy()) <= 1e-6


GRAPHS = graph_names()


@pytest.mark.parametrize("name", graph_params())
def test_spmm_on_dataset_graph(name, load_graph, rng):
    a = load_graph(name)
    a.data = random_values(a.nnz, rng).astype(np.float32)
    fmt = MEBCRS.from_csr(a.indptr, a.indices, a.data, k=8 if GRAPHS.index(name) % 2 else 4)
    x = torch.randn(a.shape[1], 16)
    exact = a.astype(np.float64) @ x.double().numpy()
    for precision in PRECISIONS:
        assert rel_err(ops.spmm(fmt, x, precision), exact) <= BOUND[precision], precision


def test_spmm_on_dlmc_sample(data_dir, rng):
    for name, a in load_dlmc([20, 140, 250]):  # 128 x 1152, 512 x 128, 1024 x 256
        a.data = random_values(a.nnz, rng).astype(np.float32)
        fmt = MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1], k=8)
        x = torch.randn(a.shape[1], 33)
        assert rel_err(ops.spmm(fmt, x), a.astype(np.float64) @ x.double().numpy()) <= 1e-6, name


# ---------------------------------------------------------------------------- sddmm
@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_sddmm_matches_float64(precision, width, k, rng):
    a, fmt = directed(rng, k)
    check_sddmm_matches_float64(fmt, a, precision, width)


# ---------------------------------------------------------------------------- edge softmax
def softmax_by_row(rows: np.ndarray, scores: np.ndarray, n_rows: int) -> np.ndarray:
    out = np.zeros_like(scores)
    for r in range(n_rows):
        s = scores[rows == r]
        if len(s):
            e = np.exp(s - s.max())
            out[rows == r] = e / e.sum()
    return out


@pytest.mark.parametrize("k", [8, 4])
def test_edge_softmax_over_real_nonzeros_only(k, rng):
    a, fmt = directed(rng, k)
    scores = torch.randn(8 * fmt.n_vectors) * 3
    scores[padding_mask(fmt)] = 30.0  # would dominate every row that counted padding
    probs = ops.edge_softmax(fmt, scores)
    assert probs.dtype == torch.float32
    rows = csr_rows(a)
    expected = softmax_by_row(rows, scores[fmt.perm].double().numpy(), a.shape[0])
    assert rel_err(probs[fmt.perm], expected) <= 1e-6
    assert not probs[padding_mask(fmt)].any()
    assert probs[fmt.perm][rows == 20].tolist() == [1.0]  # the row with one nonzero
    shifted = scores + 1000.0  # exp(1000) overflows unless the row maximum is subtracted
    expected = softmax_by_row(rows, shifted[fmt.perm].double().numpy(), a.shape[0])
    assert rel_err(ops.edge_softmax(fmt, shifted)[fmt.perm], expected) <= 1e-6


def test_edge_softmax_dtypes(rng):
    a, fmt = directed(rng, 8)
    scores = torch.randn(8 * fmt.n_vectors)
    assert ops.edge_softmax(fmt, scores.half()).dtype == torch.float32
    p64 = ops.edge_softmax(fmt, scores.double())
    assert p64.dtype == torch.float64
    expected = softmax_by_row(csr_rows(a), scores.double()[fmt.perm].numpy(), a.shape[0])
    assert rel_err(p64[fmt.perm], expected) <= 1e-12


# ---------------------------------------------------------------------------- gradients
@pytest.fixture
def small_directed(rng):
    """(scipy, MEBCRS) of a 19 x 13 unsymmetric matrix with float64 values, k = 4."""
    a = random_csr(19, 13, 0.25, rng).tolil()
    a[5] = 0
    a = sp.csr_matrix(a)
    return a, MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=13, k=4)


def test_spmm_gradcheck(small_directed):
    a, fmt = small_directed
    values = fmt.values.clone().requires_grad_()
    x = torch.randn(13, 3, dtype=torch.float64, requires_grad=True)
    fn = lambda v, x: ops.spmm(fmt, x, values=v)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (values, x))
    assert torch.autograd.gradgradcheck(fn, (values, x))


def test_spmm_gradients_against_scipy(small_directed):
    """dX = A^T dY (not A dY) and dvalues = dY[i] . X[j] on each nonzero, 0 on padding."""
    a, fmt = small_directed
    values = fmt.values.clone().requires_grad_()
    x = torch.randn(13, 6, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(19, 6, dtype=torch.float64)
    ops.spmm(fmt, x, values=values).backward(grad)
    assert rel_err(x.grad, a.T @ grad.numpy()) <= 1e-12
    expected = (grad.numpy()[csr_rows(a)] * x.detach().numpy()[a.indices]).sum(1)
    assert rel_err(values.grad[fmt.perm], expected) <= 1e-12
    assert not values.grad[padding_mask(fmt)].any()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_spmm_and_sddmm_backward_in_each_precision(precision, rng):
    a, fmt = directed(rng, 8)
    x = torch.randn(a.shape[1], 16, requires_grad=True)
    grad = torch.randn(a.shape[0], 16)
    ops.spmm(fmt, x, precision).backward(grad)
    assert x.grad.dtype == torch.float32
    assert rel_err(x.grad, a.T.astype(np.float64) @ grad.double().numpy()) <= BOUND[precision]
    u = torch.randn(a.shape[0], 8, requires_grad=True)
    w = torch.randn(a.shape[1], 8, requires_grad=True)
    g = torch.randn(8 * fmt.n_vectors)
    ops.sddmm(fmt, u, w, precision).backward(g)
    ga = sp.csr_matrix((g[fmt.perm].double().numpy(), a.indices, a.indptr), shape=a.shape)
    assert rel_err(u.grad, ga @ w.detach().double().numpy()) <= BOUND[precision]
    assert rel_err(w.grad, ga.T @ u.detach().double().numpy()) <= BOUND[precision]


def test_sddmm_gradcheck(small_directed):
    _, fmt = small_directed
    x = torch.randn(19, 4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(13, 4, dtype=torch.float64, requires_grad=True)
    fn = lambda x, y: ops.sddmm(fmt, x, y)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, y))
    assert torch.autograd.gradgradcheck(fn, (x, y))


def test_edge_softmax_gradcheck(small_directed):
    _, fmt = small_directed
    scores = torch.randn(8 * fmt.n_vectors, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: ops.edge_softmax(fmt, s), (scores,))


# ---------------------------------------------------------------------------- opcheck
def _op_arguments(fmt: MEBCRS):
    """name -> argument tuples of each flashgnn custom op, with gradients required."""
    t = fmt.transpose()
    pattern = (fmt.row_ptr, fmt.col_idx, fmt.vec_mask)
    t_pattern = (t.fmt.row_ptr, t.fmt.col_idx, t.fmt.vec_mask, t.fmt.perm, t.src_slot)
    values = fmt.values.clone().requires_grad_()
    x = torch.randn(fmt.n_cols, 5, requires_grad=True)
    u = torch.randn(fmt.n_rows, 5, requires_grad=True)
    scores = torch.randn(8 * fmt.n_vectors, requires_grad=True)
    probs = ops.edge_softmax(fmt, scores.detach())
    return {
        "spmm": [
            (*pattern, values, x, fmt.n_rows, fmt.k, p, out_fp32, *t_pattern)
            for p, out_fp32 in [("fp32", False), ("fp16", True), ("bf16", False), ("tf32", False)]
        ],
        "sddmm": [(*pattern, u, x, fmt.k, p, *t_pattern) for p in ("fp32", "fp16")],
        "edge_softmax": [(*pattern, scores, fmt.n_rows, fmt.k)],
        "edge_softmax_backward": [
            (*pattern, probs, torch.randn(8 * fmt.n_vectors), fmt.n_rows, fmt.k)
        ],
    }


@pytest.mark.parametrize("name", ["spmm", "sddmm", "edge_softmax", "edge_softmax_backward"])
def test_opcheck(name, rng):
    _, fmt = directed(rng, 4, n_rows=21, n_cols=17, density=0.2)
    op = getattr(torch.ops.flashgnn, name).default
    for args in _op_arguments(fmt)[name]:
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("fmt_name", ["mebcrs", "cvse"])
def test_a_gradient_through_a_missing_transpose_is_a_clear_error(fmt_name, rng):
    """The ops' entries called without A^T (as only the package's own callers do) refuse the
    gradients that need it, naming the public op that builds it; without those gradients
    they run."""
    a, fmt = directed(rng, 8)
    if fmt_name == "cvse":
        fmt = CVSE.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1], vector=4)
        spmm_call, sddmm_call, k = cvse_spmm_call, cvse_sddmm_call, 4
    else:
        spmm_call, sddmm_call, k = mebcrs_spmm_call, mebcrs_sddmm_call, 8
    pattern, none = (fmt.row_ptr, fmt.col_idx, fmt.vec_mask), (None,) * 5
    values = fmt.values.clone().requires_grad_()
    u, w = torch.randn(a.shape[0], 3), torch.randn(a.shape[1], 3)
    for x in (w.clone().requires_grad_(), w):
        y = spmm_call(*pattern, values, x, a.shape[0], k, "fp32", False, *none)
        if x.requires_grad:
            with pytest.raises(RuntimeError, match=r"gradient of X needs A\^T; .*ops\.spmm,"):
                y.sum().backward()
        else:
            (grad_values,) = torch.autograd.grad(y.sum(), [values])
            assert grad_values.shape == values.shape
    for y_in in (w.clone().requires_grad_(), w):
        x_in = u.clone().requires_grad_()
        s = sddmm_call(*pattern, x_in, y_in, k, "fp32", *none)
        if y_in.requires_grad:
            with pytest.raises(RuntimeError, match=r"gradient of Y needs A\^T; .*ops\.sddmm,"):
                s.sum().backward()
        else:
            assert torch.autograd.grad(s.sum(), [x_in])[0].shape == u.shape


# ---------------------------------------------------------------------------- bad input
@pytest.fixture
def fmt_29_cols(rng):
    return directed(rng, 8)[1]


def _bad_calls():
    """name -> (call on a 37 x 29 format, exception type, message)."""
    x = torch.randn(29, 4)
    u = torch.randn(37, 4)
    return {
        "spmm_int_x": (
            lambda f: ops.spmm(f, x.int()),
            ValueError,
            "x must be float16, bfloat16, float32 or float64",
        ),
        "spmm_1d_x": (lambda f: ops.spmm(f, x[:, 0]), ValueError, "x must be 2-D"),
        "spmm_rows": (lambda f: ops.spmm(f, x[:28]), ValueError, "x must have 29 rows"),
        "spmm_precision": (lambda f: ops.spmm(f, x, "fp8"), ValueError, "precision must be one of"),
        "spmm_numpy_x": (lambda f: ops.spmm(f, x.numpy()), TypeError, "x must be a torch.Tensor"),
        "spmm_values_shape": (
            lambda f: ops.spmm(f, x, values=f.values[:-1]),
            ValueError,
            "values must have shape",
        ),
        "spmm_values_dtype": (
            lambda f: ops.spmm(f, x, values=f.values.int()),
            ValueError,
            "values must be floating point",
        ),
        "spmm_x_device": (
            lambda f: ops.spmm(f, x.to("meta")),
            ValueError,
            "x is on meta but the sparse matrix is on cpu",
        ),
        "spmm_values_device": (
            lambda f: ops.spmm(f, x, values=f.values.to("meta")),
            ValueError,
            "values is on meta but the sparse matrix is on cpu",
        ),
        "sddmm_x_rows": (lambda f: ops.sddmm(f, u[:36], x), ValueError, "x must have 37 rows"),
        "sddmm_y_rows": (lambda f: ops.sddmm(f, u, u), ValueError, "y must have 29 rows"),
        "sddmm_widths": (
            lambda f: ops.sddmm(f, u, x[:, :3]),
            ValueError,
            "same number of columns, got 4 and 3",
        ),
        "sddmm_precision": (
            lambda f: ops.sddmm(f, u, x, "int8"),
            ValueError,
            "precision must be one of",
        ),
        "sddmm_1d": (lambda f: ops.sddmm(f, u[:, 0], x), ValueError, "x must be 2-D"),
        "sddmm_y_device": (lambda f: ops.sddmm(f, u, x.to("meta")), ValueError, "y is on meta"),
        "softmax_shape": (
            lambda f: ops.edge_softmax(f, torch.randn(f.nnz)),
            ValueError,
            "scores must have shape",
        ),
        "softmax_dtype": (
            lambda f: ops.edge_softmax(f, torch.ones(8 * f.n_vectors, dtype=torch.int64)),
            ValueError,
            "scores must be floating point",
        ),
    }


BAD_CALLS = _bad_calls()


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_bad_input_is_a_clear_error(name, fmt_29_cols):
    call, error, message = BAD_CALLS[name]
    with pytest.raises(error, match=message):
        call(fmt_29_cols)


# ---------------------------------------------------------------------------- tf32 rounding
def test_round_tf32_matches_arithmetic_rounding(rng):
    special = np.array(
        [
            0x3F801000,  # 1 + 2^-11: a tie, rounds away from zero to 1 + 2^-10
            0xBF801000,  # its negative
            0x3F800FFF,
            0x3F801001,
            0x3F801FFF,  # just below / above the tie, and a carry
            0x3FFFF000,  # carries into the exponent: 2.0
            0x7F7FFFFF,
            0xFF7FFFFF,  # largest finite floats round to +-inf
            0x00001000,
            0x00000FFF,
            0x80001000,  # subnormal tie, below tie, negative tie
            0x00000000,
            0x80000000,  # +0, -0
            0x7F800000,
            0xFF800000,
            0x7FC00000,  # inf, -inf, nan
        ],
        dtype=np.uint32,
    )
    bits = np.concatenate([special, rng.integers(0, 2**32, 200_000, dtype=np.uint32)])
    x = bits.view(np.float32)
    got = round_tf32(torch.from_numpy(x.copy())).numpy()
    expected = tf32_numpy(x)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], expected.view(np.uint32)[~nan])
    assert got[:8].view(np.uint32).tolist() == [
        0x3F802000,
        0xBF802000,
        0x3F800000,
        0x3F802000,
        0x3F802000,
        0x40000000,
        0x7F800000,
        0xFF800000,
    ]
    assert got[8:13].view(np.uint32).tolist() == [0x00002000, 0x00000000, 0x80002000, 0, 0x80000000]


def test_formats_sharing_col_idx_do_not_share_results(rng):
    """Two valid formats holding one col_idx tensor but different vec_mask (B keeps one
    nonzero of each of A's vectors): each op's result follows its own arguments."""
    a, fmt_a = directed(rng, 8)
    rows, cols = csr_rows(a), a.indices
    _, first = np.unique(
        (rows // 8) * a.shape[1] + cols, return_index=True
    )  # CSR order: lowest row first
    b = csr_from_coo(rows[first], cols[first], a.shape, rng, dtype=np.float32)
    fmt_b = MEBCRS.from_csr(b.indptr, b.indices, b.data, n_cols=a.shape[1], k=8)
    assert torch.equal(fmt_b.col_idx, fmt_a.col_idx) and not torch.equal(
        fmt_b.vec_mask, fmt_a.vec_mask
    )
    fmt_b = dataclasses.replace(fmt_b, col_idx=fmt_a.col_idx)
    fmt_b.validate()
    x, u = torch.randn(a.shape[1], 4), torch.randn(a.shape[0], 4)
    scores = torch.randn(8 * fmt_a.n_vectors)
    ops.sddmm(fmt_a, u, x)
    ops.edge_softmax(fmt_a, scores)

    out = ops.sddmm(fmt_b, u, x)
    assert not out[padding_mask(fmt_b)].any(), "sddmm wrote slots that are padding in B"
    b_rows = csr_rows(b)
    assert (
        rel_err(
            out[fmt_b.perm], (u.double().numpy()[b_rows] * x.double().numpy()[b.indices]).sum(1)
        )
        <= 1e-6
    )
    probs = ops.edge_softmax(fmt_b, scores)
    expected = softmax_by_row(b_rows, scores[fmt_b.perm].double().numpy(), b.shape[0])
    assert rel_err(probs[fmt_b.perm], expected) <= 1e-6
