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
per vector, so each pass over one, and each one kept, matters on large graphs. A backward
asked for a higher derivative (``create_graph``) recomputes the output by the composed ops
(with the forward's dropout mask), which autograd differentiates and records, and never
replays.

Given a layer's ``NodeReplay`` (``ops.replay``), the forward's kernels, after copies of ft, er
and el into static buffers, and the backward's, after the gradient's, are replayed from CUDA
graphs, every head in the same launches as eagerly: the same functions (``_forward_body``,
``_backward_body``) run eagerly or captured, so both give the same bits. The attention
dropout's mask comes from ``torch.native_dropout`` on the device's default generator, which
every capture registers with its graph (its Philox seed and offset are read from device
tensors that each replay fills and advances), because that keeps one stream of random numbers
whose eager and replayed draws are the same kernel at the same offset, where a mask made from
a seed and offset of our own would be a second stream to keep in step with torch's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .._cuda.edge_softmax import (
    gat_softmax_backward_cuda,
    gat_softmax_cuda,
    gat_softmax_transposed_cuda,
)
from .._cuda.sddmm import gat_softmax_backward_tensor_core
from .._cuda.slot_row_sums import slot_row_sums_cuda
from .._cuda.spmm import GAT_BLOCK_WIDTH, GatAttention, spmm_tensor_core
from ..formats.mebcrs import MEBCRS
from ..tensor_cache import tensor_version
from ._autograd import recorded_gradients, tracing
from ._pattern import (
    NO_TRANSPOSE,
    check_dense,
    check_values,
    pattern_args,
    transpose_args,
    transposed_values,
)
from .dispatch import spmm
from .edge_softmax import _edge_softmax, _edge_softmax_backward, edge_softmax_call
from .precision import check_precision, kernel_operands
from .replay import Configuration, NodeReplay, Slot, backward_slot, forward_slot
from .sddmm import _sddmm, sddmm_call
from .spmm import _spmm, spmm_call


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


def fused_attention(precision: str, k: int) -> bool:
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
        replay,
    ):
        """replay: (Configuration, Slot or None) when the layer replays its kernels, else None.
        Returns (out, ft as the kernels read it when that is a copy and ft needs a gradient,
        else None)."""
        slot = forward_slot(replay)
        if slot is not None:
            out, ft_k, er_k, el_k, prob, row_info, keep = slot.replay_forward((ft, er, el))
        else:
            out, ft_k, er_k, el_k, prob, row_info, keep = _forward_body(
                ft, er, el, edge_values, pattern, n_rows, k, slope, drop, precision
            )
        # A higher derivative differentiates the composed ops from ft, er and el. Copies of
        # the terms (contiguous, or a replay's static buffers) are small: the inputs are saved
        # beside them. ft's copy (its cast, a replay's static buffer) becomes a second output,
        # whose gradient the backward passes on to ft (holding ft would keep its projection
        # alive).
        need_ft, need_er, need_el = ctx.needs_input_grad[:3]
        ft_copy = ft_k if need_ft and ft_k is not ft else None
        er_in = er if need_er and er_k is not er else None
        el_in = el if need_el and el_k is not el else None
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(
            ft_k,
            er_k,
            el_k,
            prob,
            row_info,
            keep,
            edge_values,
            t_indptr,
            er_in,
            el_in,
            *pattern,
            *transposed,
        )
        ctx.n_rows, ctx.k, ctx.slope, ctx.drop, ctx.precision = n_rows, k, slope, drop, precision
        ctx.ft_dtype, ctx.replay = ft.dtype, replay
        return out, ft_copy

    @staticmethod
    def backward(ctx, grad, grad_ft_k):
        ft_k, er, el, prob, row_info, keep, edge_values, t_indptr, er_in, el_in, *rest = (
            ctx.saved_tensors
        )
        pattern, transposed = rest[:3], rest[3:]
        needs = ctx.needs_input_grad[:3]
        scale = None if keep is None else 1.0 / (1.0 - ctx.drop)
        sizes = ctx.n_rows, ctx.k, ctx.slope, ctx.precision, ctx.ft_dtype
        if grad is None:
            grads = (None, None, None)
        elif torch.is_grad_enabled():  # a higher derivative: recorded from the composed ops
            grads = recorded_gradients(
                lambda *inputs: _composed(
                    pattern, transposed, *inputs, keep, scale, edge_values, *sizes
                ),
                (ft_k, er if er_in is None else er_in, el if el_in is None else el_in),
                needs,
                grad,
            )
        else:
            slot = None if grad_ft_k is not None else backward_slot(ctx.replay)
            if slot is not None:
                slot.grad_input.copy_(grad)
                grads = slot.replay_backward()
            else:
                grads = _backward_body(
                    grad,
                    ft_k,
                    er,
                    el,
                    prob,
                    row_info,
                    (keep, scale, edge_values),
                    t_indptr,
                    pattern,
                    transposed,
                    *sizes,
                    needs,
                )
        grad_ft, grad_er, grad_el = grads
        if grad_ft_k is not None:  # the gradient of ft's copy, the second output
            grad_ft_k = grad_ft_k.to(ctx.ft_dtype)
            grad_ft = grad_ft_k if grad_ft is None else grad_ft + grad_ft_k
        return (grad_ft, grad_er, grad_el) + (None,) * 10


