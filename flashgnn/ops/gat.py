"""GAT's attention and aggregation as one autograd node: out = P @ H with
P = dropout(edge_softmax(leaky_relu(er_i + el_j))) on A's pattern (er of the destinations,
el and H of the sources).

The same maths as composing ``sddmm``, ``edge_softmax``, dropout and ``spmm`` (the path taken
when compiling, when the attention is returned, or when edge weights need a gradient), with
the backward written out. Besides building no intermediate autograd node, it saves only the
softmax output and the dropout mask: the dropped attention is rebuilt from P and the mask. On
the GPU the scores are never stored: the softmax kernels compute leaky_relu(er_i + el_j) for
each slot, forward and backward, with the bits of the rank-2 SDDMM and leaky ReLU they stand
for (on the CPU those ops run), and keep a 16-byte record per row (max, sum, er) from which
the backward computes P again; without dropout and edge values P is then not kept at all, and
P^T (for dH) is computed in A^T's layout instead of moved there. The terms' gradients are sums
of the scores' gradient over rows (er: summed by the softmax backward's kernels as they write)
and, through A^T's CSR order, columns (el). For fp16/bf16/tf32 none of these slot-sized tensors
is ever stored: the SpMMs compute P (forward) and P^T (dH) from the records as they stage them,
and two passes of the gradient SDDMM dP = SDDMM(dOut, H), on A and on A^T, sum the terms'
gradients from the records without storing dP or the scores' gradient. In A's value layout
a per-edge tensor takes 8 slots per 8x1 vector, 8 times the edges on a graph with one nonzero
per vector, so each pass over one, and each one kept, matters on large graphs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .._cuda.edge_softmax import (
    gat_softmax_backward_cuda,
    gat_softmax_cuda,
    gat_softmax_transposed_cuda,
)
from .._cuda.sddmm import gat_softmax_backward_tensor_core
from .._cuda.slot_row_sums import slot_row_sums_cuda
from .._cuda.spmm import GAT_BLOCK_WIDTH, GatAttention, spmm_tensor_core
from ..format import MEBCRS
from ._autograd import tracing
from ._pattern import (
    NO_TRANSPOSE,
    check_dense,
    check_values,
    pattern_args,
    transpose_args,
    transposed_values,
)
from .edge_softmax import _edge_softmax, _edge_softmax_backward, edge_softmax
from .precision import check_precision, kernel_operands
from .sddmm import _sddmm, sddmm
from .spmm import _spmm, spmm


def _score_operands(er: Tensor, el: Tensor) -> tuple[Tensor, Tensor]:
    """[er, 1] [n_rows, 2] and [1, el] [n_cols, 2] from er [n_rows, 1] and el [n_cols, 1]: their
    SDDMM is er_i + el_j, exact in fp32."""
    return F.pad(er, (0, 1), value=1.0), F.pad(el, (1, 0), value=1.0)


def _on_kernels(er: Tensor, el: Tensor) -> bool:
    """Whether the softmax kernels compute the scores: fp32 terms on the GPU."""
    return er.is_cuda and er.dtype == el.dtype == torch.float32


def _attention(
    pattern, er: Tensor, el: Tensor, slope: float, n_rows: int, k: int, write: bool = True
) -> tuple[Tensor | None, Tensor | None]:
    """P = edge_softmax(leaky_relu(er_i + el_j)) in A's value layout, fp32 (float64), and on
    the kernels its rows' records (which give P and P^T: ``GatAttention``,
    ``gat_softmax_transposed_cuda``), else None. On the kernels without ``write`` P is None."""
    if _on_kernels(er, el):
        return gat_softmax_cuda(*pattern, er.view(-1), el.view(-1), slope, k, write=write)
    scores = _sddmm(*pattern, *_score_operands(er, el), k, "fp32", *NO_TRANSPOSE)
    return _edge_softmax(*pattern, F.leaky_relu_(scores, slope), n_rows, k), None


def _attention_backward(
    pattern,
    er: Tensor,
    el: Tensor,
    slope: float,
    prob: Tensor | None,
    row_info: Tensor | None,
    d_prob: Tensor,
    n_rows: int,
    k: int,
) -> tuple[Tensor, Tensor | None]:
    """(d(er_i + el_j) in A's value layout; on the kernels its row sums [n_rows, 1], er's
    gradient, else None) from P (on the kernels its rows' records, and P may be None) and dP."""
    if row_info is not None:
        d_scores, row_sums = gat_softmax_backward_cuda(
            *pattern, er.view(-1), el.view(-1), slope, row_info, d_prob, k
        )
        return d_scores, row_sums[:n_rows].view(-1, 1)
    d_scores = _edge_softmax_backward(*pattern, prob, d_prob, n_rows, k)
    scores = _sddmm(*pattern, *_score_operands(er, el), k, "fp32", *NO_TRANSPOSE)
    torch.ops.aten.leaky_relu_backward.grad_input(
        d_scores, scores, slope, False, grad_input=d_scores
    )
    return d_scores, None


def _fused(precision: str, k: int) -> bool:
    """Whether, given the row records, the SpMMs compute GAT's attention as they stage it and
    passes of the gradient SDDMM sum the terms' gradients (no slot-sized tensor): the
    tensor-core precisions at the layers' block widths."""
    return GAT_BLOCK_WIDTH.get(precision) == k


def _row_sums(
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    values: Tensor,
    n_rows: int,
    n_cols: int,
    k: int,
) -> Tensor:
    """sum_j values[slot(i, j)] for every row i, [n_rows, 1] in values' dtype: an exact fp32
    (or float64) SpMM with ones."""
    ones = values.new_ones(n_cols, 1)
    return _spmm(row_ptr, col_idx, vec_mask, values, ones, n_rows, k, "fp32", False, *NO_TRANSPOSE)


def _column_sums(values: Tensor, t_indptr: Tensor, t_src: Tensor) -> Tensor:
    """sum_i values[slot(i, j)] for every column j, [n_cols, 1], read through A^T's CSR order
    (t_indptr, t_src): one gathering kernel on the GPU, where moving the values into A^T's
    layout to sum its rows would write and read a slot-sized tensor."""
    if values.is_cuda and values.dtype == torch.float32:
        return slot_row_sums_cuda(t_indptr, t_src, values).view(-1, 1)
    rows = torch.repeat_interleave(
        torch.arange(t_indptr.numel() - 1, device=values.device),
        t_indptr.diff(),
        output_size=t_src.numel(),
    )
    return values.new_zeros(t_indptr.numel() - 1, 1).index_add_(0, rows, values[t_src].view(-1, 1))


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        ft,
        er,
        el,
        edge_values,
        pattern,
        transposed,
        t_indptr,
        n_rows,
        k,
        slope,
        drop,
        precision,
    ):
        on_kernels = _on_kernels(er, el)
        if on_kernels:  # every launch reads them as 1-D views: made contiguous once
            er, el = er.contiguous(), el.contiguous()
        # on the kernels, without dropout or edge values, P is computed from the rows' records
        # where it is read (the tensor-core SpMMs as they stage it) and not kept for the backward
        computes_p = on_kernels and drop == 0 and edge_values is None
        (ft_k,) = kernel_operands(precision, ft)
        # fp32 features get an fp32 result even when the kernel reads them in 16 bits
        out_fp32 = ft.dtype == torch.float32
        staged = computes_p and _fused(precision, k)
        prob, row_info = _attention(pattern, er, el, slope, n_rows, k, write=not staged)
        keep = None
        if staged:
            out = spmm_tensor_core(
                *pattern,
                None,
                ft_k,
                n_rows,
                k,
                precision,
                torch.float32 if out_fp32 else ft_k.dtype,
                gat=GatAttention(el.view(-1), row_info, slope, transposed=False),
            )
        else:
            if drop > 0:
                dropped, keep = torch.native_dropout(prob, drop, True)
            else:
                dropped = prob
            if edge_values is not None:
                dropped = dropped * edge_values
            out = _spmm(*pattern, dropped, ft_k, n_rows, k, precision, out_fp32, *NO_TRANSPOSE)
        ctx.save_for_backward(
            ft_k,
            er,
            el,
            None if computes_p else prob,
            row_info,
            keep,
            edge_values,
            t_indptr,
            *pattern,
            *transposed,
        )
        ctx.n_rows, ctx.k, ctx.slope, ctx.drop, ctx.precision = n_rows, k, slope, drop, precision
        ctx.ft_dtype = ft.dtype
        return out.to(ft.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        ft_k, er, el, prob, row_info, keep, edge_values, t_indptr, *rest = ctx.saved_tensors
        pattern, (t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src) = rest[:3], rest[3:]
        transposed = (t_row_ptr, t_col_idx, t_vec_mask)
        n_rows, k, precision = ctx.n_rows, ctx.k, ctx.precision
        need_ft, need_er, need_el = ctx.needs_input_grad[:3]
        n_cols = ft_k.shape[0]
        (grad_k,) = kernel_operands(precision, grad)
        scale = None if keep is None else 1.0 / (1.0 - ctx.drop)

        def dropped_weights(t: Tensor, temporary: bool) -> Tensor:
            """``t`` times what the forward multiplied P by (the dropout's mask and scale, the
            edge values), in the forward's order (the same bits); in place on a temporary."""
            for factor in (keep, scale, edge_values):
                if factor is not None:
                    t = t.mul_(factor) if temporary else t * factor
                    temporary = True
            return t

        grad_ft = grad_er = grad_el = None
        if need_ft:  # out = P' @ H: dH = P'^T @ dOut
            out_fp32 = ctx.ft_dtype == torch.float32
            if prob is None and _fused(precision, k):  # P^T computed as the SpMM stages it
                grad_ft = spmm_tensor_core(
                    *transposed,
                    None,
                    grad_k,
                    n_cols,
                    k,
                    precision,
                    torch.float32 if out_fp32 else grad_k.dtype,
                    gat=GatAttention(el.view(-1), row_info, ctx.slope, transposed=True),
                )
            else:
                if prob is None:  # P' = P, computed in A^T's layout
                    dropped_t = gat_softmax_transposed_cuda(
                        *transposed, el.view(-1), ctx.slope, row_info, k
                    )
                else:
                    dropped_t = transposed_values(
                        dropped_weights(prob, False), t_col_idx, t_perm, t_src
                    )
                grad_ft = _spmm(
                    *transposed, dropped_t, grad_k, n_cols, k, precision, out_fp32, *NO_TRANSPOSE
                )
                del dropped_t
            grad_ft = grad_ft.to(ctx.ft_dtype)
        if need_er or need_el:
            # scores = er_i + el_j: d er_i sums row i of their gradient, d el_j column j
            if prob is None and _fused(
                precision, k
            ):  # neither dP nor the scores' gradient is stored
                d_er, d_el = gat_softmax_backward_tensor_core(
                    pattern, transposed, grad_k, ft_k, precision, el.view(-1), row_info, ctx.slope
                )
                d_er, d_el = d_er[:n_rows].view(-1, 1), d_el[:n_cols].view(-1, 1)
            else:
                d_prob = dropped_weights(
                    _sddmm(*pattern, grad_k, ft_k, k, precision, *NO_TRANSPOSE), True
                )
                d_scores, d_er = _attention_backward(
                    pattern, er, el, ctx.slope, prob, row_info, d_prob, n_rows, k
                )
                del d_prob
                if need_er and d_er is None:
                    d_er = _row_sums(*pattern, d_scores, n_rows, n_cols, k)
                d_el = _column_sums(d_scores, t_indptr, t_src) if need_el else None
            grad_er = d_er.to(er.dtype) if need_er else None
            grad_el = d_el.to(el.dtype) if need_el else None
        return grad_ft, grad_er, grad_el, None, None, None, None, None, None, None, None, None


def gat_attention(
    a: MEBCRS,
    ft: Tensor,
    er: Tensor,
    el: Tensor,
    negative_slope: float = 0.2,
    attn_drop: float = 0.0,
    precision: str = "fp32",
    *,
    edge_values: Tensor | None = None,
    return_attention: bool = False,
):
    """``P @ ft`` with ``P = dropout(edge_softmax(a, leaky_relu(er_i + el_j)))`` [* edge_values].

    a: MEBCRS [N_dst, N_src] (for several heads, ``Graph.adj_heads``); ft [N_src, F] float16/
    bfloat16/float32/float64, the sources' features; er [N_dst, 1] (the destinations' score
    terms) and el [N_src, 1] (the sources'), float32 (float64 with float64 ft); attn_drop:
    the dropout probability on the attention (0: none; the caller passes 0 in eval mode);
    edge_values: constant or differentiable factors in A's value layout applied after the
    dropout. Scores and softmax run in fp32 (float64 for float64 inputs), exact; the
    aggregation in ``precision``. Returns [N_dst, F] in ft's dtype, with ``return_attention``
    also P [8 * n_vectors] (differentiable). Differentiable once in ft, er and el (the composed
    ops, used when compiling, also give second derivatives).
    """
    check_precision(precision)
    check_dense("ft", ft, a.n_cols, a.device)
    check_dense("er", er, a.n_rows, a.device)
    check_dense("el", el, a.n_cols, a.device)
    if er.shape[1] != 1 or el.shape[1] != 1:
        raise ValueError(
            f"er and el must be columns [N, 1], got {tuple(er.shape)} and {tuple(el.shape)}"
        )
    if not 0.0 <= attn_drop <= 1.0:
        raise ValueError(f"attn_drop must be a probability, got {attn_drop}")
    if edge_values is not None:
        check_values("edge_values", edge_values, a)
    composed = (
        tracing()
        or return_attention
        or attn_drop == 1.0
        or (edge_values is not None and edge_values.requires_grad)
    )
    if composed:
        prob = edge_softmax(
            a, F.leaky_relu(sddmm(a, *_score_operands(er, el), "fp32"), negative_slope)
        )
        if attn_drop > 0:
            prob = F.dropout(prob, attn_drop)
        if edge_values is not None:
            prob = prob * edge_values
        out = spmm(a, ft, precision, values=prob)
        return (out, prob) if return_attention else out
    need_t = torch.is_grad_enabled() and (ft.requires_grad or er.requires_grad or el.requires_grad)
    return _Attention.apply(
        ft,
        er,
        el,
        edge_values,
        pattern_args(a),
        transpose_args(a, need_t),
        a.transpose().indptr if need_t else None,
        a.n_rows,
        a.k,
        float(negative_slope),
        float(attn_drop),
        precision,
    )
