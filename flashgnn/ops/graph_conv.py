"""Graph convolution's propagation and projection as one autograd node: out = A (X W) + b or
(A X) W + b, whichever multiplies by W on the narrower side (DGL's order).

The same maths as composing ``spmm`` with a matmul and a bias add (the path taken when
compiling, or when A's values need a gradient), with the backward written out: on a graph of
a few hundred thousand edges a layer step is bound by the host's per-op cost, and the
composition builds five autograd nodes and three dtype casts where this builds one node.

Dense products run in autocast's dtype when autocast is on for the input's device (as
``torch.mm`` would under autocast), else in the input's dtype; the result has the type
``(A X) W + b`` has in the composition (fp32 with an fp32 bias under autocast). On CUDA the
bias is added by the product's cuBLAS call, and the weight's fp32 gradient from 16-bit
operands is written in fp32 by cuBLAS instead of being rounded to 16 bits and cast: one
launch instead of two each. A 16-bit product with an fp32 bias is therefore added to the bias
before any rounding (the composition, and the CPU's emulation of autocast,
``training.precision.RoundedMatmuls``, round the product to 16 bits first): the same
products, one rounding fewer.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..format import MEBCRS
from .._cuda.column_sums import cast_and_sum_columns_cuda
from ._autograd import tracing
from ._pattern import check_dense, check_values, NO_TRANSPOSE, pattern_args, transpose_args, transposed_values
from .precision import check_precision, half_storage, kernel_operands
from .spmm import _spmm, spmm



def _dense_dtype(feat: Tensor) -> torch.dtype:
    """The dtype the projection runs in: autocast's on feat's device (float64 stays), else feat's."""
    device = feat.device.type
    if feat.dtype != torch.float64 and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return feat.dtype


# torch.mm and torch.addmm with out_dtype (torch >= 2.8): fp16/bf16 products written in fp32 on CUDA
_FP32_PRODUCTS = hasattr(torch.ops.aten.mm, "dtype") and hasattr(torch.ops.aten.addmm, "dtype")


def _fp32_product(a: Tensor, dtype: torch.dtype) -> bool:
    """Whether cuBLAS can write the product of 16-bit ``a`` (and an operand of its type) in
    ``dtype`` directly: fp32 output from fp16/bf16 CUDA operands."""
    return _FP32_PRODUCTS and dtype == torch.float32 and a.is_cuda and a.dtype in (torch.float16, torch.bfloat16)


