"""flashgnn.ops.spmm and sddmm on the 16x1 baseline format, on the CPU: against float64 scipy
within the bounds of the 8x1 ops, the precision emulation, agreement with ME-BCRS, and the
forward-only and bad-input errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import MEBCRS, ops
from tests.helpers import rel_err
from tests.ops.test_ops_cpu import (
    PRECISIONS,
    WIDTHS,
    check_sddmm_matches_float64,
    check_spmm_matches_float64,
    directed,
)


@pytest.fixture
def pair(rng):
    """(scipy matrix, its 16x1 format, its ME-BCRS): 37 x 29, empty rows, a last partial window."""
    a, fmt8 = directed(rng, 8)
    return a, MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1], vector=16), fmt8


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_spmm_matches_float64_scipy(precision, n, pair):
    a, fmt, fmt8 = pair
    x, y = check_spmm_matches_float64(fmt, a, precision, n)
    assert rel_err(y, ops.spmm(fmt8, x, precision)) <= 1e-6


@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_sddmm_matches_float64_and_leaves_padding_zero(precision, n, pair):
    a, fmt, fmt8 = pair
    u, w, out = check_sddmm_matches_float64(fmt, a, precision, n)
    assert not out[~fmt.real_slots()].any(), "a padding slot is not 0"
    assert rel_err(out[fmt.perm], ops.sddmm(fmt8, u, w, precision)[fmt8.perm]) <= 1e-6


def test_dtypes_float64_and_out_fp32(pair):
    a, fmt, _ = pair
    x16 = torch.randn(a.shape[1], 9).half()
    assert ops.spmm(fmt, x16, "fp16").dtype == torch.float16
    assert ops.spmm(fmt, x16, "fp16", out_fp32=True).dtype == torch.float32
    y64 = ops.spmm(fmt, x16.double())
    assert (
        y64.dtype == torch.float64
        and rel_err(y64, a.astype(np.float64) @ x16.double().numpy()) <= 1e-12
    )
    assert (
        ops.sddmm(fmt, torch.randn(a.shape[0], 3).double(), x16[:, :3].double()).dtype
        == torch.float64
    )


def test_custom_values_ignore_padding_slots(pair):
    a, fmt, _ = pair
    values = fmt.values.clone()
    values[~fmt.real_slots()] = 1e6
    x = torch.randn(a.shape[1], 5)
    assert (
        rel_err(ops.spmm(fmt, x, values=values), a.astype(np.float64) @ x.double().numpy()) <= 1e-6
    )


def test_gradients_are_a_clear_error(pair):
    a, fmt, _ = pair
    x = torch.randn(a.shape[1], 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="forward-only benchmark baseline"):
        ops.spmm(fmt, x, "fp16")
    with pytest.raises(RuntimeError, match="forward-only benchmark baseline"):
        ops.spmm(fmt, x.detach(), values=fmt.values.clone().requires_grad_())
    with pytest.raises(RuntimeError, match="forward-only benchmark baseline"):
        ops.sddmm(fmt, torch.randn(a.shape[0], 4), x)
    with torch.no_grad():
        assert ops.spmm(fmt, x, "fp16").shape == (a.shape[0], 4)


def test_bad_inputs(pair):
    a, fmt, _ = pair
    x = torch.randn(a.shape[1], 4)
    with pytest.raises(ValueError, match=rf"values must have shape \({fmt.n_slots},\)"):
        ops.spmm(fmt, x, values=torch.ones(8 * fmt.n_vectors))
    with pytest.raises(ValueError, match="x must have 29 rows"):
        ops.spmm(fmt, x[:28])
    with pytest.raises(ValueError, match="precision must be one of"):
        ops.sddmm(fmt, torch.randn(a.shape[0], 4), x, "fp8")
    with pytest.raises(ValueError, match="same number of columns"):
        ops.sddmm(fmt, torch.randn(a.shape[0], 3), x)
