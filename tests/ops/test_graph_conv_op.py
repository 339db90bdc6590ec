"""ops.graph_conv (one autograd node: SpMM, projection and bias with a written-out backward)
against dense float64 maths that autograd differentiates, against its own composed path
(spmm + matmul, which autocast sees) in reduced precision and under autocast, gradcheck in
float64, and the GPU kernels against the CPU."""

from __future__ import annotations

import pytest
import torch

from flashgnn import ops
from flashgnn.ops import PRECISIONS
from flashgnn.ops.graph_conv import _composed
from flashgnn.ops.precision import round_to_precision
from tests.helpers import mebcrs_of, needs_gpu, random_csr, rel_err

SHAPES = [(5, 9), (9, 5), (7, None)]  # (F_in, F_out): aggregate first, project first, no weight
SHAPE_IDS = ["aggregate-first", "project-first", "no-weight"]


def _adjacency(rng, n_rows=37, n_cols=29, k=8, device="cpu"):
    """A directed, rectangular A (rows not a multiple of 8, an empty row)."""
    a = random_csr(n_rows, n_cols, 0.15, rng)
    a.data[a.indptr[3] : a.indptr[4]] = 0.0
    a.eliminate_zeros()
    dense = torch.from_numpy(a.toarray()).float().double()  # A's values as stored (float32)
    return mebcrs_of(a, k, device), dense


def _params(f_in, f_out, dtype, bias=True):
    weight = None if f_out is None else torch.randn(f_in, f_out, dtype=dtype)
    b = torch.randn(f_out or f_in, dtype=dtype) if bias else None
    return weight, b


def _grads(fn, feat, weight, bias, proj):
    """(out, d feat, d weight, d bias) of sum(fn(feat, weight, bias) * proj)."""
    leaves = [
        t.detach().clone().requires_grad_() if t is not None else None for t in (feat, weight, bias)
    ]
    out = fn(*leaves)
    wanted = [t for t in leaves if t is not None]
    grads = iter(torch.autograd.grad((out * proj.to(out.dtype)).sum(), wanted))
    return [out.detach()] + [next(grads) if t is not None else None for t in leaves]


def _assert_close(got, ref, tol):
    for g, r in zip(got, ref):
        assert (g is None) == (r is None)
        if g is not None:
            assert g.dtype == r.dtype and rel_err(g, r) <= tol, (g.dtype, r.dtype, rel_err(g, r))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_float64_matches_dense(f_in, f_out, bias, rng):
    a, dense = _adjacency(rng)
    values = a.values.double()
    feat = torch.randn(a.n_cols, f_in, dtype=torch.float64)
    weight, b = _params(f_in, f_out, torch.float64, bias)
    proj = torch.randn(a.n_rows, f_out or f_in, dtype=torch.float64)

    def reference(x, w, b_):
        out = dense @ x if w is None else dense @ (x @ w)
        return out if b_ is None else out + b_

    got = _grads(lambda x, w, b_: ops.graph_conv(a, x, w, b_, values=values), feat, weight, b, proj)
    _assert_close(got, _grads(reference, feat, weight, b, proj), 1e-12)


@pytest.mark.parametrize("f_in,f_out", SHAPES[:2], ids=SHAPE_IDS[:2])
@pytest.mark.parametrize("wanted", ["bias", "weight", "feat"])
def test_gradient_of_one_input(f_in, f_out, wanted, rng):
    """Only one input needs a gradient: A^T is built only for dX, or dW when X W comes first
    (the first layer of a mini-batch: its block needs no transpose)."""
    a, dense = _adjacency(rng)
    inputs = {
        "feat": torch.randn(a.n_cols, f_in, dtype=torch.float64),
        "weight": torch.randn(f_in, f_out, dtype=torch.float64),
        "bias": torch.randn(f_out, dtype=torch.float64),
    }
    inputs[wanted].requires_grad_()
    proj = torch.randn(a.n_rows, f_out, dtype=torch.float64)
    out = ops.graph_conv(
        a, inputs["feat"], inputs["weight"], inputs["bias"], values=a.values.double()
    )
    (got,) = torch.autograd.grad((out * proj).sum(), [inputs[wanted]])
    projects_first = f_in > f_out  # d(XW) = A^T dOut
    assert (a._transpose is not None) == (
        wanted == "feat" or (wanted == "weight" and projects_first)
    )
    ref = dense @ inputs["feat"] @ inputs["weight"] + inputs["bias"]
    (expected,) = torch.autograd.grad((ref * proj).sum(), [inputs[wanted]])
    assert rel_err(got, expected) < 1e-12


