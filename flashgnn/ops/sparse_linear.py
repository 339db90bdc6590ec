"""The sparse linear layer's product, y = x W^T + b with W [out, in] in CVSE (strips of V output
rows, ``flashgnn.nn.SparseLinear``), as a torch.library custom op with its autograd.

Forward: on CUDA for fp16/bf16 a kernel of kernels/sparse_linear.cu (rows of x staged in chunks
of input features, W's vectors gathered from them, Y written token-major with the bias; which
kernel: flashgnn/_cuda/sparse_linear.py's FORWARD_RULE); elsewhere Y^T = W X^T on the CVSE
reference. Backward: dW = SDDMM(dY^T, X^T) on W's pattern and dX^T = W^T dY^T through W^T's own
CVSE (strips of V input features, W's values moved into its slots), both through
``flashgnn.ops.sddmm`` / ``spmm``, so they run on whatever the CVSE format registers (its CUDA
kernels where it has them), or with DX_KERNEL dX by the forward's kernels on W^T's pattern; db =
the column sums of dY.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .._cuda.sparse_linear import KERNEL_PRECISIONS, sparse_linear_cuda
from ..formats.cvse import CVSE, decode_cvse_slots
from ..tensor_cache import TensorCache, built_for_reuse, tensor_version
from ._autograd import op_entry
from .dispatch import sddmm, spmm
from .reference import spmm_on_coords

# Tokens from which SparseLinear runs the kernel of this module on CUDA: the kernel's grid has a
# block per 16 to 64 tokens and 64 strips, so fewer tokens leave most SMs without a block,
# where the generic CVSE SpMM (tokens as its N) spreads W's strips over the GPU instead.
KERNEL_MIN_TOKENS = 1024
# Whether the backward computes dX = dY W by this module's kernel on W^T's pattern (strips of V
# input features, W's values moved into its slots) where the forward runs the kernel, instead of
# flashgnn.ops.spmm on W^T's CVSE; benchmarks/sparse_linear_sweep.py times both.
DX_KERNEL = False


class WeightFormats(NamedTuple):
    """W in CVSE (values: W's slot index + 1 as float64, 0 on padding slots), W^T in CVSE with
    the same V, and t_index: int64 [W^T's slots], the W slot each W^T slot takes its value
    from (W's slot count, a zero appended to W's values, on W^T's padding)."""

    w: CVSE
    wt: CVSE
    t_index: Tensor


_FORMATS = TensorCache()  # col_idx -> (row_ptr, vec_mask, key, WeightFormats)


def weight_format(
    row_ptr: Tensor, col_idx: Tensor, vec_mask: Tensor, n_out: int, n_in: int, vector: int
) -> CVSE:
    """W [n_out, n_in] in CVSE from its pattern arrays (values: placeholders to replace with
    ``with_values``), cached while the arrays live unchanged."""
    return weight_formats(row_ptr, col_idx, vec_mask, n_out, n_in, vector).w


def weight_formats(
    row_ptr: Tensor, col_idx: Tensor, vec_mask: Tensor, n_out: int, n_in: int, vector: int
) -> WeightFormats:
    """W and W^T of a CVSE pattern (``WeightFormats``), built once per pattern."""
    key = (n_out, n_in, vector, tensor_version(row_ptr), tensor_version(vec_mask))
    hit = _FORMATS.get(col_idx)
    if hit is None or hit[0] is not row_ptr or hit[1] is not vec_mask or hit[2] != key:
        built = built_for_reuse(
            lambda: _build_formats(row_ptr, col_idx, vec_mask, n_out, n_in, vector)
        )
        hit = _FORMATS.set(col_idx, (row_ptr, vec_mask, key, built))
    return hit[3]


def _build_formats(row_ptr, col_idx, vec_mask, n_out: int, n_in: int, vector: int):
    c = decode_cvse_slots(row_ptr, col_idx, vec_mask, vector)
    n_slots = vector * col_idx.numel()
    csr_order = torch.argsort(c.row * max(n_in, 1) + c.col)
    slot_ids = torch.zeros(n_slots, dtype=torch.float64, device=row_ptr.device)
    slot_ids[c.slot] = c.slot.to(torch.float64) + 1
    w = CVSE(row_ptr, col_idx, slot_ids, c.slot[csr_order], vec_mask, n_out, n_in, vector=vector)
    t_order = torch.argsort(c.col * max(n_out, 1) + c.row)
    t_indptr = torch.zeros(n_in + 1, dtype=torch.int64, device=row_ptr.device)
    t_indptr[1:] = torch.cumsum(torch.bincount(c.col, minlength=n_in), 0)
    wt = CVSE.from_csr(
        t_indptr, c.row[t_order], slot_ids[c.slot[t_order]], n_cols=n_out, vector=vector
    )
    t_index = torch.where(wt.values > 0, wt.values.to(torch.int64) - 1, n_slots)
    return WeightFormats(w, wt, t_index)


def _sparse_linear(
    x: Tensor,
    values: Tensor,
    bias: Tensor | None,
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    n_out: int,
    vector: int,
    precision: str,
) -> Tensor:
    """The op's implementation: x [T, in] -> [T, n_out] in x's dtype. The kernel for CUDA
    inputs in fp16/bf16 (no float64), else the CVSE reference (x rounded to the precision, fp32
    accumulation, the bias added in fp32 before the result is cast)."""
    if _kernel_inputs(x, values, precision):
        return sparse_linear_cuda(x, values, bias, row_ptr, col_idx, n_out, vector, precision)
    c = weight_format(row_ptr, col_idx, vec_mask, n_out, x.shape[1], vector).slot_coords()
    y = spmm_on_coords(c, values, x.t(), n_out, precision, out_fp32=x.dtype != torch.float64)
    if bias is not None:
        y = y + bias.to(y.dtype)[:, None]
    return y.t().to(x.dtype).contiguous()


def _kernel_inputs(x: Tensor, values: Tensor, precision: str) -> bool:
    """Whether the kernel computes x [T, in] times a weight of ``values``: CUDA, fp16/bf16, no
    float64."""
    return (
        x.device.type == "cuda"
        and precision in KERNEL_PRECISIONS
        and torch.float64 not in (x.dtype, values.dtype)
    )


sparse_linear_op = torch.library.custom_op(
    "flashgnn::sparse_linear", _sparse_linear, mutates_args=()
)


@sparse_linear_op.register_fake
def _(x, values, bias, row_ptr, col_idx, vec_mask, n_out, vector, precision):
    return x.new_empty((x.shape[0], n_out))


def _setup_context(ctx, inputs, output):
    x, values, bias, row_ptr, col_idx, vec_mask, n_out, vector, precision = inputs
    ctx.save_for_backward(x, values, row_ptr, col_idx, vec_mask)
    ctx.n_out, ctx.vector, ctx.precision = n_out, vector, precision
    ctx.bias_dtype = None if bias is None else bias.dtype


def _backward(ctx, grad):
    x, values, row_ptr, col_idx, vec_mask = ctx.saved_tensors
    f = weight_formats(row_ptr, col_idx, vec_mask, ctx.n_out, x.shape[1], ctx.vector)
    grad_x = grad_values = grad_bias = None
    grad_t = grad.t()
    kernel_dx = DX_KERNEL and not torch.is_grad_enabled()  # not when recording (create_graph)
    if ctx.needs_input_grad[0] and kernel_dx and _kernel_inputs(grad, values, ctx.precision):
        wt = f.wt
        grad_x = sparse_linear_cuda(
            grad,
            values,
            None,
            wt.row_ptr,
            wt.col_idx,
            wt.n_rows,
            wt.vector,
            ctx.precision,
            through=f.t_index,
        ).to(x.dtype)
    elif ctx.needs_input_grad[0]:
        moved = torch.cat([values, values.new_zeros(1)])[f.t_index]
        grad_x = spmm(f.wt, grad_t, ctx.precision, values=moved).t().to(x.dtype)
    if ctx.needs_input_grad[1]:
        grad_values = sddmm(f.w, grad_t, x.t(), ctx.precision).to(values.dtype)
    if ctx.needs_input_grad[2]:
        grad_bias = grad.sum(0, dtype=torch.float64 if grad.dtype == torch.float64 else None)
        grad_bias = grad_bias.to(ctx.bias_dtype)
    return grad_x, grad_values, grad_bias, None, None, None, None, None, None


sparse_linear_call = op_entry(sparse_linear_op, _sparse_linear, _setup_context, _backward)


def sparse_linear(
    w: CVSE, x: Tensor, values: Tensor, bias: Tensor | None, precision: str
) -> Tensor:
    """y = x W^T + b for W [out, in] in CVSE (its pattern; ``values`` [V * n_vectors] in its
    value layout, slots outside the pattern 0); x [T, in] float16/bfloat16/float32/float64,
    bias [out] or None. Returns [T, out] in x's dtype; differentiable in x, values and bias."""
    _check(w, x, values, bias)
    return sparse_linear_call(
        x, values, bias, w.row_ptr, w.col_idx, w.vec_mask, w.n_rows, w.vector, precision
    )


def uses_kernel(x: Tensor, precision: str) -> bool:
    """Whether ``SparseLinear`` computes x [T, in] with this module's op: CUDA, fp16/bf16, at
    least KERNEL_MIN_TOKENS tokens (elsewhere: ``flashgnn.ops.spmm`` on the CVSE)."""
    return (
        x.is_cuda
        and precision in KERNEL_PRECISIONS
        and x.dtype != torch.float64
        and x.shape[0] >= KERNEL_MIN_TOKENS
    )


def _check(w: CVSE, x: Tensor, values: Tensor, bias: Tensor | None) -> None:
    for name, t in (("x", x), ("values", values), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be floating point, got {t.dtype}")
        if t.device != w.device:
            raise ValueError(f"{name} is on {t.device} but W is on {w.device}")
    if x.dim() != 2 or x.shape[1] != w.n_cols:
        raise ValueError(f"x must be [tokens, {w.n_cols}], got shape {tuple(x.shape)}")
    if values.shape != (w.n_slots,):
        raise ValueError(
            f"values must have shape ({w.n_slots},) (W's value layout), got {tuple(values.shape)}"
        )
    if bias is not None and bias.shape != (w.n_rows,):
        raise ValueError(f"bias must have shape ({w.n_rows},), got {tuple(bias.shape)}")
