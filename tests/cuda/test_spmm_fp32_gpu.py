"""The exact fp32 SpMM (kernels/spmm_fp32.cu) against float64 scipy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn._cuda.spmm_fp32 import VARIANTS, spmm_fp32
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.ops import spmm
from tests.cuda.kernel_cases import CASES
from tests.helpers import GPU, rel_err

pytestmark = GPU

WIDTHS = [1, 7, 16, 33, 64, 128, 256]


def gpu_format(a: sp.csr_matrix, k: int) -> MEBCRS:
    return MEBCRS.from_csr(
        a.indptr, a.indices, torch.from_numpy(a.data), n_cols=a.shape[1], k=k
    ).to("cuda")


def run(f: MEBCRS, x: torch.Tensor, **split) -> torch.Tensor:
    return spmm_fp32(f.row_ptr, f.col_idx, f.vec_mask, f.values, x, f.n_rows, f.k, **split)


def poison_allocator(n_floats: int) -> None:
    """Leave NaN in the blocks the caching allocator hands out next, so an output element the
    kernel forgets to write shows up (the launcher allocates its output and workspace)."""
    for size in (n_floats, 8 * n_floats):
        torch.full((size,), float("nan"), device="cuda")


def assert_fp32_exact(y: torch.Tensor, a: sp.csr_matrix, x: torch.Tensor) -> None:
    """y against float64 scipy on the same fp32 inputs: Frobenius relative error at fp32
    accumulation level, and every element within 1e-5 of sum |a| |x| (its rounding scale)."""
    x64 = x.cpu().double().numpy()
    a64 = sp.csr_matrix(a, dtype=np.float64)
    ref = a64 @ x64
    scale = abs(a64) @ abs(x64)
    got = y.cpu().double().numpy()
    assert y.dtype == torch.float32 and y.shape == ref.shape
    assert np.isfinite(got).all(), "an output element was not written"
    assert rel_err(got, ref) < 2e-6
    assert np.all(np.abs(got - ref) <= 1e-5 * scale + 1e-30)


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("n", WIDTHS)
def test_hub_matrix_matches_scipy(n, k, rng):
    a = CASES["hub_1003x20011"](rng)
    f = gpu_format(a, k)
    x = torch.randn(a.shape[1], n, device="cuda")
    poison_allocator(a.shape[0] * n)
    assert_fp32_exact(run(f, x), a, x)


@pytest.mark.parametrize("case", [c for c in CASES if c != "hub_1003x20011"])
def test_small_matrices_match_scipy(case, rng):
    a = CASES[case](rng)
    for k, n in ((8, 7), (4, 128)):
        f = gpu_format(a, k)
        x = torch.randn(a.shape[1], n, device="cuda")
        assert_fp32_exact(run(f, x), a, x)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("lanes", [1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("seg_vectors", [32, 256])
def test_every_lane_layout_matches_scipy(lanes, seg_vectors, variant, rng):
    # lanes per vector x features per lane (16-byte loads at N = 64 and 128, single floats at
    # N = 7 and 97) x every variant (sums in registers or shared memory, gathers in flight,
    # the next batch prefetched or not)
    a = CASES["hub_1003x20011"](rng)
    f = gpu_format(a, 8)
    for n in (7, 64, 97, 128):
        x = torch.randn(a.shape[1], n, device="cuda")
        poison_allocator(a.shape[0] * n)
        assert_fp32_exact(run(f, x, lanes=lanes, seg_vectors=seg_vectors, variant=variant), a, x)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("lanes", [8, 16, 32])
def test_tf32_matches_cpu_emulation(lanes, variant, rng):
    a = CASES["hub_1003x20011"](rng)
    f = MEBCRS.from_csr(a.indptr, a.indices, torch.from_numpy(a.data), n_cols=a.shape[1], k=4)
    for n in (32, 100):
        x = torch.randn(a.shape[1], n)
        y = run(f.to("cuda"), x.cuda(), lanes=lanes, variant=variant, precision="tf32")
        assert rel_err(y.cpu(), spmm(f, x, "tf32")) <= 1e-5


def test_tf32_needs_16_byte_rows_of_8_lanes_or_more():
    a = CASES["hub_1003x20011"](np.random.default_rng(0))
    f = gpu_format(a, 4)
    with pytest.raises(ValueError, match="tf32 takes"):
        run(f, torch.randn(a.shape[1], 30, device="cuda"), precision="tf32")
    with pytest.raises(ValueError, match="tf32 takes"):
        run(f, torch.randn(a.shape[1], 64, device="cuda"), lanes=4, precision="tf32")


def test_deterministic_with_split_windows(rng):
    a = CASES["hub_1003x20011"](rng)
    f = gpu_format(a, 8)
    for n in (7, 64, 128):  # the groups' butterfly, 16-byte loads, sums in shared memory
        x = torch.randn(a.shape[1], n, device="cuda")
        assert torch.equal(run(f, x), run(f, x))


def test_misaligned_and_half_inputs(rng):
    a = CASES["square_61x61"](rng)
    f = gpu_format(a, 8)
    base = torch.randn(61 * 128 + 1, device="cuda")
    x = base[1:].view(61, 128)  # contiguous, 4 bytes past a 16-byte boundary
    assert x.data_ptr() % 16 != 0
    assert_fp32_exact(run(f, x), a, x)
    xh = torch.randn(61, 96, device="cuda").half()
    assert_fp32_exact(run(f, xh), a, xh.float())


def test_padding_slots_never_meet_x():
    # rows 0 and 1 share a window; x[0] = inf is a neighbour of row 0 only
    a = sp.csr_matrix(
        (np.array([2.0, 3.0], np.float32), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2)
    )
    f = gpu_format(a, 8)
    x = torch.tensor([[float("inf"), 1.0], [1.0, float("nan")]], device="cuda")
    y = run(f, x).cpu()
    assert y[0, 0] == float("inf") and y[0, 1] == 2.0
    assert y[1, 0] == 3.0 and torch.isnan(y[1, 1])


def test_empty_shapes(rng):
    a = CASES["square_61x61"](rng)
    f = gpu_format(a, 8)
    assert run(f, torch.randn(61, 0, device="cuda")).shape == (61, 0)
    z = gpu_format(sp.csr_matrix((10, 5), dtype=np.float32), 8)
    assert torch.equal(run(z, torch.randn(5, 33, device="cuda")).cpu(), torch.zeros(10, 33))


@pytest.mark.parametrize("name", ["cora", "musae_github"])
def test_dataset_graph(name, load_graph, rng):
    a = load_graph(name)
    a.data = rng.uniform(0.5, 1.5, a.nnz).astype(np.float32)
    for k, n in ((8, 128), (4, 33)):
        f = gpu_format(a, k)
        x = torch.randn(a.shape[1], n, device="cuda")
        assert_fp32_exact(run(f, x), a, x)


def test_bad_inputs_are_clear_errors(rng):
    f = gpu_format(CASES["square_61x61"](rng), 8)
    x = torch.randn(61, 4, device="cuda")
    with pytest.raises(ValueError, match="float64 takes the reference"):
        run(f, x.double())
    with pytest.raises(ValueError, match="x must be 2-D"):
        run(f, x[:, 0])
    with pytest.raises(ValueError, match="one CUDA device"):
        spmm_fp32(f.row_ptr, f.col_idx, f.vec_mask, f.values, x.cpu(), f.n_rows, 8)
    with pytest.raises(ValueError, match="windows"):
        spmm_fp32(f.row_ptr, f.col_idx, f.vec_mask, f.values, x, 100, 8)
    with pytest.raises(ValueError, match="lanes must be one of"):
        run(f, x, lanes=3)
