"""Edge softmax: per-row softmax over the real nonzeros of an ME-BCRS matrix."""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda import edge_softmax as cuda_softmax
from ..formats.mebcrs import MEBCRS
from ._autograd import op_entry, tracing
from ._pattern import check_values, pattern_args
from .precision import compute_dtype
from .reference import edge_softmax_backward_reference, edge_softmax_reference


def scaled_edge_softmax(
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    scores: Tensor,
    scale: Tensor | None,
    n_rows: int,
    k: int,
) -> Tensor:
    """The forward of ``edge_softmax(scale * scores)`` without autograd; ``scale`` a [1] tensor
    (AGNN's beta) or None. The CUDA kernel reads the scale on the device and rounds the product
    as torch's fp32 multiply would."""
    if scores.device.type != "cuda" or torch.float64 in (
        scores.dtype,
        getattr(scale, "dtype", None),
    ):
        scores = scores if scale is None else scale * scores
        return edge_softmax_reference(row_ptr, col_idx, vec_mask, scores, n_rows, k)
    scale = None if scale is None else scale.to(torch.float32)
    return cuda_softmax.edge_softmax_cuda(row_ptr, vec_mask, scores, k, scale=scale)


def _edge_softmax(
    row_ptr: Tensor, col_idx: Tensor, vec_mask: Tensor, scores: Tensor, n_rows: int, k: int
) -> Tensor:
    return scaled_edge_softmax(row_ptr, col_idx, vec_mask, scores, None, n_rows, k)


def _edge_softmax_backward(
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    probs: Tensor,
    grad: Tensor,
    n_rows: int,
    k: int,
) -> Tensor:
    if probs.device.type != "cuda" or torch.float64 in (probs.dtype, grad.dtype):
        return edge_softmax_backward_reference(row_ptr, col_idx, vec_mask, probs, grad, n_rows, k)
    return cuda_softmax.edge_softmax_backward_cuda(row_ptr, vec_mask, probs, grad, k)


edge_softmax_op = torch.library.custom_op("flashgnn::edge_softmax", _edge_softmax, mutates_args=())
edge_softmax_backward_op = torch.library.custom_op(
    "flashgnn::edge_softmax_backward", _edge_softmax_backward, mutates_args=()
)


@edge_softmax_op.register_fake
def _(row_ptr, col_idx, vec_mask, scores, n_rows, k):
    return scores.new_empty(scores.shape, dtype=compute_dtype(scores))


@edge_softmax_backward_op.register_fake
def _(row_ptr, col_idx, vec_mask, probs, grad, n_rows, k):
    return probs.new_empty(probs.shape, dtype=compute_dtype(probs, grad))


def _setup_context(ctx, inputs, output):
    row_ptr, col_idx, vec_mask, scores, n_rows, k = inputs
    ctx.save_for_backward(row_ptr, col_idx, vec_mask, output)
    ctx.n_rows, ctx.k, ctx.dtype = n_rows, k, scores.dtype


def _backward(ctx, grad):
    row_ptr, col_idx, vec_mask, probs = ctx.saved_tensors
    if tracing():
        backward = edge_softmax_backward_op
    elif torch.is_grad_enabled():  # a higher derivative: torch's ops, which autograd records
        backward = edge_softmax_backward_reference
    else:
        backward = _edge_softmax_backward
    grad_scores = backward(row_ptr, col_idx, vec_mask, probs, grad, ctx.n_rows, ctx.k)
    return None, None, None, grad_scores.to(ctx.dtype), None, None


edge_softmax_call = op_entry(edge_softmax_op, _edge_softmax, _setup_context, _backward)


def edge_softmax(a: MEBCRS, scores: Tensor) -> Tensor:
    """Row-wise softmax of ``scores`` ([8 * n_vectors], A's value layout) over each row's
    real nonzeros, max-subtracted, in fp32 (float64 for float64 scores). Slots outside the
    pattern are 0 in the output and never count as neighbours."""
    check_values("scores", scores, a)
    return edge_softmax_call(*pattern_args(a), scores, a.n_rows, a.k)
