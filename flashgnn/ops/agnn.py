"""AGNN's propagation as one autograd node: out = P @ X, P = edge softmax of beta * cos(x_i, x_j)
on A's pattern.

The same maths as composing ``sddmm``, ``edge_softmax`` and ``spmm`` (the path taken when
compiling), with the backward written out: every operand is converted to the kernels' type
once, beta is applied inside the softmax kernel, and no intermediate autograd node is built.
On a graph of a few hundred thousand edges the composition spends most of its time on the
host, so this halves a layer's time there. Given a layer's ``NodeReplay`` (``ops.replay``),
the forward's and the backward's kernels, after a copy of their input into a static buffer,
are replayed from CUDA graphs: the same functions (``_forward_body``, ``_backward_body``) run
eagerly or captured, so both give the same bits. A backward asked for a higher derivative
(``create_graph``) recomputes the output by the composed ops, which autograd differentiates
and records, and never replays.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .._cuda.row_normalize import normalize_rows_backward_cuda, normalize_rows_cuda
from ..formats.mebcrs import MEBCRS
from ._autograd import recorded_gradients, tracing
from ._pattern import NO_TRANSPOSE, check_dense, pattern_args, transpose_args, transposed_values
from .agnn_one_pass import one_pass_attention, one_pass_enabled, probabilities
from .edge_softmax import _edge_softmax_backward, edge_softmax_call, scaled_edge_softmax
from .precision import check_precision, half_storage, kernel_operands
from .reference import normalize_rows_backward_reference, normalize_rows_reference
from .replay import Configuration, NodeReplay, Slot, backward_slot, forward_slot
from .sddmm import _sddmm, sddmm_call
from .spmm import _spmm, spmm_call

NORMALIZE_EPS = (
    1e-12  # F.normalize's default, as DGL and PyG use it (kernels/row_normalize.cu: EPS)
)


class _Propagate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feat, feat_dst, beta, pattern, transposed, n_rows, k, precision, replay):
        """replay: (Configuration, Slot or None) when the layer replays its kernels, else None.
        Returns (out, a replay's static copy of feat when feat needs a gradient, else None)."""
        slot = forward_slot(replay)
        if slot is not None:
            out, *saved = slot.replay_forward(feat)
        else:
            out, *saved = _forward_body(feat, feat_dst, beta, pattern, n_rows, k, precision)
        # A higher derivative recomputes the composition from feat: a replayed forward holds
        # a static copy of it, which becomes a second output whose gradient the backward
        # passes on to feat (holding feat itself would keep a layer's input alive).
        copy = saved[0] if slot is not None and ctx.needs_input_grad[0] else None
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*saved, feat_dst, beta, *pattern, *transposed)
        ctx.n_rows, ctx.k, ctx.precision, ctx.replay = n_rows, k, precision, replay
        return out, copy

    @staticmethod
    def backward(ctx, grad, grad_copy):
        needs = ctx.needs_input_grad[:3]
        if grad is None:
            grads = (None, None, None)
        elif torch.is_grad_enabled():  # a higher derivative: recorded, never replayed
            saved = ctx.saved_tensors  # _forward_body's 8, feat_dst, beta, A's 3, A^T's 5
            feat, *_, feat_dst, beta = saved[:10]
            grads = recorded_gradients(
                lambda *inputs: _composed(
                    saved[10:13], saved[13:], *inputs, ctx.n_rows, ctx.k, ctx.precision
                ),
                (feat, feat_dst, beta),
                needs,
                grad,
            )
        else:
            slot = None if grad_copy is not None else backward_slot(ctx.replay)
            if slot is not None:
                slot.grad_input.copy_(grad)
                grads = slot.replay_backward()
            else:
                grads = _backward_body(
                    grad, *ctx.saved_tensors, ctx.n_rows, ctx.k, ctx.precision, needs
                )
        grad_feat, grad_dst, grad_beta = grads
        if grad_copy is not None:
            grad_feat = grad_copy if grad_feat is None else grad_feat + grad_copy
        return grad_feat, grad_dst, grad_beta, None, None, None, None, None, None


