"""flashgnn.ops.spmm on CUDA tensors (the tensor-core kernels, and the fp32 path) against
float64 scipy and against the CPU implementation of the same precision; outputs are checked
for unwritten elements by poisoning the allocator with NaN before every call."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn._cuda import spmm as cuda_spmm
from flashgnn._cuda import spmm_fp32 as cuda_spmm_fp32
from flashgnn.ops import spmm
from tests.cuda.kernel_cases import CASES
from tests.helpers import GPU, rel_err
from tests.ops.gpu_op_checks import (
    BOUND,
    EMULATION_BOUND,
    PRECISIONS,
    SIZES,
    STORAGE,
    bound,
    csr_rows,
    default_k,
    dense,
    in_both_segment_orders,
    matrix,
    mebcrs,
    poisoned_allocations,
    real_matrix_names,
    run_twice_poisoned,
)

pytestmark = GPU

DEVICE = "cuda"
HUB = "hub_1003x20011"


def reference(name: str, x: torch.Tensor, values_dtype=torch.float32) -> np.ndarray:
    """float64 A @ x with A's values as the op gets them (rounded to ``values_dtype``)."""
    m = matrix(name)
    values = torch.from_numpy(m.data).to(values_dtype).double().numpy()
    return sp.csr_matrix((values, m.indices, m.indptr), shape=m.shape) @ x.double().numpy()


def check_spmm(
    name: str,
    precision: str,
    n: int,
    *,
    k: int | None = None,
    x_dtype=torch.float32,
    values_dtype=torch.float32,
    out_fp32: bool = False,
    x_offset: int = 0,
) -> None:
    """Run spmm twice on NaN-poisoned memory; dtype, shape, every element written, and the
    relative error bound of ``precision`` against float64. ``x_offset`` > 0 makes X start
    that many elements into its buffer (misaligned for vector loads)."""
    k = k or default_k(precision)
    fmt = mebcrs(name, k, DEVICE)
    n_rows, n_cols = fmt.shape
    x = dense(n_cols, n, name).to(x_dtype)
    x_dev = torch.cat([x.new_zeros(x_offset), x.flatten()]).to(DEVICE)[x_offset:].view(n_cols, n)
    values = fmt.values.to(values_dtype)
    ref = reference(name, x, values_dtype)
    out_dtype = torch.float32 if out_fp32 else x_dtype
    for y in run_twice_poisoned(
        lambda: spmm(fmt, x_dev, precision, values=values, out_fp32=out_fp32), DEVICE
    ):
        assert y.device.type == "cuda" and y.dtype == out_dtype and y.shape == (n_rows, n)
        assert not torch.isnan(y).any(), (
            "an output element was not written (NaN from the poisoned allocator)"
        )
        assert rel_err(y, ref) <= bound(precision, out_dtype)


def test_poison_reaches_new_allocations():
    """gpu_op_checks.poisoned_allocations: fresh outputs of every size and dtype the ops
    allocate read back as NaN until written, and torch.empty is restored afterwards."""
    real_empty = torch.empty
    with poisoned_allocations():
        for shape, dtype in [
            ((3, 5), torch.float16),
            ((1003, 33), torch.bfloat16),
            ((1, 1), torch.float32),
            ((8 * 20_000,), torch.float32),
            ((4096, 4096), torch.float32),
        ]:
            assert torch.isnan(torch.empty(shape, dtype=dtype, device=DEVICE)).all(), (shape, dtype)
    assert torch.empty is real_empty


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", list(CASES))
def test_random_matrices(name, precision, n):
    """n not a multiple of 8, empty rows and windows, a 20,000-nonzero hub row, windows of
    exactly k and k + 1 vectors, rectangular and all-empty matrices."""
    check_spmm(name, precision, n)


@pytest.mark.parametrize("precision,k", [("tf32", 8), ("fp16", 4), ("bf16", 4), ("fp32", 4)])
@pytest.mark.parametrize("n", [7, 64])
def test_other_block_width(precision, k, n):
    check_spmm(HUB, precision, n, k=k)


@pytest.mark.parametrize("out_fp32", [False, True])
@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_input_dtypes_and_out_fp32(precision, x_dtype, out_fp32):
    """X (and A's values) in fp16/bf16/fp32 under every precision; output in X's dtype or fp32."""
    check_spmm(HUB, precision, 33, x_dtype=x_dtype, values_dtype=x_dtype, out_fp32=out_fp32)


