"""The GPU ME-BCRS builder (kernels/mebcrs_build.cu) against the CPU reference builder: every
array identical, on random matrices, on every graph of ../shared/datasets and on DLMC
weight matrices, for both block widths."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn.formats.mebcrs import MEBCRS
from tests.cuda.kernel_cases import CASES
from tests.helpers import GPU, dlmc_spread, graph_names, load_dlmc, random_values

pytestmark = GPU

FIELDS = ("row_ptr", "col_idx", "perm", "vec_mask", "values")


def assert_identical(got: MEBCRS, ref: MEBCRS) -> None:
    assert (got.n_rows, got.n_cols, got.k) == (ref.n_rows, ref.n_cols, ref.k)
    for name in FIELDS:
        g, r = getattr(got, name), getattr(ref, name)
        assert g.is_cuda, f"{name} is on {g.device}"
        assert g.dtype == r.dtype, f"{name}: {g.dtype} vs {r.dtype}"
        assert torch.equal(g.cpu(), r), f"{name} differs from the CPU reference"


def build_both(
    a: sp.csr_matrix, k: int, values: torch.Tensor | None = None
) -> tuple[MEBCRS, MEBCRS]:
    """(GPU build from GPU tensors, CPU reference build) of ``a``."""
    indptr = torch.from_numpy(a.indptr.astype(np.int64))
    indices = torch.from_numpy(a.indices.astype(np.int64))
    values = torch.from_numpy(a.data) if values is None else values
    ref = MEBCRS.from_csr(indptr, indices, values, n_cols=a.shape[1], k=k)
    got = MEBCRS.from_csr(
        indptr.cuda(), indices.cuda(), values.cuda(), n_cols=a.shape[1], k=k, device="cuda"
    )
    return got, ref


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_random_matrix_identical_to_reference(case, k, rng):
    a = CASES[case](rng)
    got, ref = build_both(a, k)
    assert_identical(got, ref)
    got.validate()


@pytest.mark.parametrize("shape", [(0, 3), (5, 0), (10, 5)])
def test_matrices_without_nonzeros(shape):
    a = sp.csr_matrix(shape, dtype=np.float32)
    got, ref = build_both(a, 8)
    assert_identical(got, ref)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_value_dtypes(dtype, rng):
    a = CASES["square_61x61"](rng)
    got, ref = build_both(a, 4, torch.from_numpy(random_values(a.nnz, rng)).to(dtype))
    assert got.values.dtype == dtype
    assert_identical(got, ref)


def test_host_csr_with_int32_indices_built_on_the_gpu(rng):
    a = CASES["hub_1003x20011"](rng)
    got = MEBCRS.from_csr(a.indptr, a.indices, torch.from_numpy(a.data), k=8, device="cuda")
    ref = MEBCRS.from_csr(a.indptr, a.indices, torch.from_numpy(a.data), k=8)
    assert_identical(got, ref)


@pytest.mark.parametrize("k", [8, 4])
def test_transpose_built_on_the_gpu(k, rng):
    a = CASES["hub_1003x20011"](rng)
    got, ref = build_both(a, k)
    gt, rt = got.transpose(), ref.transpose()
    assert_identical(gt.fmt, rt.fmt)
    assert torch.equal(gt.src_slot.cpu(), rt.src_slot)


@pytest.mark.parametrize("name", graph_names())
def test_dataset_graph_identical_to_reference(name, load_graph, rng):
    a = load_graph(name)
    a.data = random_values(a.nnz, rng).astype(np.float32)
    for k in (8, 4):
        got, ref = build_both(a, k)
        assert_identical(got, ref)


def test_dlmc_sample_identical_to_reference(data_dir, rng):
    # 16 matrices: every sparsity level, square and rectangular layers
    sample = dlmc_spread(16)
    for i, (name, a) in zip(sample, load_dlmc(sample)):
        a.data = random_values(a.nnz, rng).astype(np.float32)
        got, ref = build_both(a, 8 if i % 40 == 0 else 4)
        assert_identical(got, ref)
