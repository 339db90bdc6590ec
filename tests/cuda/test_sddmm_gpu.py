"""flashgnn.ops.sddmm on CUDA tensors against float64 and against the CPU implementation of
the same precision: every real nonzero slot right, every padding slot exactly 0, nothing left
unwritten (the allocator is poisoned with NaN before every call)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn._cuda import sddmm as cuda_sddmm
from flashgnn.ops import sddmm
from tests.cuda.kernel_cases import CASES
from tests.helpers import GPU, rel_err
from tests.ops.gpu_op_checks import (
    BOUND,
    EMULATION_BOUND,
    PRECISIONS,
    SIZES,
    csr_rows,
    default_k,
    dense,
    in_both_segment_orders,
    matrix,
    mebcrs,
    real_matrix_names,
    run_twice_poisoned,
)

pytestmark = GPU

DEVICE = "cuda"
HUB = "hub_1003x20011"


def reference(name: str, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """float64 x[i] . y[j] for every nonzero (i, j) of the matrix, in CSR order."""
    m = matrix(name)
    x64, y64 = x.double().numpy(), y.double().numpy()
    return np.einsum("ij,ij->i", x64[csr_rows(m)], y64[m.indices])


def padding_mask(perm: torch.Tensor, n_slots: int) -> torch.Tensor:
    """True at the value slots outside the sparsity pattern."""
    mask = torch.ones(n_slots, dtype=torch.bool, device=perm.device)
    mask[perm] = False
    return mask


def check_sddmm(
    name: str,
    precision: str,
    k_dim: int,
    *,
    k: int | None = None,
    dtype=torch.float32,
    offset: int = 0,
) -> None:
    """Run sddmm twice on NaN-poisoned memory; dtype and shape, padding slots exactly 0, real
    slots within the bound of ``precision`` against float64. ``offset`` > 0 makes X and Y start
    that many elements into their buffers (misaligned for vector loads)."""
    k = k or default_k(precision)
    fmt = mebcrs(name, k, DEVICE)
    n_rows, n_cols = fmt.shape
    x = dense(n_rows, k_dim, name, "x").to(dtype)
    y = dense(n_cols, k_dim, name, "y").to(dtype)
    x_dev, y_dev = (
        torch.cat([t.new_zeros(offset), t.flatten()]).to(DEVICE)[offset:].view(t.shape)
        for t in (x, y)
    )
    ref = reference(name, x, y)
    padding = padding_mask(fmt.perm, 8 * fmt.n_vectors)
    for out in run_twice_poisoned(lambda: sddmm(fmt, x_dev, y_dev, precision), DEVICE):
        assert (
            out.device.type == "cuda"
            and out.dtype == torch.float32
            and out.shape == (8 * fmt.n_vectors,)
        )
        assert not torch.isnan(out).any(), (
            "a value slot was not written (NaN from the poisoned allocator)"
        )
        assert torch.count_nonzero(out[padding]) == 0, (
            "a slot outside the sparsity pattern is not 0"
        )
        assert rel_err(out[fmt.perm], ref) <= BOUND[precision]


@pytest.mark.parametrize("k_dim", SIZES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", list(CASES))
def test_random_matrices(name, precision, k_dim):
    """n not a multiple of 8, empty rows and windows, a 20,000-nonzero hub row, windows of
    exactly k and k + 1 vectors, rectangular and all-empty matrices."""
    check_sddmm(name, precision, k_dim)


@pytest.mark.parametrize("k_dim", [4, 5, 8, 12, 16, 17])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("name", list(CASES) + real_matrix_names()[:2])
def test_short_chunks_at_small_k(name, precision, k_dim):
    """16-bit operands at K <= 8 take chunks of 8 features (4-byte runs, one MMA; K = 8 with
    aligned rows without per-load checks, 4 and 5 unaligned), at K <= 16 chunks of 16 (8-byte
    runs, two MMAs; 16 without checks, 12 unaligned), 17 the chunks of 32."""
    check_sddmm(name, precision, k_dim)


@pytest.mark.parametrize("precision,k", [("tf32", 8), ("fp16", 4), ("bf16", 4), ("fp32", 4)])
@pytest.mark.parametrize("k_dim", [7, 64])
def test_other_block_width(precision, k, k_dim):
    check_sddmm(HUB, precision, k_dim, k=k)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_input_dtypes(precision, dtype):
    check_sddmm(HUB, precision, 33, dtype=dtype)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_misaligned_inputs(precision):
    check_sddmm("square_61x61", precision, 64, dtype=torch.float32, offset=1)
    check_sddmm("square_61x61", precision, 64, dtype=torch.float16, offset=3)


@pytest.mark.parametrize(
    "precision,k_dim", [(p, 33) for p in PRECISIONS] + [("fp16", 128), ("tf32", 128), ("fp32", 128)]
)
@pytest.mark.parametrize("name", real_matrix_names())
def test_real_matrices(name, precision, k_dim):
    check_sddmm(name, precision, k_dim)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", list(CASES) + real_matrix_names()[:3])
def test_matches_cpu_emulation(name, precision):
    k = default_k(precision)
    n_rows, n_cols = matrix(name).shape
    x, y = dense(n_rows, 64, name, "emulation x"), dense(n_cols, 64, name, "emulation y")
    gpu = sddmm(mebcrs(name, k, DEVICE), x.to(DEVICE), y.to(DEVICE), precision)
    cpu = sddmm(mebcrs(name, k, "cpu"), x, y, precision)
    assert rel_err(gpu, cpu) <= EMULATION_BOUND


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gradients_match_cpu_and_float64(precision):
    """dX = S Y and dY = S^T X, S the upstream gradient on A's pattern, on a directed
    rectangular matrix. The upstream gradient is random on the padding slots too: those
    outputs are constant 0, so their gradient must not reach X or Y."""
    m = matrix(HUB)
    k = default_k(precision)
    x, y = dense(m.shape[0], 33, "grad x"), dense(m.shape[1], 33, "grad y")
    n_slots = 8 * mebcrs(HUB, k, "cpu").n_vectors
    grad_out = dense(n_slots, 1, "grad out").flatten()
    grads = {}
    for device in ("cpu", DEVICE):
        fmt = mebcrs(HUB, k, device)
        xd, yd = x.to(device, copy=True).requires_grad_(), y.to(device, copy=True).requires_grad_()
        sddmm(fmt, xd, yd, precision).backward(grad_out.to(device))
        grads[device] = (xd.grad.cpu(), yd.grad.cpu())
    (dx_cpu, dy_cpu), (dx_gpu, dy_gpu) = grads["cpu"], grads[DEVICE]
    assert rel_err(dx_gpu, dx_cpu) <= EMULATION_BOUND
    assert rel_err(dy_gpu, dy_cpu) <= EMULATION_BOUND

    perm = mebcrs(HUB, k, "cpu").perm
    s = sp.csr_matrix((grad_out[perm].double().numpy(), m.indices, m.indptr), shape=m.shape)
    assert rel_err(dx_gpu, s @ y.double().numpy()) <= BOUND[precision]
    assert rel_err(dy_gpu, s.T @ x.double().numpy()) <= BOUND[precision]


@pytest.mark.parametrize("k_dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("name", [HUB, "square_61x61"] + real_matrix_names()[:2])
def test_tf32_on_cuda_cores_matches_cpu_emulation(name, k_dim, monkeypatch):
    # every layout of the rows kernel, inputs rounded as read, as on a large graph of short windows
    monkeypatch.setattr(cuda_sddmm, "TF32_LARGE_VECTORS", 1)
    monkeypatch.setattr(cuda_sddmm, "column_ordered", lambda n_vectors, n_windows: False)
    n_rows, n_cols = matrix(name).shape
    x, y = dense(n_rows, k_dim, name, "tf32 x"), dense(n_cols, k_dim, name, "tf32 y")
    x_dev, y_dev = x.to(DEVICE), y.to(DEVICE)
    fmt = mebcrs(name, 4, DEVICE)
    assert cuda_sddmm.tf32_on_cuda_cores(x_dev, y_dev, fmt.n_vectors, fmt.n_windows)
    gpu = sddmm(fmt, x_dev, y_dev, "tf32")
    cpu = sddmm(mebcrs(name, 4, "cpu"), x, y, "tf32")
    assert rel_err(gpu, cpu) <= EMULATION_BOUND
    assert rel_err(gpu[fmt.perm], reference(name, x, y)) <= BOUND["tf32"]


@pytest.mark.parametrize("k_dim", [32, 300])
@pytest.mark.parametrize("name", [HUB] + real_matrix_names()[:3])
def test_fp32_lane_per_vector_kernel_walks_set_bits_or_steps_rows_to_the_same_bits(name, k_dim):
    # the lane-per-vector kernel, either path: K = 300 (chunks of 64), and K = 32 with x not
    # 16-byte aligned (the rows kernel takes aligned operands up to K = 256)
    fmt = mebcrs(name, 8, DEVICE)
    x, y = dense(fmt.n_rows, k_dim, name, "walk x"), dense(fmt.n_cols, k_dim, name, "walk y")
    x_dev = torch.empty(x.numel() + 1, device=DEVICE)[1:].view_as(x).copy_(x)
    assert not cuda_sddmm._rows_kernel(x_dev, y.to(DEVICE))
    walked, stepped = (
        cuda_sddmm.sddmm_cuda_cores(
            fmt.row_ptr, fmt.col_idx, fmt.vec_mask, x_dev, y.to(DEVICE), 8, walk=walk
        )
        for walk in (True, False)
    )
    assert torch.equal(walked, stepped)
    assert rel_err(walked[fmt.perm], reference(name, x, y)) <= BOUND["fp32"]
    assert not walked[padding_mask(fmt.perm, walked.numel())].any()


@pytest.mark.parametrize("precision", ["fp16", "tf32", "fp32"])
@pytest.mark.parametrize("name", [HUB] + real_matrix_names()[:2])
def test_column_ordered_segments_give_the_same_bits(name, precision, monkeypatch):
    """Segments ordered by column (long-row graphs) and longest first: the same bits."""
    fmt = mebcrs(name, default_k(precision), "cuda")
    x, y = dense(fmt.n_rows, 32, name, "x").cuda(), dense(fmt.n_cols, 32, name, "y").cuda()
    results = [sddmm(fmt, x, y, precision) for _ in in_both_segment_orders(monkeypatch, fmt)]
    assert torch.equal(results[0], results[1])