def _forward_body(
    feat: Tensor,
    feat_dst: Tensor | None,
    beta: Tensor,
    pattern: tuple,
    n_rows: int,
    k: int,
    precision: str,
) -> tuple:
    """(out, then what the backward reads: feat, feat_k, unit_k, unit_dst_k, norm, norm_dst,
    cos, prob)."""
    unit_k, feat_k, norm, unit_dst_k, norm_dst = _operands(feat, feat_dst, n_rows, precision)
    cos = _sddmm(*pattern, unit_dst_k, unit_k, k, precision, *NO_TRANSPOSE)
    prob = scaled_edge_softmax(*pattern, cos, beta, n_rows, k)
    wide = feat.dtype != torch.float64  # fp32 results (float64 stays)
    out = _spmm(*pattern, prob, feat_k, n_rows, k, precision, wide, *NO_TRANSPOSE)
    return out.to(feat.dtype), feat, feat_k, unit_k, unit_dst_k, norm, norm_dst, cos, prob


def _operands(feat: Tensor, feat_dst: Tensor | None, n_rows: int, precision: str) -> tuple:
    """(unit_k, feat_k, norm, unit_dst_k, norm_dst): the normalised sources and destinations
    and feat as the kernels read them, and the row norms (norm_dst None without feat_dst)."""
    unit_k, feat_k, norm = _normalize(feat, precision)
    if feat_dst is None:  # the destinations are the first n_rows sources
        return unit_k, feat_k, norm, unit_k[:n_rows], None
    unit_dst_k, _, norm_dst = _normalize(feat_dst, precision, with_feat=False)
    return unit_k, feat_k, norm, unit_dst_k, norm_dst


class _OnePassPropagate(torch.autograd.Function):
    """The one-pass path (ops/agnn_one_pass.py): the forward keeps the row statistics instead of
    the cosines and P; the backward recomputes both, then runs ``_backward_body``."""

    @staticmethod
    def forward(ctx, feat, feat_dst, beta, pattern, transposed, n_rows, k, precision):
        unit_k, feat_k, norm, unit_dst_k, norm_dst = _operands(feat, feat_dst, n_rows, precision)
        out, row_max, row_sum = one_pass_attention(
            pattern, unit_dst_k, unit_k, feat_k, beta, n_rows, k, precision, feat.dtype
        )
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(
            feat, feat_k, unit_k, unit_dst_k, norm, norm_dst, row_max, row_sum, feat_dst, beta,
            *pattern, *transposed,
        )  # fmt: skip
        ctx.n_rows, ctx.k, ctx.precision = n_rows, k, precision
        return out

    @staticmethod
    def backward(ctx, grad):
        needs = ctx.needs_input_grad[:3]
        saved = ctx.saved_tensors
        feat, feat_k, unit_k, unit_dst_k, norm, norm_dst, row_max, row_sum, feat_dst = saved[:9]
        beta = saved[9]
        pattern, transposed = saved[10:13], saved[13:]
        n_rows, k, precision = ctx.n_rows, ctx.k, ctx.precision
        if grad is None:
            grads = (None, None, None)
        elif torch.is_grad_enabled():  # a higher derivative: recorded through the composed ops
            grads = recorded_gradients(
                lambda *inputs: _composed(pattern, transposed, *inputs, n_rows, k, precision),
                (feat, feat_dst, beta),
                needs,
                grad,
            )
        else:
            cos = _sddmm(*pattern, unit_dst_k, unit_k, k, precision, *NO_TRANSPOSE)
            prob = probabilities(pattern, cos, beta, row_max, row_sum, n_rows, k)
            grads = _backward_body(
                grad, feat, feat_k, unit_k, unit_dst_k, norm, norm_dst, cos, prob, feat_dst, beta,
                *pattern, *transposed, n_rows, k, precision, needs,
            )  # fmt: skip
        return (*grads, None, None, None, None, None)


