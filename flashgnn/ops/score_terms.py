"""GAT's per-node score terms: each node's features dotted with its head's attention vectors.

On the GPU one kernel each way (``kernels/score_terms.cu``); elsewhere, and when compiling,
the same maths as products and sums in torch, which build a [heads, rows, A, F] product tensor
each way and reduce the attention vectors' gradient over the rows: a visible share of a GAT
step on graphs of millions of nodes (docs/TUNING.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda.score_terms import score_terms_backward_cuda, score_terms_cuda, supported
from ._autograd import recorded_gradients, tracing


class _ScoreTerms(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ft, attn):
        ctx.save_for_backward(ft, attn)
        return score_terms_cuda(ft, attn)

    @staticmethod
    def backward(ctx, d_terms):
        ft, attn = ctx.saved_tensors
        if torch.is_grad_enabled():  # a higher derivative: recorded from torch's products
            return recorded_gradients(_products, (ft, attn), ctx.needs_input_grad, d_terms)
        d_ft, d_attn = score_terms_backward_cuda(ft, attn, d_terms.to(torch.float32))
        return (d_ft if ctx.needs_input_grad[0] else None), (
            d_attn if ctx.needs_input_grad[1] else None
        )


def score_terms(ft: Tensor, attn: Tensor) -> Tensor:
    """terms[h * rows + i, a] = ft[h * rows + i] . attn[h, a], [heads * rows, A].

    ft: head-major node features [heads * rows, F] (fp16, bf16, fp32 or float64); attn: the
    attention vectors [heads, A, F] (float32 or float64). Products and sums in attn's type
    (float64 when either is), as ``(ft * attn).sum(-1)``; differentiable in both."""
    if (
        attn.dim() != 3
        or ft.dim() != 2
        or attn.shape[2] != ft.shape[1]
        or attn.shape[0] < 1
        or ft.shape[0] % attn.shape[0]
    ):
        raise ValueError(
            f"score_terms: ft [heads * rows, F] and attn [heads, A, F] expected, got "
            f"{tuple(ft.shape)} and {tuple(attn.shape)}"
        )
    if supported(ft, attn) and not tracing():
        return _ScoreTerms.apply(ft, attn)
    return _products(ft, attn)


def _products(ft: Tensor, attn: Tensor) -> Tensor:
    """``score_terms`` by torch's products and sums."""
    heads, terms, f_dim = attn.shape
    return (ft.view(heads, -1, 1, f_dim) * attn.unsqueeze(1)).sum(-1).view(-1, terms)
