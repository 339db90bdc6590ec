"""The TCA-SpMM (kernels/tca.cu) and GCOO (kernels/gcoo.cu) kernels on the GPU, through
``flashgnn.ops.spmm`` and the launchers: against float64 (scipy) within the issue's tolerances
(max |err| / max |ref|) and against the CPU emulation of the same precision, on random shapes
with tails, rows past a 64-nonzero chunk and strips split into segments, and on every shared
graph at N = 32."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import ops
from flashgnn._cuda.gcoo import FEATURES, SEGMENT_NNZ, gcoo_spmm_cuda
from flashgnn.formats import GCOO, TCACSR
from flashgnn.formats.gcoo import GROUPS, choose_group
from tests.helpers import GPU, graph_params, random_csr

pytestmark = GPU

TOLERANCE = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}
# (format, precision): TCA on the tensor cores (fp32 through its GCOO), GCOO on CUDA cores
KERNELS = [("tca", p) for p in TOLERANCE] + [("gcoo", p) for p in ("fp32", "tf32")]
SHAPES = [(37, 53), (130, 70), (9, 600), (261, 1030)]
NS = (1, 5, 32, 128, 256)


def max_rel(y: torch.Tensor, ref: np.ndarray) -> float:
    ref = torch.as_tensor(ref, dtype=torch.float64)
    scale = ref.abs().max().item()
    err = (y.detach().cpu().to(torch.float64) - ref).abs().max().item()
    return err / scale if scale > 0 else err


def _matrix(shape, rng) -> sp.csr_matrix:
    """Random rows plus a hub row (over 64 nonzeros and over SEGMENT_NNZ where the columns
    allow) and an empty row."""
    m = random_csr(*shape, 0.05, rng).tolil()
    hub = rng.choice(shape[1], min(shape[1], SEGMENT_NNZ + 40), replace=False)
    m[1, hub] = rng.uniform(0.5, 1.5, hub.size)
    m[shape[0] - 1, :] = 0
    m = m.tocsr()
    m.sort_indices()
    return m


def _build(kind: str, m: sp.csr_matrix, group: int | None = None):
    values = torch.as_tensor(m.data, dtype=torch.float32)
    if kind == "tca":
        return TCACSR.from_csr(m.indptr, m.indices, values, m.shape[1], device="cuda")
    group = group or choose_group(m.indptr, m.indices)
    return GCOO.from_csr(m.indptr, m.indices, values, m.shape[1], group=group, device="cuda")


@pytest.mark.parametrize("kind, precision", KERNELS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("n", NS)
def test_spmm_against_float64(kind, precision, shape, n, rng):
    m = _matrix(shape, rng)
    groups = GROUPS if kind == "gcoo" else (None,)
    x = torch.randn(shape[1], n, device="cuda")
    exact = m @ x.double().cpu().numpy()
    for group in groups:
        a = _build(kind, m, group)
        y = ops.spmm(a, x, precision)
        assert y.dtype == torch.float32 and y.shape == (shape[0], n)
        assert bool(torch.isfinite(y).all())
        assert max_rel(y, exact) <= TOLERANCE[precision], (group, max_rel(y, exact))
        emulated = ops.spmm(a.to("cpu"), x.cpu(), precision)
        assert max_rel(y, emulated.numpy()) <= 1e-5
        assert bool((y[-1] == 0).all())  # the empty row


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_tca_output_types(precision, dtype, rng):
    m = _matrix((70, 90), rng)
    a = _build("tca", m)
    x = torch.randn(90, 24, device="cuda").to(dtype)
    y = ops.spmm(a, x, precision)
    assert y.dtype == dtype
    y32 = ops.spmm(a, x, precision, out_fp32=True)
    assert y32.dtype == torch.float32
    exact = m @ x.double().cpu().numpy()
    assert max_rel(y32, exact) <= TOLERANCE[precision]


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("seg_nnz", [32, SEGMENT_NNZ])
def test_gcoo_launcher_choices(group, features, seg_nnz, rng):
    m = _matrix((130, 700), rng)
    g = _build("gcoo", m, group)
    x = torch.randn(700, 68, device="cuda")
    args = (g.group_ptr, g.rows, g.cols, g.values, x, g.n_rows, group)
    y = gcoo_spmm_cuda(*args, seg_nnz=seg_nnz, features=features)
    assert max_rel(y, m @ x.double().cpu().numpy()) <= 1e-5
    again = gcoo_spmm_cuda(*args, seg_nnz=seg_nnz, features=features)
    assert torch.equal(y, again)  # split strips are summed in a fixed order
    # X at an address aligned to 4 bytes only: one feature per lane
    shifted = torch.randn(700 * 68 + 1, device="cuda")[1:].view(700, 68)
    y = gcoo_spmm_cuda(*args[:4], shifted, g.n_rows, group, seg_nnz=seg_nnz)
    assert max_rel(y, m @ shifted.double().cpu().numpy()) <= 1e-5
    with pytest.raises(ValueError, match="features must be one of"):
        gcoo_spmm_cuda(*args[:4], shifted, g.n_rows, group, features=4)


def test_inf_in_x_reaches_only_its_rows():
    m = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.0]]))
    x = torch.ones(3, 8, device="cuda")
    x[0, 0] = float("inf")
    exact = m.toarray() @ x.double().cpu().numpy()
    for kind, precision in KERNELS:
        for group in GROUPS if kind == "gcoo" else (None,):
            y = ops.spmm(_build(kind, m, group), x, precision).cpu().double().numpy()
            np.testing.assert_array_equal(np.isinf(y), np.isinf(exact))
            assert not np.isnan(y).any()


def test_gradients_refused_on_cuda(rng):
    m = _matrix((20, 30), rng)
    x = torch.randn(30, 4, device="cuda", requires_grad=True)
    for kind in ("tca", "gcoo"):
        with pytest.raises(RuntimeError, match="forward only on CUDA"):
            ops.spmm(_build(kind, m), x, "fp32")
        with torch.no_grad():
            ops.spmm(_build(kind, m), x, "fp32")
        # float64 takes the differentiable reference on any device
        y = ops.spmm(_build(kind, m), x.double(), "fp32")
        y.sum().backward()


@pytest.mark.parametrize("name", graph_params())
def test_real_graphs(name, load_graph, rng):
    m = load_graph(name)
    x = torch.randn(m.shape[1], 32, device="cuda")
    exact = m.astype(np.float64) @ x.double().cpu().numpy()
    for kind, precision in KERNELS:
        a = _build(kind, m)
        y = ops.spmm(a, x, precision)
        assert max_rel(y, exact) <= TOLERANCE[precision], (kind, precision, max_rel(y, exact))
