"""The CVSE kernels (kernels/cvse.cu) through flashgnn.ops on CUDA, every V and precision:
against float64 scipy (the issue's bounds) and the CPU implementation of the same precision,
with every output allocation poisoned with NaN, on random matrices (tails of every kind, a
20,000-nonzero hub row), every shared graph and DLMC matrices expanded to V-vectors; SDDMM
padding slots exactly 0; gradients against float64 and the CPU."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import ops
from flashgnn.data.dlmc import expand_rows
from flashgnn.formats import CVSE
from tests.cuda.kernel_cases import CASES
from tests.helpers import GPU, dlmc_spread, graph_params, load_dlmc, rel_err
from tests.ops.gpu_op_checks import (
    BOUND,
    EMULATION_BOUND,
    PRECISIONS,
    check_gpu_spmm,
    csr_rows,
    dense,
    matrix,
    run_twice_poisoned,
    seed_of,
)

pytestmark = GPU

DEVICE = "cuda"
VECTORS = (2, 4, 8)
SIZES = (1, 7, 32, 64, 100, 128, 256)  # both tile counts, every fp32 lane width, tails


def dlmc_expanded(i: int, vector: int) -> sp.csr_matrix:
    """DLMC matrix ``i`` [r, c] as Chen et al. use it (``flashgnn.data.dlmc.expand_rows``):
    each nonzero (i, j) becomes the vector of rows V i .. V i + V - 1 in column j, [V r, c],
    random nonzero values."""
    ((_, pattern),) = load_dlmc([i])
    indptr, indices = expand_rows(pattern.indptr, pattern.indices, vector)
    rng = np.random.default_rng(seed_of("dlmc", i, vector))
    values = rng.uniform(0.5, 1.5, indices.size) * rng.choice([-1.0, 1.0], indices.size)
    return sp.csr_matrix(
        (values.astype(np.float32), indices, indptr),
        shape=(vector * pattern.shape[0], pattern.shape[1]),
    )


@functools.cache
def sparse(name: str, vector: int) -> sp.csr_matrix:
    if name.startswith("dlmcv:"):
        return dlmc_expanded(int(name.partition(":")[2]), vector)
    return matrix(name)


@functools.cache
def cvse(name: str, vector: int, device: str) -> CVSE:
    m = sparse(name, vector)
    return CVSE.from_csr(
        m.indptr,
        m.indices,
        torch.from_numpy(m.data),
        n_cols=m.shape[1],
        vector=vector,
        device=device,
    )


def summation_bound(m) -> float:
    """How far two fp32 sums of a row in different orders may drift apart: a warp adds a
    strip's products in sequence, the reference in chunks, so the gap grows with the square
    root of the longest row (20,000 nonzeros in the hub matrix)."""
    return max(EMULATION_BOUND, 16 * 2.0**-24 * float(np.sqrt(np.diff(m.indptr).max(initial=1))))


def check_spmm(name, vector, precision, n, x_dtype=torch.float32, out_fp32=False, bound_=None):
    m = sparse(name, vector)
    fmt = cvse(name, vector, DEVICE)
    x, outputs = check_gpu_spmm(fmt, m, name, precision, n, x_dtype, out_fp32, bound_)
    emulated = ops.spmm(cvse(name, vector, "cpu"), x, precision, out_fp32=True)
    for y in outputs:
        if y.dtype == torch.float32:
            assert rel_err(y, emulated) <= summation_bound(m)


def check_sddmm(name, vector, precision, k, bound_=None):
    fmt, cpu = cvse(name, vector, DEVICE), cvse(name, vector, "cpu")
    m = sparse(name, vector)
    x, y = dense(m.shape[0], k, name, "x"), dense(m.shape[1], k, name, "y")
    exact = (x.double().numpy()[csr_rows(m)] * y.double().numpy()[m.indices]).sum(1)
    emulated = ops.sddmm(cpu, x, y, precision)
    pad = torch.ones(fmt.n_slots, dtype=torch.bool)
    pad[cpu.perm] = False
    x_dev, y_dev = x.to(DEVICE), y.to(DEVICE)
    for out in run_twice_poisoned(lambda: ops.sddmm(fmt, x_dev, y_dev, precision), DEVICE):
        assert out.dtype == torch.float32 and out.shape == (fmt.n_slots,)
        out = out.cpu()
        assert not torch.isnan(out).any(), "a slot was not written"
        assert not out[pad].any(), "a padding slot is not exactly 0"
        assert rel_err(out[cpu.perm], exact) <= (bound_ or BOUND[precision])
        assert rel_err(out, emulated) <= summation_bound(m)


# ---------------------------------------------------------------------------- random shapes
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("name", list(CASES))
def test_spmm_random_matrices(name, vector, precision, n):
    check_spmm(name, vector, precision, n)


@pytest.mark.parametrize("k", SIZES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("name", list(CASES))
def test_sddmm_random_matrices(name, vector, precision, k):
    check_sddmm(name, vector, precision, k)


@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32", "fp32"])
@pytest.mark.parametrize("vector", VECTORS)
def test_spmm_output_dtypes(vector, precision, x_dtype):
    """16-bit x: the output in x's dtype (the bound of its rounding) or float32."""
    for n in (7, 128):
        check_spmm("square_61x61", vector, precision, n, x_dtype)
        check_spmm("square_61x61", vector, precision, n, x_dtype, out_fp32=True)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("vector", VECTORS)