def _backward_body(
    grad: Tensor,
    feat: Tensor,
    feat_k: Tensor,
    unit_k: Tensor,
    unit_dst_k: Tensor,
    norm: Tensor,
    norm_dst: Tensor | None,
    cos: Tensor,
    prob: Tensor,
    feat_dst: Tensor | None,
    beta: Tensor,
    row_ptr: Tensor,
    col_idx: Tensor,
    vec_mask: Tensor,
    t_row_ptr: Tensor | None,
    t_col_idx: Tensor | None,
    t_vec_mask: Tensor | None,
    t_perm: Tensor | None,
    t_src: Tensor | None,
    n_rows: int,
    k: int,
    precision: str,
    needs: tuple,
) -> tuple:
    """(d_feat, d_feat_dst, d_beta), None where not ``needs``, from the output's gradient and
    what ``_forward_body`` returned."""
    pattern, transposed = (row_ptr, col_idx, vec_mask), (t_row_ptr, t_col_idx, t_vec_mask)
    n_cols = feat.shape[0]
    wide = feat.dtype != torch.float64
    (grad_k,) = kernel_operands(precision, grad)
    # out = P @ X: dP = SDDMM(dOut, X)
    d_prob = _sddmm(*pattern, grad_k, feat_k, k, precision, *NO_TRANSPOSE)
    # P = softmax(beta * cos)
    d_scores = _edge_softmax_backward(*pattern, prob, d_prob, n_rows, k)
    del d_prob  # slot-sized temporaries are freed as soon as they are used (GBs on large graphs)
    grad_beta = torch.dot(d_scores, cos).reshape(1).to(beta.dtype) if needs[2] else None
    if not (needs[0] or needs[1]):
        return None, None, grad_beta
    # dX = P^T @ dOut + the path through cos
    prob_t = transposed_values(prob, t_col_idx, t_perm, t_src)
    d_feat = _spmm(*transposed, prob_t, grad_k, n_cols, k, precision, wide, *NO_TRANSPOSE)
    del prob_t
    # cos = SDDMM(U_dst, U): dU = dcos^T @ U_dst, dU_dst = dcos @ U
    d_cos = d_scores * beta
    del d_scores
    d_unit_dst = _spmm(*pattern, d_cos, unit_k, n_rows, k, precision, wide, *NO_TRANSPOSE)
    d_cos_t = transposed_values(d_cos, t_col_idx, t_perm, t_src)
    del d_cos
    d_unit = _spmm(*transposed, d_cos_t, unit_dst_k, n_cols, k, precision, wide, *NO_TRANSPOSE)
    del d_cos_t
    grad_dst = None
    if feat_dst is not None and needs[1]:
        grad_dst = _normalize_backward(feat_dst, norm_dst, d_unit_dst, torch.zeros_like(d_unit_dst))
        grad_dst = grad_dst.to(feat_dst.dtype)
    # U = X / max(|X|, eps); without feat_dst, U_dst is U's first rows
    d_feat = _normalize_backward(
        feat, norm, d_unit, d_feat, d_unit_dst if feat_dst is None else None
    )
    del d_unit_dst
    return d_feat.to(feat.dtype), grad_dst, grad_beta


def _composed(
    pattern: tuple,
    transposed: tuple,
    feat: Tensor,
    feat_dst: Tensor | None,
    beta: Tensor,
    n_rows: int,
    k: int,
    precision: str,
) -> Tensor:
    """``agnn_propagate`` from the registered ops' entries and F.normalize (what compiling
    traces, and what a higher derivative differentiates)."""
    unit = F.normalize(feat, p=2.0, dim=-1, eps=NORMALIZE_EPS)
    unit_dst = (
        unit[:n_rows]
        if feat_dst is None
        else F.normalize(feat_dst, p=2.0, dim=-1, eps=NORMALIZE_EPS)
    )
    cos = sddmm_call(*pattern, unit_dst, unit, k, precision, *transposed)
    prob = edge_softmax_call(*pattern, beta * cos, n_rows, k)
    return spmm_call(*pattern, prob, feat, n_rows, k, precision, False, *transposed)


def _normalize(
    feat: Tensor, precision: str, with_feat: bool = True
) -> tuple[Tensor, Tensor | None, Tensor]:
    """(U = feat / max(|feat_i|, eps) and, when ``with_feat``, feat, as the kernels of
    ``precision`` read them; the row norms): one kernel on the GPU, F.normalize's ops otherwise."""
    if feat.is_cuda and feat.dtype != torch.float64:
        storage = half_storage(precision) or torch.float32
        unit_k, feat_k, norm = normalize_rows_cuda(
            feat, storage, convert_x=with_feat and feat.dtype != storage
        )
        return unit_k, feat if with_feat and feat_k is None else feat_k, norm
    unit, norm = normalize_rows_reference(feat, NORMALIZE_EPS)
    unit_k, feat_k = kernel_operands(precision, unit, feat if with_feat else None)
    return unit_k, feat_k, norm


def _normalize_backward(
    feat: Tensor, norm: Tensor, d_unit: Tensor, d_feat: Tensor, d_head: Tensor | None = None
) -> Tensor:
    """d_feat + the gradient of feat through ``_normalize`` (d_unit: that of U, plus ``d_head``
    on its first rows when given)."""
    if norm.is_cuda and feat.dtype != torch.float64:
        return normalize_rows_backward_cuda(feat, norm, d_unit, d_feat, d_head)
    if d_head is not None:
        d_unit[: d_head.shape[0]] += d_head
    return d_feat.add_(normalize_rows_backward_reference(feat, norm, d_unit, NORMALIZE_EPS))