def test_gat_attention_checked():
    """GAT's attention: fp16/bf16 at block width 8 and tf32 at 4 only, instead of values, el and
    the row records sized for the pattern."""
    fmt = mebcrs(HUB, 8, DEVICE)
    x = torch.randn(fmt.n_cols, 16, device=DEVICE)
    el, records = (
        torch.zeros(fmt.n_cols, device=DEVICE),
        torch.ones(8 * fmt.n_windows, 4, device=DEVICE),
    )
    args = (fmt.row_ptr, fmt.col_idx, fmt.vec_mask)

    def launch(values, gat, precision="fp16", k=8):
        cuda_spmm.spmm_tensor_core(
            *args, values, x, fmt.n_rows, k, precision, torch.float32, gat=gat
        )

    gat = cuda_spmm.GatAttention(el, records, 0.2, transposed=False)
    with pytest.raises(ValueError, match="fp16/bf16 at block width 8 and tf32 at 4"):
        launch(None, gat, "tf32")
    with pytest.raises(ValueError, match="fp16/bf16 at block width 8 and tf32 at 4"):
        launch(None, gat, k=4)
    with pytest.raises(ValueError, match="not both"):
        launch(fmt.values, gat)
    with pytest.raises(ValueError, match="not both"):
        launch(None, None)
    with pytest.raises(ValueError, match=rf"el must be \[{fmt.n_cols}\]"):
        launch(None, gat._replace(el=el[1:]))
    with pytest.raises(ValueError, match=r"row records"):
        launch(None, gat._replace(row_info=records[8:]))
    with pytest.raises(ValueError, match=rf"el must be \[{fmt.n_rows}\]"):  # P^T: el per row
        launch(None, gat._replace(transposed=True))


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_misaligned_x(precision):
    check_spmm("square_61x61", precision, 64, x_dtype=torch.float32, x_offset=1)
    check_spmm("square_61x61", precision, 64, x_dtype=torch.float16, x_offset=3)


@pytest.mark.parametrize(
    "precision,n", [(p, 33) for p in PRECISIONS] + [("fp16", 128), ("tf32", 128)]
)
@pytest.mark.parametrize("name", real_matrix_names())
def test_real_matrices(name, precision, n):
    check_spmm(name, precision, n)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", list(CASES) + real_matrix_names()[:3])
def test_matches_cpu_emulation(name, precision):
    """The GPU result equals the CPU implementation of the same precision up to fp32
    accumulation order (fp32 outputs, so no output rounding can differ)."""
    k = default_k(precision)
    x = dense(matrix(name).shape[1], 64, name, "emulation")
    gpu = spmm(mebcrs(name, k, DEVICE), x.to(DEVICE), precision, out_fp32=True)
    cpu = spmm(mebcrs(name, k, "cpu"), x, precision, out_fp32=True)
    assert rel_err(gpu, cpu) <= EMULATION_BOUND


