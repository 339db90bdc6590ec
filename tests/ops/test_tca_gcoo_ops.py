"""SpMM on TCACSR and GCOO through ``flashgnn.ops.spmm`` on the CPU: against scipy in every
precision (on the rounded inputs, and within the issue's tolerances of exact float64),
gradients by float64 gradcheck, and the errors (no SDDMM, bad values, CUDA gradients)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import ops
from flashgnn.formats import GCOO, TCACSR
from flashgnn.formats.gcoo import GROUPS
from flashgnn.ops.gcoo import forward_only
from flashgnn.ops.precision import round_to_precision
from tests.helpers import random_csr, rel_err

TOLERANCE = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}
FORMATS = {"tca": None, **{f"gcoo{p}": p for p in GROUPS}}


def build(kind: str, m: sp.csr_matrix, values=None):
    data = torch.as_tensor(m.data) if values is None else values
    if kind == "tca":
        return TCACSR.from_csr(m.indptr, m.indices, data, m.shape[1])
    g = GCOO.from_csr(m.indptr, m.indices, None, m.shape[1], group=FORMATS[kind])
    return g.with_values(g.values_from_csr(data))


def _matrix(rng) -> sp.csr_matrix:
    """Rows of 0 to 150 nonzeros (short, packed and longer than a 64-nonzero chunk) over 170
    columns, 21 rows: a last strip shorter than 8."""
    m = random_csr(21, 170, 0.25, rng).tolil()
    m[3, :] = 0
    m[5, :150] = np.linspace(-1, 1, 150) + 0.01
    m[6, :] = 0
    m[6, 7] = 2.0
    m = m.tocsr()
    m.sort_indices()
    return m


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("precision", TOLERANCE)
@pytest.mark.parametrize("n", [1, 5, 32])
def test_spmm_matches_scipy(kind, precision, n, rng):
    m = _matrix(rng)
    x = torch.randn(m.shape[1], n, dtype=torch.float32)
    a = build(kind, m, torch.as_tensor(m.data, dtype=torch.float32))
    y = ops.spmm(a, x, precision)
    assert y.dtype == torch.float32 and y.shape == (m.shape[0], n)
    # the same maths on the rounded inputs, in float64
    xr = round_to_precision(x, precision, torch.float64).numpy()
    vr = round_to_precision(torch.as_tensor(m.data, dtype=torch.float32), precision, torch.float64)
    rounded = sp.csr_matrix((vr.numpy(), m.indices, m.indptr), shape=m.shape)
    np.testing.assert_allclose(y.numpy(), rounded @ xr, rtol=1e-5, atol=1e-5)
    exact = m @ x.double().numpy()
    assert rel_err(y, exact) <= TOLERANCE[precision]
    assert bool((y[3] == 0).all())


@pytest.mark.parametrize("kind", FORMATS)
def test_out_dtype_and_values_argument(kind, rng):
    m = _matrix(rng)
    a = build(kind, m)
    x = torch.randn(m.shape[1], 4, dtype=torch.float16)
    assert ops.spmm(a, x, "fp16").dtype == torch.float16
    assert ops.spmm(a, x, "fp16", out_fp32=True).dtype == torch.float32
    doubled = ops.spmm(a, x.double(), "fp32", values=a.values * 2)
    np.testing.assert_allclose(doubled.numpy(), 2 * (m @ x.double().numpy()), rtol=1e-12)
    with pytest.raises(ValueError, match="values must have shape"):
        ops.spmm(a, x, "fp16", values=a.values[:-1])
    with pytest.raises(ValueError, match="precision"):
        ops.spmm(a, x, "int8")


@pytest.mark.parametrize("kind", FORMATS)
def test_gradcheck(kind, rng):
    m = random_csr(9, 11, 0.4, rng)
    a = build(kind, m)
    values = a.values.clone().requires_grad_()
    x = torch.randn(11, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, x: ops.spmm(a, x, "fp32", values=v), (values, x))


@pytest.mark.parametrize("kind", FORMATS)
def test_no_sddmm(kind, rng):
    a = build(kind, random_csr(6, 6, 0.5, rng))
    x = torch.randn(6, 2)
    with pytest.raises(TypeError, match="sddmm has no implementation for"):
        ops.sddmm(a, x, x)


def test_cuda_gradients_are_refused():
    t = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="forward only on CUDA"):
        forward_only("GCOO", t)
    with torch.no_grad():
        forward_only("GCOO", t)
    forward_only("GCOO", t.detach())
