"""flashgnn.ops.spmm on HB-ELL, on the CPU: against float64 scipy in every precision and against
float64 maths on the rounded inputs, gradcheck in float64, the split into dense and sparse
blocks that the CUDA emulation runs (checked here with torch), and the errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import ops
from flashgnn.formats import HBELL
from flashgnn.ops import hbell as hbell_ops
from tests.format.test_hbell import clustered_and_scattered
from tests.helpers import rel_err
from tests.ops.test_ops_cpu import (
    PRECISIONS,
    WIDTHS,
    check_spmm_matches_float64,
)


@pytest.fixture
def pair(rng):
    """(scipy matrix, its HB-ELL): 45 x 70 with dense blocks, ELL blocks of width 1 to 16 and
    an empty block row."""
    a = clustered_and_scattered(rng).astype(np.float32)
    return a, HBELL.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1])


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_spmm_matches_float64_scipy(precision, n, pair):
    check_spmm_matches_float64(pair[1], pair[0], precision, n)


def test_dtypes_float64_and_out_fp32(pair):
    a, fmt = pair
    x16 = torch.randn(a.shape[1], 9).half()
    assert ops.spmm(fmt, x16, "fp16").dtype == torch.float16
    assert ops.spmm(fmt, x16, "fp16", out_fp32=True).dtype == torch.float32
    y64 = ops.spmm(fmt, x16.double())
    assert y64.dtype == torch.float64
    assert rel_err(y64, a.astype(np.float64) @ x16.double().numpy()) <= 1e-12


def test_custom_values_ignore_padding_slots(pair):
    a, fmt = pair
    values = fmt.values.clone()
    padding = torch.ones(fmt.n_slots, dtype=torch.bool)
    padding[fmt.perm] = False
    values[padding] = 1e6
    x = torch.randn(a.shape[1], 5)
    want = a.astype(np.float64) @ x.double().numpy()
    assert rel_err(ops.spmm(fmt, x, values=values), want) <= 1e-6


def test_gradcheck_float64(rng):
    d = np.where(rng.random((20, 35)) < 0.2, rng.random((20, 35)) + 0.5, 0)
    d[:16, 16:32] = np.where(rng.random((16, 16)) < 0.9, rng.random((16, 16)) + 0.5, 0)
    a = sp.csr_matrix(d)
    fmt = HBELL.from_csr(a.indptr, a.indices, a.data, n_cols=35)
    assert fmt.n_dense_blocks == 1 and fmt.n_blocks > 1
    v = fmt.values.clone().requires_grad_()
    x = torch.randn(35, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, x: ops.spmm(fmt, x, values=v), (v, x))


def test_the_emulations_split_adds_up_to_the_matrix(pair):
    """The CUDA path's operands, evaluated with torch: the sparse blocks' ME-BCRS plus the
    dense blocks listed per block row is the whole matrix, every nonzero counted once."""
    a, fmt = pair
    plan = hbell_ops._build_plan(fmt)
    assert plan.n_dense == fmt.n_dense_blocks and plan.n_sparse + 256 * 2 >= a.nnz
    x = torch.randn(a.shape[1], 6, dtype=torch.float64)
    y = ops.spmm(hbell_ops._sparse_part(fmt, plan, 8), x)
    xp = torch.cat([x, x.new_zeros(16, 6)])  # a block's columns past n_cols read as 0
    for w in range(fmt.n_brows):
        for b in range(int(plan.dense_ptr[w]), int(plan.dense_ptr[w + 1])):
            c, v = int(plan.dense_col[b]), int(plan.dense_val[b])
            block = fmt.values[v : v + 256].view(16, 16).double()
            rows = min(16, a.shape[0] - 16 * w)
            y[16 * w : 16 * w + rows] += (block @ xp[c : c + 16])[:rows]
    assert rel_err(y, a.astype(np.float64) @ x.numpy()) <= 1e-6
    assert hbell_ops._sparse_part(fmt, plan, 4).k == 4


def test_plans_are_cached_per_value_tensor(pair):
    _, fmt = pair
    first = hbell_ops._plan(fmt)
    assert hbell_ops._plan(fmt) is first
    assert hbell_ops._plan(fmt.with_values(fmt.values.clone())) is not first


def test_bad_inputs(pair):
    a, fmt = pair
    x = torch.randn(a.shape[1], 4)
    with pytest.raises(ValueError, match=rf"values must have shape \({fmt.n_slots},\)"):
        ops.spmm(fmt, x, values=torch.ones(fmt.n_slots + 1))
    with pytest.raises(ValueError, match="values must be floating point"):
        ops.spmm(fmt, x, values=torch.ones(fmt.n_slots, dtype=torch.int32))
    with pytest.raises(ValueError, match="x must have 70 rows"):
        ops.spmm(fmt, x[:28])
    with pytest.raises(ValueError, match="precision must be one of"):
        ops.spmm(fmt, x, "fp8")
    with pytest.raises(TypeError, match="sddmm has no implementation for HBELL"):
        ops.sddmm(fmt, torch.randn(a.shape[0], 4), x)
