"""The sparse linear kernels (kernels/sparse_linear.cu) on CUDA: against float64 F.linear on the
pruned weight and against the CPU implementation of the same precision, for every token tile of
the chunk kernel and every shape and step mode of the window kernel, V = 2, 4, 8, fp16 and bf16,
inputs in fp16/bf16/fp32, with tails in tokens, input features and outputs, outputs poisoned
with NaN before each call; SparseLinear's forward and backward on the kernel path against
float64, with the selection rule choosing either kernel."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from flashgnn._cuda import sparse_linear as launcher
from flashgnn._cuda.sparse_linear import TOKEN_TILES, WINDOW_SHAPES, Variant, sparse_linear_cuda
from flashgnn.nn import SparseLinear
from flashgnn.ops import sparse_linear as op_module
from flashgnn.ops.sparse_linear import (
    KERNEL_MIN_TOKENS,
    sparse_linear,
    uses_kernel,
    weight_formats,
)
from tests.helpers import GPU, rel_err
from tests.ops.gpu_op_checks import EMULATION_BOUND, bound, run_twice_poisoned

pytestmark = GPU

SHAPES = [  # tokens, in, out, V, sparsity
    (77, 64, 64, 8, 0.5),
    (1000, 300, 37, 8, 0.9),
    (2049, 1030, 515, 4, 0.7),
    (333, 513, 131, 2, 0.8),
    (4100, 4096, 520, 8, 0.95),
    (129, 33, 9, 8, 0.0),
    (64, 600, 700, 8, 0.98),
]
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _layer(n_in, n_out, vector, sparsity, seed=0):
    torch.manual_seed(seed)
    return SparseLinear(n_in, n_out, sparsity=sparsity, vector=vector)


# every window shape at the rule's chunk rows; the first also at 32-row chunks (list_vectors 1:
# many windows, the ring of chunk slots wrapping) in every step mode
WINDOW_VARIANTS = [Variant("window", shape=s) for s in WINDOW_SHAPES] + [
    Variant("window", shape=WINDOW_SHAPES[0], list_vectors=1, steps=steps)
    for steps in launcher.STEP_MODES
]
VARIANTS = [Variant("chunk", mt) for mt in TOKEN_TILES] + WINDOW_VARIANTS


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_kernel_matches_float64(shape, precision, variant):
    n_tokens, n_in, n_out, vector, sparsity = shape
    layer = _layer(n_in, n_out, vector, sparsity)
    w = layer.weight.detach().double()
    x = torch.randn(n_tokens, n_in)
    ref = F.linear(x.double(), w, layer.bias.detach().double())
    cuda = copy.deepcopy(layer).cuda()
    for dtype in DTYPES:
        xd = x.to(dtype).cuda()
        outs = run_twice_poisoned(
            lambda: sparse_linear_cuda(
                xd,
                cuda.values.detach(),
                cuda.bias.detach(),
                cuda.row_ptr,
                cuda.col_idx,
                n_out,
                vector,
                precision,
                variant=variant,
            ),
            xd.device,
        )
        for y in outs:
            assert y.shape == (n_tokens, n_out) and y.dtype == dtype
            assert torch.isfinite(y).all()
            assert rel_err(y, ref) <= bound(precision, dtype), (dtype, rel_err(y, ref))
        assert torch.equal(outs[0], outs[1])  # deterministic
        if dtype == torch.float32:  # against the CPU emulation of the same rounding
            emulated = sparse_linear(
                layer.weight_format(), x, layer.values.detach(), layer.bias.detach(), precision
            )
            assert rel_err(outs[0], emulated) <= EMULATION_BOUND


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_kernel_without_bias_and_empty_tokens(precision):
    layer = _layer(100, 48, 8, 0.7)
    cuda = copy.deepcopy(layer).cuda()
    x = torch.randn(50, 100, device="cuda")
    y = sparse_linear_cuda(
        x, cuda.values.detach(), None, cuda.row_ptr, cuda.col_idx, 48, 8, precision
    )
    ref = F.linear(x.double().cpu(), layer.weight.detach().double())
    assert rel_err(y, ref) <= bound(precision, torch.float32)
    empty = sparse_linear_cuda(
        x[:0], cuda.values.detach(), None, cuda.row_ptr, cuda.col_idx, 48, 8, precision
    )
    assert empty.shape == (0, 48)


@pytest.mark.parametrize("variant", WINDOW_VARIANTS[:2], ids=lambda v: v.name)
def test_window_kernel_reads_unaligned_x(variant):
    """x whose rows start 2 bytes off a 4-byte boundary (DIRECT reads it a feature at a time)
    and x of an odd width, a strip short of V and no bias."""
    layer = _layer(301, 77, 8, 0.8)
    cuda = copy.deepcopy(layer).cuda()
    x = torch.randn(1111, 301)
    flat = torch.empty(1111 * 301 + 1, dtype=torch.float16, device="cuda")
    xd = flat[1:].view(1111, 301)
    xd.copy_(x)
    assert xd.is_contiguous() and xd.data_ptr() % 4 == 2
    y = sparse_linear_cuda(
        xd, cuda.values.detach(), None, cuda.row_ptr, cuda.col_idx, 77, 8, "fp16", variant=variant
    )
    ref = F.linear(x.half().double(), layer.weight.detach().double())
    assert rel_err(y, ref) <= bound("fp16", torch.float16)


def test_window_kernel_follows_in_place_weight_updates():
    """The step records are cached per values version: an in-place update is seen."""
    layer = _layer(200, 64, 8, 0.9).cuda()
    x = torch.randn(2000, 200, device="cuda")
    values = layer.values.detach()
    variant = WINDOW_VARIANTS[0]
    first = sparse_linear_cuda(
        x, values, None, layer.row_ptr, layer.col_idx, 64, 8, "fp16", variant=variant
    )
    with torch.no_grad():
        values.mul_(-0.5)
    second = sparse_linear_cuda(
        x, values, None, layer.row_ptr, layer.col_idx, 64, 8, "fp16", variant=variant
    )
    assert rel_err(second, -0.5 * first) <= 2e-3


@pytest.mark.parametrize(
    "variant", [launcher.CHUNK, WINDOW_VARIANTS[0], WINDOW_VARIANTS[1]], ids=lambda v: v.name
)
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize(
    "n_tokens, n_in, n_out, vector, sparsity",
    [(1000, 300, 37, 8, 0.9), (2049, 1030, 515, 4, 0.7), (333, 513, 131, 2, 0.8)],
)
def test_dx_on_the_transposed_pattern(n_tokens, n_in, n_out, vector, sparsity, precision, variant):
    """dX = dY W by the kernels on W^T's CVSE (strips of V input features), W's values moved in
    through t_index, against float64."""
    layer = _layer(n_in, n_out, vector, sparsity).cuda()
    f = weight_formats(layer.row_ptr, layer.col_idx, layer.vec_mask, n_out, n_in, vector)
    grad = torch.randn(n_tokens, n_out, device="cuda")
    outs = run_twice_poisoned(
        lambda: sparse_linear_cuda(
            grad,
            layer.values.detach(),
            None,
            f.wt.row_ptr,
            f.wt.col_idx,
            n_in,
            vector,
            precision,
            variant=variant,
            through=f.t_index,
        ),
        grad.device,
    )
    ref = grad.double().cpu() @ layer.weight.detach().double().cpu()
    for dx in outs:
        assert dx.shape == (n_tokens, n_in)
        assert rel_err(dx, ref) <= bound(precision, torch.float32)


@pytest.mark.parametrize("dx_kernel", [False, True])
@pytest.mark.parametrize("rule", [launcher.CHUNK, WINDOW_VARIANTS[0]], ids=lambda v: v.name)
@pytest.mark.parametrize("vector", [2, 4, 8])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_layer_forward_backward_on_the_kernel_path(vector, precision, rule, dx_kernel, monkeypatch):
    monkeypatch.setattr(launcher, "FORWARD_RULE", ((1.0, 0, rule),))
    monkeypatch.setattr(op_module, "DX_KERNEL", dx_kernel)
    layer = _layer(257, 130, vector, 0.9, seed=vector)
    layer.precision = precision
    n_tokens = KERNEL_MIN_TOKENS + 37
    x = torch.randn(3, n_tokens // 3 + 1, 257)
    g = torch.randn(3, n_tokens // 3 + 1, 130)
    w = layer.weight.detach().double().requires_grad_()
    b = layer.bias.detach().double().requires_grad_()
    xr = x.double().requires_grad_()
    ref = F.linear(xr, w, b)
    ref.backward(g.double())
    cuda = layer.cuda()
    xc = x.cuda().requires_grad_()
    assert uses_kernel(xc.reshape(-1, 257), precision)
    y = cuda(xc)
    y.backward(g.cuda())
    tol = bound(precision, torch.float32)
    assert rel_err(y, ref) <= tol
    assert rel_err(xc.grad, xr.grad) <= tol
    assert rel_err(cuda.bias.grad, b.grad) <= tol
    grad_w = cuda.weight_format().with_values(cuda.values.grad).to_dense()
    assert rel_err(grad_w, w.grad * (w != 0)) <= tol