def agnn_propagate(
    a: MEBCRS,
    feat: Tensor,
    beta: Tensor,
    precision: str = "fp32",
    *,
    feat_dst: Tensor | None = None,
    replay: NodeReplay | None = None,
) -> Tensor:
    """``P @ feat`` with ``P = edge_softmax(a, beta * cos)``, cos[slot(i, j)] the cosine of
    destination i's features and source j's, feat[j] (exact: rows L2-normalised as
    ``F.normalize`` does).

    a: MEBCRS [N_dst, N_src]; feat [N_src, F] float16/bfloat16/float32/float64, the sources';
    feat_dst [N_dst, F] of feat's dtype, the destinations', or None: they are feat's first N_dst
    rows (a square graph's nodes, a DGL block's destinations); beta [1] (differentiable).
    Returns [N_dst, F] in feat's dtype. The SDDMM and the SpMM run in ``precision``;
    normalisation and softmax in fp32 (float64 for float64 inputs). Differentiable to any
    order (a higher derivative differentiates the composed ops). replay: the calling
    layer's ``NodeReplay``, to replay the kernels from CUDA graphs where it applies (without
    feat_dst; ``ops.replay``: the same bits).
    """
    check_precision(precision)
    check_dense("feat", feat, a.n_cols, a.device)
    if feat_dst is None:
        if a.n_rows > a.n_cols:
            raise ValueError(
                f"AGNN without feat_dst needs at most as many destinations as sources (the "
                f"first rows of feat), got a {a.n_rows} x {a.n_cols} adjacency"
            )
    else:
        check_dense("feat_dst", feat_dst, a.n_rows, a.device)
        if feat_dst.shape[1] != feat.shape[1] or feat_dst.dtype != feat.dtype:
            raise ValueError(
                f"feat_dst must have feat's features and dtype ({feat.shape[1]}, {feat.dtype}), "
                f"got "
                f"{feat_dst.shape[1]}, {feat_dst.dtype}"
            )
    if not isinstance(beta, Tensor) or beta.shape != (1,) or beta.device != feat.device:
        raise ValueError(f"beta must be a tensor of shape (1,) on {feat.device}, got {beta!r}")
    need_t = torch.is_grad_enabled() and (
        feat.requires_grad
        or beta.requires_grad
        or (feat_dst is not None and feat_dst.requires_grad)
    )
    args = (
        feat,
        feat_dst,
        beta,
        pattern_args(a),
        transpose_args(a, need_t),
        a.n_rows,
        a.k,
        precision,
    )
    if tracing():  # torch.compile traces the registered ops
        return _composed(*args[3:5], feat, feat_dst, beta, *args[5:])
    if one_pass_enabled():  # runs eagerly: no replay
        return _OnePassPropagate.apply(*args)
    plan = None
    if (
        replay is not None
        and feat_dst is None
        and feat.dtype != torch.float64
        and replay.applies(feat, a.nnz)
    ):
        plan = _replay_plan(replay, a, *args)
    return _Propagate.apply(*args, plan)[0]


def _replay_plan(
    replay: NodeReplay,
    a: MEBCRS,
    feat: Tensor,
    feat_dst: None,
    beta: Tensor,
    pattern: tuple,
    transposed: tuple,
    n_rows: int,
    k: int,
    precision: str,
) -> tuple[Configuration, Slot | None]:
    """(this call's configuration, the slot its forward replays on, or None to run eagerly)."""
    grad = torch.is_grad_enabled()
    needs = (grad and feat.requires_grad, False, grad and beta.requires_grad)
    key = (
        id(a),
        id(beta),
        beta.data_ptr(),
        feat.shape,
        feat.dtype,
        precision,
        needs,
        transposed[0] is not None,
    )

    def backward(slot: Slot, g: Tensor) -> tuple:
        return _backward_body(
            g, *slot.outputs[1:], None, beta, *pattern, *transposed, n_rows, k, precision, needs
        )

    return replay.plan(
        key,
        (a, beta),
        feat.device,
        lambda: torch.zeros_like(feat, memory_format=torch.contiguous_format),
        lambda x: _forward_body(x, None, beta, pattern, n_rows, k, precision),
        lambda slot: torch.zeros_like(slot.outputs[0]),
        backward if any(needs) else None,
    )