def test_misaligned_operands(vector, precision):
    """x, y and values starting off a 16-byte boundary take the checked loads."""
    name = "hub_1003x20011"
    fmt, cpu = cvse(name, vector, DEVICE), cvse(name, vector, "cpu")
    m = sparse(name, vector)
    n = 128
    x = torch.randn(m.shape[1] * n + 1, device=DEVICE)[1:].view(m.shape[1], n)
    values = torch.randn(fmt.n_slots + 1, device=DEVICE)[1:]
    y = ops.spmm(fmt, x, precision, values=values)
    expected = ops.spmm(cpu, x.cpu(), precision, values=values.cpu())
    assert rel_err(y, expected) <= summation_bound(m)
    u = torch.randn(m.shape[0] * 40 + 1, device=DEVICE)[1:].view(m.shape[0], 40)
    w = torch.randn(m.shape[1] * 40 + 1, device=DEVICE)[1:].view(m.shape[1], 40)
    out = ops.sddmm(fmt, u, w, precision)
    assert rel_err(out, ops.sddmm(cpu, u.cpu(), w.cpu(), precision)) <= EMULATION_BOUND


@pytest.mark.parametrize("vector", VECTORS)
def test_padding_values_are_ignored(vector):
    fmt = cvse("hub_1003x20011", vector, DEVICE)
    x = dense(fmt.n_cols, 64, "pad").to(DEVICE)
    junk = fmt.values.clone()
    pad = torch.ones(fmt.n_slots, dtype=torch.bool, device=DEVICE)
    pad[fmt.perm] = False
    junk[pad] = float("nan")
    for precision in PRECISIONS:
        assert torch.equal(ops.spmm(fmt, x, precision, values=junk), ops.spmm(fmt, x, precision)), (
            precision
        )


# ---------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("name", ["hub_1003x20011", "square_61x61", "tall_100x7"])
def test_spmm_gradients(name, vector, precision):
    fmt, cpu = cvse(name, vector, DEVICE), cvse(name, vector, "cpu")
    m = sparse(name, vector)
    x = dense(m.shape[1], 40, name, "grad x")
    grad = dense(m.shape[0], 40, name, "grad")
    grads = []
    for f, device in ((fmt, DEVICE), (cpu, "cpu")):
        values = f.values.clone().requires_grad_()
        xd = x.to(device, copy=True).requires_grad_()
        ops.spmm(f, xd, precision, values=values).backward(grad.to(device))
        grads.append((values.grad.cpu(), xd.grad.cpu()))
    (dv, dx), (dv_cpu, dx_cpu) = grads
    exact_dx = m.T.astype(np.float64) @ grad.double().numpy()
    exact_dv = (grad.double().numpy()[csr_rows(m)] * x.double().numpy()[m.indices]).sum(1)
    assert rel_err(dx, exact_dx) <= BOUND[precision]
    assert rel_err(dv[cpu.perm], exact_dv) <= BOUND[precision]
    assert rel_err(dx, dx_cpu) <= summation_bound(m)
    assert rel_err(dv, dv_cpu) <= summation_bound(m)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("name", ["hub_1003x20011", "square_61x61"])
def test_sddmm_gradients(name, vector, precision):
    fmt, cpu = cvse(name, vector, DEVICE), cvse(name, vector, "cpu")
    m = sparse(name, vector)
    x, y = dense(m.shape[0], 24, name, "gx"), dense(m.shape[1], 24, name, "gy")
    g = torch.from_numpy(np.random.default_rng(seed_of(name, vector)).standard_normal(m.nnz))
    grads = []
    for f, device in ((fmt, DEVICE), (cpu, "cpu")):
        xd, yd = x.to(device, copy=True).requires_grad_(), y.to(device, copy=True).requires_grad_()
        out = ops.sddmm(f, xd, yd, precision)
        out.backward(f.values_from_csr(g.float().to(device)))
        grads.append((xd.grad.cpu(), yd.grad.cpu()))
    (dx, dy), (dx_cpu, dy_cpu) = grads
    gm = sp.csr_matrix((g.numpy(), m.indices, m.indptr), shape=m.shape)
    assert rel_err(dx, gm @ y.double().numpy()) <= BOUND[precision]
    assert rel_err(dy, gm.T @ x.double().numpy()) <= BOUND[precision]
    assert rel_err(dx, dx_cpu) <= summation_bound(m)
    assert rel_err(dy, dy_cpu) <= summation_bound(m)


# ---------------------------------------------------------------------------- real matrices
@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("name", graph_params())
def test_shared_graphs_fp16(name, vector):
    check_spmm(f"graph:{name}", vector, "fp16", 32)
    check_sddmm(f"graph:{name}", vector, "fp16", 32)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("part", range(4))
def test_dlmc_expanded_to_vectors(part, vector, precision):
    i = dlmc_spread(4)[part]
    for n in (64, 256):
        check_spmm(f"dlmcv:{i}", vector, precision, n)
    check_sddmm(f"dlmcv:{i}", vector, precision, 64)