def test_tf32_on_cuda_cores_matches_cpu_emulation(monkeypatch):
    # the op's dispatch to tf32 on CUDA cores (inputs rounded as read), here from 1000 vectors
    monkeypatch.setattr(cuda_spmm_fp32, "TF32_LARGE_VECTORS", 1000)
    name = "hub_1003x20011"
    x = dense(matrix(name).shape[1], 32, name, "tf32 on CUDA cores")
    x_dev = x.to(DEVICE)
    fmt = mebcrs(name, 4, DEVICE)
    assert fmt.n_vectors >= 1000 and cuda_spmm_fp32.tf32_on_cuda_cores(x_dev, fmt.n_vectors)
    gpu = spmm(fmt, x_dev, "tf32")
    assert rel_err(gpu, spmm(mebcrs(name, 4, "cpu"), x, "tf32")) <= EMULATION_BOUND
    assert rel_err(gpu, reference(name, x)) <= BOUND["tf32"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gradients_match_cpu_and_float64(precision):
    """dX = A^T dY and dvalues = SDDMM(dY, X) on a directed rectangular matrix (an A for A^T
    mix-up cannot pass), on the GPU against the CPU and against float64."""
    m = matrix(HUB)
    k = default_k(precision)
    x = dense(m.shape[1], 33, "grad x")
    dy = dense(m.shape[0], 33, "grad dy")
    grads = {}
    for device in ("cpu", DEVICE):
        fmt = mebcrs(HUB, k, device)
        values = fmt.values.clone().requires_grad_()
        xd = x.to(device, copy=True).requires_grad_()
        spmm(fmt, xd, precision, values=values).backward(dy.to(device))
        assert torch.equal(fmt.perm.cpu(), mebcrs(HUB, k, "cpu").perm)
        grads[device] = (xd.grad.cpu(), values.grad.cpu())
    (dx_cpu, dv_cpu), (dx_gpu, dv_gpu) = grads["cpu"], grads[DEVICE]
    perm = mebcrs(HUB, k, "cpu").perm
    assert rel_err(dx_gpu, dx_cpu) <= EMULATION_BOUND
    assert rel_err(dv_gpu, dv_cpu) <= EMULATION_BOUND
    padding = torch.ones(dv_gpu.numel(), dtype=torch.bool)
    padding[perm] = False
    assert torch.count_nonzero(dv_gpu[padding]) == 0, (
        "a value slot outside the pattern got a gradient"
    )

    a64 = sp.csr_matrix(m, dtype=np.float64)
    dy64, x64 = dy.double().numpy(), x.double().numpy()
    assert rel_err(dx_gpu, a64.T @ dy64) <= BOUND[precision]
    dv_ref = np.einsum("ij,ij->i", dy64[csr_rows(m)], x64[m.indices])
    assert rel_err(dv_gpu[perm], dv_ref) <= BOUND[precision]


def same_bits_in_every_configuration(fmt, x, precision, configurations) -> torch.Tensor:
    """The tensor-core SpMM of ``fmt`` (segments of 64 vectors) and x in each configuration
    (keyword arguments of ``spmm_tensor_core``), twice each with poisoned allocations: every
    element written and every result the same bits. Returns the result."""
    results = []
    for config in configurations:
        for y in run_twice_poisoned(
            lambda: cuda_spmm.spmm_tensor_core(
                fmt.row_ptr,
                fmt.col_idx,
                fmt.vec_mask,
                fmt.values,
                x,
                fmt.n_rows,
                fmt.k,
                precision,
                torch.float32,
                seg_vectors=64,
                **config,
            ),
            DEVICE,
        ):
            assert not torch.isnan(y).any(), "an output element was not written"
            results.append(y)
    assert all(torch.equal(y, results[0]) for y in results)
    return results[0]


@pytest.mark.parametrize("ways", [1, 2, 4])
@pytest.mark.parametrize(
    "precision,n",
    [
        ("fp16", 32),
        ("bf16", 64),
        ("tf32", 128),
        ("fp16", 256),
        ("fp16", 33),
        ("tf32", 40),
        ("tf32", 37),
    ],
)
@pytest.mark.parametrize("name", [HUB] + real_matrix_names()[:4])
def test_split_windows_summed_in_kernel_or_apart_give_the_same_bits(name, precision, n, ways):
    """Split windows summed in the SpMM kernel by the segment that finishes last (fuse_max_parts
    large), by the spmm_reduce launch (0), or both in one call (2), with 4 or 8 features per
    lane: the same bits (the same sums in the same order), on repeated calls too (the in-kernel
    counters are back at zero after each), every element written, and within the precision's
    bound of float64, whether each segment's vectors are taken by one warp or split 2 or 4 ways.
    N = 33 and 37 are not fused (unaligned rows); at N = 40 with 8 features per lane, three of
    the eight lanes sharing a vector are past N."""
    k = default_k(precision)
    fmt = mebcrs(name, k, DEVICE)
    x = dense(fmt.n_cols, n, name, "split").to(STORAGE[precision]).to(DEVICE)
    configurations = [
        dict(fuse_max_parts=fuse, features=features, ways=ways)
        for fuse, features in [(1 << 30, 4), (0, 4), (2, 8), (1 << 30, 8), (1 << 30, 4)]
    ]
    y = same_bits_in_every_configuration(fmt, x, precision, configurations)
    assert rel_err(y, reference(name, x.cpu())) <= BOUND[precision]


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 16])
@pytest.mark.parametrize("name", [HUB] + real_matrix_names()[:3])
def test_two_features_per_lane_give_the_bits_of_four(name, precision, n):
    """2 features per lane (at 8 < N <= 16, and on large graphs at N <= 8: a warp's
    16 columns, one MMA tile) give the same sums in the same order as 4 per lane, split
    windows summed in the kernel or apart."""
    fmt = mebcrs(name, 8, DEVICE)
    x = dense(fmt.n_cols, n, name, "two features").to(STORAGE[precision]).to(DEVICE)
    assert cuda_spmm.lane_features(n, fmt.n_vectors, precision) == (2 if n > 8 else 4)
    assert cuda_spmm.lane_features(n, cuda_spmm.NARROW_LANES_MIN_VECTORS, precision) == 2
    configurations = [
        dict(features=features, fuse_max_parts=fuse)
        for features, fuse in [(4, 1 << 30), (2, 1 << 30), (2, 0)]
    ]
    y = same_bits_in_every_configuration(fmt, x, precision, configurations)
    assert rel_err(y, reference(name, x.cpu())) <= BOUND[precision]


@pytest.mark.parametrize("precision", ["fp16", "tf32", "fp32"])
@pytest.mark.parametrize("name", [HUB] + real_matrix_names()[:2])
def test_column_ordered_segments_give_the_same_bits(name, precision, monkeypatch):
    """Segments ordered by column (long-row graphs) and longest first: which blocks run
    together changes, no sum does (tensor-core and fp32 kernels)."""
    fmt = mebcrs(name, default_k(precision), DEVICE)
    x = dense(fmt.n_cols, 64, name).to(DEVICE)
    results = [spmm(fmt, x, precision) for _ in in_both_segment_orders(monkeypatch, fmt)]
    assert torch.equal(results[0], results[1])