def _forward_body(
    ft: Tensor,
    er: Tensor,
    el: Tensor,
    edge_values: Tensor | None,
    pattern: tuple,
    n_rows: int,
    k: int,
    slope: float,
    drop: float,
    precision: str,
) -> tuple:
    """(out [n_rows, F] in ft's dtype, then what the backward reads: ft as the kernels read it,
    er and el (contiguous on the kernels), P or None where the kernels compute it from the
    records, the rows' records or None, the dropout mask or None)."""
    on_kernels = _on_kernels(er, el)
    if on_kernels:  # every launch reads them as 1-D views: made contiguous once
        er, el = er.contiguous(), el.contiguous()
    # on the kernels, without dropout or edge values, P is computed from the rows' records
    # where it is read (the tensor-core SpMMs as they stage it) and not kept for the backward
    computes_p = on_kernels and drop == 0 and edge_values is None
    (ft_k,) = kernel_operands(precision, ft)
    # fp32 features get an fp32 result even when the kernel reads them in 16 bits
    out_fp32 = ft.dtype == torch.float32
    staged = computes_p and fused_attention(precision, k)
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
    return out.to(ft.dtype), ft_k, er, el, None if computes_p else prob, row_info, keep


def _composed(
    pattern: tuple,
    transposed: tuple,
    ft: Tensor,
    er: Tensor,
    el: Tensor,
    keep: Tensor | None,
    scale: float | None,
    edge_values: Tensor | None,
    n_rows: int,
    k: int,
    slope: float,
    precision: str,
    out_dtype: torch.dtype,
) -> Tensor:
    """The node's output from the registered ops' entries and torch ops, which autograd
    differentiates, with the forward's dropout mask ``keep`` and ``scale``; in ``out_dtype``."""
    prob = _scored_softmax(pattern, transposed, er, el, slope, n_rows, k)
    dropped = _dropped_weights(prob, (keep, scale, edge_values), temporary=False)
    out_fp32 = out_dtype == torch.float32
    return spmm_call(*pattern, dropped, ft, n_rows, k, precision, out_fp32, *transposed).to(
        out_dtype
    )


def _scored_softmax(
    pattern: tuple, transposed: tuple, er: Tensor, el: Tensor, slope: float, n_rows: int, k: int
) -> Tensor:
    """P = edge_softmax(leaky_relu(er_i + el_j)) from the registered ops' entries."""
    scores = sddmm_call(*pattern, *_score_operands(er, el), k, "fp32", *transposed)
    return edge_softmax_call(*pattern, F.leaky_relu(scores, slope), n_rows, k)


