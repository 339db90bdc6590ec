"""HB-ELL's SpMM on CUDA (the sparse blocks on the 8x1 kernels, the dense blocks on
kernels/hbell.cu) through flashgnn.ops: against float64 scipy and the CPU implementation of the
same precision, on random matrices, a clustered matrix whose dense blocks reach past the last
row and column, real graphs and DLMC weights, with every output allocation poisoned with NaN."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import ops
from flashgnn.formats import HBELL
from tests.cuda.kernel_cases import CASES
from tests.helpers import GPU, csr_from_coo, rel_err
from tests.ops.gpu_op_checks import (
    EMULATION_BOUND,
    PRECISIONS,
    SIZES,
    check_gpu_spmm,
    dense,
    matrix,
    real_matrix_names,
    seed_of,
)

pytestmark = GPU

DEVICE = "cuda"


def clustered_109x79(rng) -> sp.csr_matrix:
    """Dense blocks (90% full) on a diagonal band, the bottom-right corner block (13 x 15, all
    195 entries: dense) reaching past the last row and column, ELL blocks at 30% and a
    scattered rest."""
    r, c = [], []
    for br, bc, fill in ((0, 0, 0.9), (16, 16, 0.9), (32, 48, 0.9), (48, 0, 0.3), (80, 32, 0.3)):
        keep = np.nonzero(rng.random(256) < fill)[0]
        r.append(br + keep // 16)
        c.append(bc + keep % 16)
    corner = np.arange(13 * 15)
    r.append(96 + corner // 15)
    c.append(64 + corner % 15)
    scattered = rng.choice(109 * 79, 300, replace=False)
    r.append(scattered // 79)
    c.append(scattered % 79)
    return csr_from_coo(np.concatenate(r), np.concatenate(c), (109, 79), rng, dtype=np.float32)


HBELL_CASES = {**CASES, "clustered_109x79": clustered_109x79}


@functools.cache
def case(name: str) -> sp.csr_matrix:
    if name in HBELL_CASES and name not in CASES:
        return HBELL_CASES[name](np.random.default_rng(seed_of(name)))
    return matrix(name)


@functools.cache
def hbell(name: str, device: str) -> HBELL:
    m = case(name)
    return HBELL.from_csr(
        m.indptr, m.indices, torch.from_numpy(m.data), n_cols=m.shape[1], device=device
    )


def check_spmm(
    name: str, precision: str, n: int, x_dtype=torch.float32, out_fp32: bool = False
) -> None:
    check_gpu_spmm(hbell(name, DEVICE), case(name), name, precision, n, x_dtype, out_fp32)


def test_the_clustered_case_has_every_kind_of_block():
    fmt = hbell("clustered_109x79", "cpu")
    dense_blocks = fmt.dense
    assert int(dense_blocks.sum()) == 4 and bool((~dense_blocks).any())
    corner = (fmt.bridx == 96) & (fmt.bcidx == 64)
    assert bool(dense_blocks[corner].all()), "the corner block reaching past the edges is dense"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", list(HBELL_CASES))
def test_spmm_random_matrices(name, precision, n):
    check_spmm(name, precision, n)


@pytest.mark.parametrize("out_fp32", [False, True])
@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_spmm_input_and_output_dtypes(precision, x_dtype, out_fp32):
    for n in (33, 64):
        check_spmm("clustered_109x79", precision, n, x_dtype, out_fp32)
        check_spmm("hub_1003x20011", precision, n, x_dtype, out_fp32)


@pytest.mark.parametrize("precision,size", [("fp16", 32), ("fp16", 128), ("bf16", 33)])
@pytest.mark.parametrize("name", real_matrix_names())
def test_real_matrices(name, precision, size):
    check_spmm(name, precision, size)


@pytest.mark.parametrize("precision", ["tf32", "fp32"])
@pytest.mark.parametrize("name", real_matrix_names()[:3] + real_matrix_names()[-5:])
def test_real_matrices_tf32_and_fp32(name, precision):
    check_spmm(name, precision, 64)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", list(HBELL_CASES) + real_matrix_names()[:3])
def test_matches_cpu_emulation(name, precision):
    m = case(name)
    x = dense(m.shape[1], 64, name, "emulation")
    y = ops.spmm(hbell(name, DEVICE), x.to(DEVICE), precision, out_fp32=True)
    cpu = ops.spmm(hbell(name, "cpu"), x, precision, out_fp32=True)
    assert rel_err(y, cpu) <= EMULATION_BOUND


def test_gpu_builder_equals_cpu_builder():
    for name in list(HBELL_CASES) + real_matrix_names()[:3]:
        gpu, cpu = hbell(name, DEVICE), hbell(name, "cpu")
        for field in ("brow_ptr", "bcidx", "bcols", "brow_valptr", "values", "offsets", "perm"):
            assert torch.equal(getattr(gpu, field).cpu(), getattr(cpu, field)), (name, field)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_custom_values_ignore_padding_slots(precision):
    fmt = hbell("clustered_109x79", DEVICE)
    values = fmt.values.clone()
    padding = torch.ones(fmt.n_slots, dtype=torch.bool, device=DEVICE)
    padding[fmt.perm] = False
    values[padding] = 1e4
    values[fmt.perm] *= 2
    x = dense(79, 16, "custom").to(DEVICE)
    want = 2 * ops.spmm(fmt, x, precision, out_fp32=True)
    assert rel_err(ops.spmm(fmt, x, precision, values=values, out_fp32=True), want) <= 1e-5


def test_gradients_on_cuda_match_the_cpu():
    fmt_gpu, fmt_cpu = hbell("clustered_109x79", DEVICE), hbell("clustered_109x79", "cpu")
    x = dense(79, 8, "grad")
    grads = []
    for fmt, device in ((fmt_gpu, DEVICE), (fmt_cpu, "cpu")):
        xd = x.to(device).requires_grad_()
        v = fmt.values.clone().requires_grad_()
        ops.spmm(fmt, xd, "fp16", values=v).square().sum().backward()
        grads.append((xd.grad.cpu(), v.grad.cpu()))
    assert rel_err(grads[0][0], grads[1][0]) <= EMULATION_BOUND
    assert rel_err(grads[0][1], grads[1][1]) <= EMULATION_BOUND