def _project(a: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """``torch.mm(a, w) + bias`` in the type of that sum; on CUDA one cuBLAS call (a launch
    saved on host-bound steps), which adds an fp32 bias to a 16-bit product before rounding
    it; the CPU keeps the two calls its precision emulation rounds."""
    if bias is None:
        return torch.mm(a, w)
    if a.is_cuda and bias.dtype == a.dtype:
        return torch.addmm(bias, a, w)
    if _fp32_product(a, bias.dtype):
        return torch.addmm(bias, a, w, out_dtype=bias.dtype)
    return torch.mm(a, w) + bias


def _product(a: Tensor, b: Tensor, dtype: torch.dtype) -> Tensor:
    """``(a @ b).to(dtype)``, written in ``dtype`` by cuBLAS where it can (one launch, no 16-bit
    rounding of the product)."""
    if _fp32_product(a, dtype):
        return torch.mm(a, b, out_dtype=dtype)
    return torch.mm(a, b).to(dtype)


def _bias_gradient(grad: Tensor, bias_dtype: torch.dtype | None,
                   dtype: torch.dtype | None) -> tuple[Tensor | None, Tensor]:
    """(the bias gradient: grad's column sums in ``bias_dtype``, None without it; grad in
    ``dtype``, as it is without). One kernel on CUDA for an fp32 grad going to 16 bits."""
    if bias_dtype is not None and grad.is_cuda and grad.dtype == torch.float32 and dtype in (torch.float16,
                                                                                              torch.bfloat16):
        grad_16, sums = cast_and_sum_columns_cuda(grad, dtype)
        return sums.to(bias_dtype), grad_16
    return (None if bias_dtype is None else grad.sum(0).to(bias_dtype)), (grad if dtype is None else grad.to(dtype))


def _spmm_input(feat: Tensor, precision: str, dtype: torch.dtype) -> Tensor:
    """``feat`` as the SpMM should read it when its result feeds a product in ``dtype``: cast
    to ``dtype`` first when that is the SpMM's storage type (it rounds to it anyway, and then
    writes its result in it: no cast of the aggregate)."""
    return feat.to(dtype) if dtype == half_storage(precision) else feat


def _projects_first(weight: Tensor | None) -> bool:
    """Whether X W is formed before the aggregation: W [F_in, F_out] narrows the features."""
    return weight is not None and weight.shape[0] > weight.shape[1]


class _GraphConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feat, weight, bias, values, pattern, transposed, shape, k, precision):
        dtype = _dense_dtype(feat) if weight is not None else feat.dtype
        w = None if weight is None else weight.to(dtype)
        project_first = _projects_first(weight)
        if project_first:
            saved = feat.to(dtype)
            out = _spmm(*pattern, values, torch.mm(saved, w), shape[0], k, precision, False, *NO_TRANSPOSE)
        else:
            x = _spmm_input(feat, precision, dtype)
            out = saved = _spmm(*pattern, values, x, shape[0], k, precision, x.dtype == torch.float32,
                                *NO_TRANSPOSE).to(dtype)
        if w is not None and not project_first:
            out = _project(saved, w, bias)
        elif bias is not None:
            out = out + bias
        ctx.save_for_backward(saved, w, values, *transposed)
        ctx.project_first, ctx.shape, ctx.k, ctx.precision = project_first, shape, k, precision
        ctx.dtypes = feat.dtype, None if weight is None else weight.dtype, None if bias is None else bias.dtype
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        saved, w, values, t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = ctx.saved_tensors
        need_feat, need_weight, need_bias = ctx.needs_input_grad[:3]
        feat_dtype, weight_dtype, bias_dtype = ctx.dtypes
        # the product's gradients run in its dtype
        grad_bias, grad = _bias_gradient(grad, bias_dtype if need_bias else None, None if w is None else w.dtype)
        grad_feat = grad_weight = None

        def propagate_back(g: Tensor, out_dtype: torch.dtype) -> Tensor:
            """A^T g in ``out_dtype``."""
            values_t = transposed_values(values, t_col_idx, t_perm, t_src, cache=True)
            return _spmm(t_row_ptr, t_col_idx, t_vec_mask, values_t, *kernel_operands(ctx.precision, g),
                         ctx.shape[1], ctx.k, ctx.precision, out_dtype == torch.float32, *NO_TRANSPOSE).to(out_dtype)

        if ctx.project_first:  # out = A (X W): d(XW) = A^T dOut
            if need_feat or need_weight:
                d_xw = propagate_back(grad, w.dtype)
                grad_weight = _product(saved.t(), d_xw, weight_dtype) if need_weight else None
                grad_feat = _product(d_xw, w.t(), feat_dtype) if need_feat else None
        else:  # out = (A X) W, or A X without weight
            if w is not None and need_weight:
                grad_weight = _product(saved.t(), grad, weight_dtype)
            if need_feat:
                grad_feat = propagate_back(grad if w is None else torch.mm(grad, w.t()), feat_dtype)
        return grad_feat, grad_weight, grad_bias, None, None, None, None, None, None


def graph_conv(a: MEBCRS, feat: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
               precision: str = "fp32", *, values: Tensor | None = None) -> Tensor:
    """``A (feat W) + bias`` when W has more rows than columns, else ``(A feat) W + bias``.

    a: MEBCRS [N, M]; feat [M, F_in] float16/bfloat16/float32/float64; weight [F_in, F_out] or
    None (no projection); bias [F_out] (or [F_in] without weight) or None; values: A's values
    in its value layout to use instead of ``a.values``. The SpMM runs in ``precision`` (fp32
    accumulation), the projection in autocast's dtype when autocast is on, else in feat's.
    Returns [N, F_out]. Differentiable once in feat, weight and bias (in values too, through the
    composed ops, when they require a gradient).
    """
    check_precision(precision)
    values = a.values if values is None else values
    check_values("values", values, a)
    check_dense("feat", feat, a.n_cols, a.device)
    if weight is not None and (weight.dim() != 2 or weight.shape[0] != feat.shape[1]):
        raise ValueError(f"weight must have shape ({feat.shape[1]}, out_features), got {tuple(weight.shape)}")
    if tracing() or values.requires_grad:
        return _composed(a, feat, weight, bias, precision, values)
    # A^T serves dX, and dW when W multiplies first (d(XW) = A^T dOut): not the first layer of
    # a mini-batch, whose input features need no gradient (its block, the largest, then needs
    # no transpose at all)
    need_t = torch.is_grad_enabled() and (feat.requires_grad or (
        weight is not None and weight.requires_grad and _projects_first(weight)))
    return _GraphConv.apply(feat, weight, bias, values, pattern_args(a), transpose_args(a, need_t),
                            (a.n_rows, a.n_cols), a.k, precision)


def _composed(a: MEBCRS, feat: Tensor, weight: Tensor | None, bias: Tensor | None, precision: str,
              values: Tensor) -> Tensor:
    """``graph_conv`` from the registered ops and torch's matmul (autocast applies to it)."""
    if _projects_first(weight):
        out = spmm(a, feat @ weight, precision, values=values)
    elif weight is not None:
        out = spmm(a, _spmm_input(feat, precision, _dense_dtype(feat)), precision, values=values) @ weight
    else:
        out = spmm(a, feat, precision, values=values)
    return out if bias is None else out + bias