def _dropped_weights(t: Tensor, factors: tuple, temporary: bool) -> Tensor:
    """``t`` times what the forward multiplied P by (``factors``: the dropout's mask and scale,
    the edge values, each None when absent), in the forward's order (the same bits); in place
    on a ``temporary``."""
    for factor in factors:
        if factor is not None:
            t = t.mul_(factor) if temporary else t * factor
            temporary = True
    return t


def _backward_body(
    grad: Tensor,
    ft_k: Tensor,
    er: Tensor,
    el: Tensor,
    prob: Tensor | None,
    row_info: Tensor | None,
    factors: tuple,
    t_indptr: Tensor | None,
    pattern: tuple,
    transposed: tuple,
    n_rows: int,
    k: int,
    slope: float,
    precision: str,
    ft_dtype: torch.dtype,
    needs: tuple,
) -> tuple:
    """(d ft in ``ft_dtype``, d er, d el), None where not ``needs``, from the output's gradient
    and what ``_forward_body`` returned (``factors``: the dropout's mask and scale, the edge
    values)."""
    t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = transposed
    transposed = (t_row_ptr, t_col_idx, t_vec_mask)
    need_ft, need_er, need_el = needs
    n_cols = ft_k.shape[0]
    (grad_k,) = kernel_operands(precision, grad)
    grad_ft = grad_er = grad_el = None
    if need_ft:  # out = P' @ H: dH = P'^T @ dOut
        out_fp32 = ft_dtype == torch.float32
        if prob is None and fused_attention(precision, k):  # P^T computed as the SpMM stages it
            grad_ft = spmm_tensor_core(
                *transposed,
                None,
                grad_k,
                n_cols,
                k,
                precision,
                torch.float32 if out_fp32 else grad_k.dtype,
                gat=GatAttention(el.view(-1), row_info, slope, transposed=True),
            )
        else:
            if prob is None:  # P' = P, computed in A^T's layout
                dropped_t = gat_softmax_transposed_cuda(
                    *transposed, el.view(-1), slope, row_info, k
                )
            else:
                dropped_t = transposed_values(
                    _dropped_weights(prob, factors, False), t_col_idx, t_perm, t_src
                )
            grad_ft = _spmm(
                *transposed, dropped_t, grad_k, n_cols, k, precision, out_fp32, *NO_TRANSPOSE
            )
            del dropped_t
    if need_er or need_el:
        # scores = er_i + el_j: d er_i sums row i of their gradient, d el_j column j
        # fused: neither dP nor the scores' gradient is stored
        if prob is None and fused_attention(precision, k):
            d_er, d_el = gat_softmax_backward_tensor_core(
                pattern, transposed, grad_k, ft_k, precision, el.view(-1), row_info, slope
            )
            d_er, d_el = d_er[:n_rows].view(-1, 1), d_el[:n_cols].view(-1, 1)
        else:
            d_prob = _dropped_weights(
                _sddmm(*pattern, grad_k, ft_k, k, precision, *NO_TRANSPOSE), factors, True
            )
            d_scores, d_er = _attention_backward(
                pattern, er, el, slope, prob, row_info, d_prob, n_rows, k
            )
            del d_prob
            if need_er and d_er is None:
                d_er = _row_sums(*pattern, d_scores, n_rows, n_cols, k)
            d_el = _column_sums(d_scores, t_indptr, t_src) if need_el else None
        grad_er = d_er.to(er.dtype) if need_er else None
        grad_el = d_el.to(el.dtype) if need_el else None
    return None if grad_ft is None else grad_ft.to(ft_dtype), grad_er, grad_el


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
    replay: NodeReplay | None = None,
):
    """``P @ ft`` with ``P = dropout(edge_softmax(a, leaky_relu(er_i + el_j)))`` [* edge_values].

    a: MEBCRS [N_dst, N_src] (for several heads, ``Graph.adj_heads``); ft [N_src, F] float16/
    bfloat16/float32/float64, the sources' features; er [N_dst, 1] (the destinations' score
    terms) and el [N_src, 1] (the sources'), float32 (float64 with float64 ft); attn_drop:
    the dropout probability on the attention (0: none; the caller passes 0 in eval mode);
    edge_values: constant or differentiable factors in A's value layout applied after the
    dropout. Scores and softmax run in fp32 (float64 for float64 inputs), exact; the
    aggregation in ``precision``. Returns [N_dst, F] in ft's dtype, with ``return_attention``
    also P [8 * n_vectors] (differentiable). Differentiable in ft, er and el to any order (a
    higher derivative differentiates the composed ops). replay: the calling layer's
    ``NodeReplay``, to replay the kernels from CUDA graphs where it applies (not with
    ``return_attention`` or differentiable edge values; ``ops.replay``: the same bits, and the
    attention dropout's masks of the eager calls).
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
        need_t = torch.is_grad_enabled() and el.requires_grad  # the scores' gradient for el
        prob = _scored_softmax(
            pattern_args(a), transpose_args(a, need_t), er, el, negative_slope, a.n_rows, a.k
        )
        if attn_drop > 0:
            prob = F.dropout(prob, attn_drop)
        if edge_values is not None:
            prob = prob * edge_values
        out = spmm(a, ft, precision, values=prob)
        return (out, prob) if return_attention else out
    need_t = torch.is_grad_enabled() and (ft.requires_grad or er.requires_grad or el.requires_grad)
    args = (
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
    plan = None
    if replay is not None and ft.dtype != torch.float64 and replay.applies(ft, a.nnz):
        plan = _replay_plan(replay, a, *args)
    return _Attention.apply(*args, plan)[0]


def _replay_plan(
    replay: NodeReplay,
    a: MEBCRS,
    ft: Tensor,
    er: Tensor,
    el: Tensor,
    edge_values: Tensor | None,
    pattern: tuple,
    transposed: tuple,
    t_indptr: Tensor | None,
    n_rows: int,
    k: int,
    slope: float,
    drop: float,
    precision: str,
) -> tuple[Configuration, Slot | None]:
    """(this call's configuration, the slot its forward replays on, or None to run eagerly).
    The slot's input is (ft, er, el), each copied into a static buffer."""
    grad = torch.is_grad_enabled()
    needs = tuple(grad and t.requires_grad for t in (ft, er, el))
    key = (
        id(a),
        id(edge_values),
        0 if edge_values is None else tensor_version(edge_values),
        ft.shape,
        ft.dtype,
        er.dtype,
        el.dtype,
        slope,
        drop,
        precision,
        needs,
        transposed[0] is not None,
    )
    scale = 1.0 / (1.0 - drop) if drop > 0 else None

    def new_input() -> tuple[Tensor, Tensor, Tensor]:
        return tuple(
            torch.zeros_like(t, memory_format=torch.contiguous_format) for t in (ft, er, el)
        )

    def backward(slot: Slot, g: Tensor) -> tuple:
        _, ft_k, er_k, el_k, prob, row_info, keep = slot.outputs
        return _backward_body(
            g,
            ft_k,
            er_k,
            el_k,
            prob,
            row_info,
            (keep, scale, edge_values),
            t_indptr,
            pattern,
            transposed,
            n_rows,
            k,
            slope,
            precision,
            ft.dtype,
            needs,
        )

    return replay.plan(
        key,
        (a, edge_values),
        ft.device,
        new_input,
        lambda x: _forward_body(*x, edge_values, pattern, n_rows, k, slope, drop, precision),
        lambda slot: torch.zeros_like(slot.outputs[0]),
        backward if any(needs) else None,
    )