@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_gradcheck(f_in, f_out, rng):
    a, _ = _adjacency(rng, 13, 11)
    values = a.values.double()
    feat = torch.randn(a.n_cols, f_in, dtype=torch.float64, requires_grad=True)
    weight, b = _params(f_in, f_out, torch.float64)
    inputs = [t.requires_grad_() for t in (feat, weight, b) if t is not None]
    if weight is None:
        assert torch.autograd.gradcheck(
            lambda x, b_: ops.graph_conv(a, x, None, b_, values=values), inputs
        )
    else:
        assert torch.autograd.gradcheck(
            lambda x, w, b_: ops.graph_conv(a, x, w, b_, values=values), inputs
        )


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_reduced_precision_matches_the_composition(f_in, f_out, precision, rng):
    """fp32 inputs: the same roundings as spmm + matmul (the aggregate's gradient is written in
    fp32 instead of the input's storage type, so gradients agree to that type's rounding)."""
    k = 4 if precision == "tf32" else 8
    a, dense = _adjacency(rng, k=k)
    feat = torch.randn(a.n_cols, f_in)
    weight, b = _params(f_in, f_out, torch.float32)
    proj = torch.randn(a.n_rows, f_out or f_in)
    got = _grads(lambda x, w, b_: ops.graph_conv(a, x, w, b_, precision), feat, weight, b, proj)
    composed = _grads(
        lambda x, w, b_: _composed(a, x, w, b_, precision, a.values), feat, weight, b, proj
    )
    _assert_close(got, composed, 1e-6 if precision in ("fp32", "tf32") else 2e-3)
    # and the SpMM really ran in ``precision``: the result is that of rounded inputs
    a_r = round_to_precision(dense.float(), precision, torch.float64)
    if weight is None:
        exact = a_r @ round_to_precision(feat, precision, torch.float64)
    elif f_in > f_out:
        exact = a_r @ round_to_precision(feat @ weight, precision, torch.float64)
    else:
        exact = a_r @ round_to_precision(feat, precision, torch.float64) @ weight.double()
    assert rel_err(got[0] - b, exact) < 1e-5


def test_autocast_dtypes_match_the_composition(rng):
    """Under autocast the products run in its dtype, as torch.mm's would; outputs and
    gradients have the composition's dtypes (fp32 output with an fp32 bias)."""
    a, _ = _adjacency(rng)
    for f_in, f_out in SHAPES[:2]:
        feat = torch.randn(a.n_cols, f_in)
        weight, b = _params(f_in, f_out, torch.float32)
        proj = torch.randn(a.n_rows, f_out)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = _grads(
                lambda x, w, b_: ops.graph_conv(a, x, w, b_, "bf16"), feat, weight, b, proj
            )
            composed = _grads(
                lambda x, w, b_: _composed(a, x, w, b_, "bf16", a.values), feat, weight, b, proj
            )
        _assert_close(got, composed, 1e-2)
        assert got[0].dtype == torch.float32


def test_values_with_gradient_take_the_composed_ops(rng):
    """Values that need a gradient (learned edge weights) get it, in A's value layout."""
    a, dense = _adjacency(rng)
    values = a.values.double().requires_grad_()
    feat = torch.randn(a.n_cols, 4, dtype=torch.float64)
    weight = torch.randn(4, 3, dtype=torch.float64)
    proj = torch.randn(a.n_rows, 3, dtype=torch.float64)
    (grad,) = torch.autograd.grad(
        (ops.graph_conv(a, feat, weight, values=values) * proj).sum(), [values]
    )
    rows, cols = dense.nonzero(as_tuple=True)  # row-major: CSR order
    per_edge = (proj[rows] * (feat @ weight)[cols]).sum(1)  # d out / d A_ij
    assert rel_err(grad, a.values_from_csr(per_edge)) < 1e-12


def test_bad_inputs(rng):
    a, _ = _adjacency(rng)
    feat = torch.randn(a.n_cols, 5)
    with pytest.raises(ValueError, match="weight must have shape"):
        ops.graph_conv(a, feat, torch.randn(4, 3))
    with pytest.raises(ValueError, match="rows to match"):
        ops.graph_conv(a, torch.randn(a.n_cols + 1, 5), torch.randn(5, 3))
    with pytest.raises(ValueError, match="precision must be one of"):
        ops.graph_conv(a, feat, torch.randn(5, 3), precision="fp8")


@needs_gpu
@pytest.mark.parametrize("autocast", [False, True], ids=["eager", "autocast"])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("f_in,f_out", SHAPES, ids=SHAPE_IDS)
def test_gpu_matches_the_composition(f_in, f_out, precision, autocast, rng):
    """On the GPU (CUDA kernels, cuBLAS under autocast fp16) against the composed ops there."""
    k = 4 if precision == "tf32" else 8
    a, _ = _adjacency(rng, 300, 280, k=k, device="cuda")
    feat = torch.randn(a.n_cols, f_in, device="cuda")
    weight, b = (t if t is None else t.cuda() for t in _params(f_in, f_out, torch.float32))
    proj = torch.randn(a.n_rows, f_out or f_in, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16, enabled=autocast):
        got = _grads(lambda x, w, b_: ops.graph_conv(a, x, w, b_, precision), feat, weight, b, proj)
        composed = _grads(
            lambda x, w, b_: _composed(a, x, w, b_, precision, a.values), feat, weight, b, proj
        )
    _assert_close(got, composed, 1e-6 if precision in ("fp32", "tf32") and not autocast else 3e-3)


@needs_gpu
def test_gpu_adds_an_fp32_bias_before_rounding_the_product(rng):
    """Under autocast fp16 the fp32 bias is added by the product's cuBLAS call, in fp32: the
    output is (A X)_16 W_16 + b without the 16-bit rounding of the product that the
    composition (and autocast alone) would apply."""
    a, _ = _adjacency(rng, 300, 280, device="cuda")
    feat = torch.randn(a.n_cols, 48, device="cuda")  # 48 -> 64: aggregated first
    weight, b = torch.randn(48, 64, device="cuda"), 8 * torch.randn(64, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        out = ops.graph_conv(a, feat, weight, b, "fp16")
    aggregate = ops.spmm(a, feat.half(), "fp16")  # the node's SpMM: fp16 input, fp16 output
    exact = aggregate.double() @ weight.half().double() + b.double()
    rounded = (aggregate @ weight.half()).double() + b.double()
    assert out.dtype == torch.float32
    assert rel_err(out, exact) < 1e-6 < rel_err(rounded, exact)
