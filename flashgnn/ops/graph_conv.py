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

Given a layer's ``NodeReplay`` (``ops.replay``), the forward's kernels after the features'
copy into a static buffer, and the backward's after the bias gradient and the gradient's
16-bit copy, are replayed from CUDA graphs: the same functions (``_forward_body``,
``_backward_body``) run eagerly or captured, so both give the same bits.

A backward asked for a higher derivative (``create_graph``) computes the same gradients from
the SpMM's registered entry and plain products, which autograd records, and never replays.

An ``ops.epilogue.Epilogue`` (ReLU, the next layer's dropout, the cast to its input type)
is applied where the output is written, with the bias: by one elementwise kernel after the
last product, inside the replayed body; the node keeps its output (ReLU's mask) and a copy of
the dropout's key, and its backward first passes the gradient through the epilogue.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._cuda.column_sums import cast_and_sum_columns_cuda
from ..formats.mebcrs import MEBCRS
from ..tensor_cache import tensor_version
from . import epilogue as epi
from ._autograd import tracing
from ._pattern import (
    NO_TRANSPOSE,
    check_dense,
    check_values,
    pattern_args,
    transpose_args,
    transposed_values,
)
from .dispatch import spmm
from .precision import check_precision, half_storage, kernel_operands
from .replay import Configuration, NodeReplay, Slot, backward_slot, forward_slot
from .spmm import _spmm, spmm_call


def _dense_dtype(feat: Tensor) -> torch.dtype:
    """The dtype the projection runs in: autocast's on feat's device (float64 stays), else
    feat's."""
    device = feat.device.type
    if feat.dtype != torch.float64 and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return feat.dtype


# torch.mm and torch.addmm with out_dtype (torch >= 2.8): fp16/bf16 products written in fp32 on CUDA
_FP32_PRODUCTS = hasattr(torch.ops.aten.mm, "dtype") and hasattr(torch.ops.aten.addmm, "dtype")


def _fp32_product(a: Tensor, dtype: torch.dtype) -> bool:
    """Whether cuBLAS can write the product of 16-bit ``a`` (and an operand of its type) in
    ``dtype`` directly: fp32 output from fp16/bf16 CUDA operands."""
    return (
        _FP32_PRODUCTS
        and dtype == torch.float32
        and a.is_cuda
        and a.dtype in (torch.float16, torch.bfloat16)
    )


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


def _bias_gradient(
    grad: Tensor,
    bias_dtype: torch.dtype | None,
    dtype: torch.dtype | None,
    out: Tensor | None = None,
) -> tuple[Tensor | None, Tensor]:
    """(the bias gradient: grad's column sums in ``bias_dtype``, None without it; grad in
    ``dtype``, as it is without, written into ``out`` when given). One kernel on CUDA for an
    fp32 grad going to 16 bits."""
    if (
        bias_dtype is not None
        and grad.is_cuda
        and grad.dtype == torch.float32
        and dtype in (torch.float16, torch.bfloat16)
    ):
        grad_16, sums = cast_and_sum_columns_cuda(grad, dtype, out)
        return sums.to(bias_dtype), grad_16
    grad_bias = None if bias_dtype is None else grad.sum(0).to(bias_dtype)
    if out is not None:
        return grad_bias, out.copy_(grad)
    return grad_bias, (grad if dtype is None else grad.to(dtype))


def _projects_first(weight: Tensor | None) -> bool:
    """Whether X W is formed before the aggregation: W [F_in, F_out] narrows the features."""
    return weight is not None and weight.shape[0] > weight.shape[1]


class _GraphConv(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, feat, weight, bias, values, pattern, transposed, shape, k, precision, epilogue, replay
    ):
        """epilogue: an ``Epilogue`` or None; replay: (Configuration, Slot or None) when the
        layer replays its kernels, else None. Returns (out, the operand dW is taken from when
        it stands in for feat, else None)."""
        dtype = _dense_dtype(feat) if weight is not None else feat.dtype
        project_first = _projects_first(weight)
        slot = forward_slot(replay)
        if slot is not None:
            out, saved, w, key = slot.replay_forward(feat)
        else:
            x = feat.to(_input_dtype(feat.dtype, precision, dtype, project_first))
            out, saved, w, key = _forward_body(
                x,
                weight,
                bias,
                values,
                pattern,
                shape,
                k,
                precision,
                dtype,
                project_first,
                epilogue,
            )
        # A higher derivative differentiates dW through its operand and dX through W. Where
        # the node holds stand-ins for them (a cast, A X, a replay's static buffers), the
        # operand becomes a second output, whose gradient the backward carries back to feat
        # (holding feat itself would keep a layer's input alive), and W is saved as well.
        both = ctx.needs_input_grad[0] and ctx.needs_input_grad[1]
        operand = saved if both and saved is not feat else None
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(
            saved,
            w,
            values,
            weight if both and w is not weight else None,
            out if epilogue is not None and epilogue.relu else None,
            key,
            *transposed,
        )
        ctx.epilogue = epilogue
        ctx.product_dtype = _product_dtype(dtype, bias)
        ctx.project_first, ctx.pattern, ctx.shape, ctx.k, ctx.precision, ctx.replay = (
            project_first,
            pattern,
            shape,
            k,
            precision,
            replay,
        )
        ctx.dtypes = (
            feat.dtype,
            None if weight is None else weight.dtype,
            None if bias is None else bias.dtype,
        )
        return out, operand

    @staticmethod
    def backward(ctx, grad, grad_operand):
        saved, w, values, weight, out, key, *transposed = ctx.saved_tensors
        need_bias = ctx.needs_input_grad[2]
        bias_dtype = ctx.dtypes[2] if need_bias else None
        # grad mode is on where a higher derivative is asked for (create_graph): the gradients
        # are then recorded, from the SpMM's entry and W itself, and never replayed
        recorded = torch.is_grad_enabled()
        if ctx.epilogue is not None and grad is not None:
            grad = epi.backward(grad, out, ctx.epilogue, key, ctx.product_dtype)
        slot = None
        if not recorded and grad is not None and grad_operand is None:
            slot = backward_slot(ctx.replay)
        # the product's gradients run in its dtype
        if slot is not None:
            grad_bias, _ = _bias_gradient(
                grad, bias_dtype, slot.grad_input.dtype, out=slot.grad_input
            )
            grad_feat, grad_weight = slot.replay_backward()
            return grad_feat, grad_weight, grad_bias, *(None,) * 8
        grad_bias = None
        if recorded:
            w = w if weight is None else weight.to(w.dtype)
            if grad is not None:
                grad_bias = None if bias_dtype is None else grad.sum(0).to(bias_dtype)
                grad = grad if w is None else grad.to(w.dtype)
        elif grad is not None:
            grad_bias, grad = _bias_gradient(grad, bias_dtype, None if w is None else w.dtype)
        grad_feat, grad_weight = _backward_body(
            grad,
            saved,
            w,
            values,
            ctx.pattern,
            transposed,
            ctx.shape,
            ctx.k,
            ctx.precision,
            ctx.project_first,
            ctx.needs_input_grad[:2],
            ctx.dtypes[:2],
            grad_operand,
            recorded,
        )
        return grad_feat, grad_weight, grad_bias, *(None,) * 8


def _product_dtype(dtype: torch.dtype, bias: Tensor | None) -> torch.dtype:
    """The type of the product plus the bias, for a product in ``dtype``."""
    return dtype if bias is None else torch.promote_types(dtype, bias.dtype)


def _input_dtype(
    feat_dtype: torch.dtype, precision: str, dtype: torch.dtype, project_first: bool
) -> torch.dtype:
    """The dtype the forward's first kernel reads the features in: the product's ``dtype``
    when W multiplies first; else the SpMM's storage type when that is ``dtype`` (the SpMM
    rounds to it anyway, and then writes its result in it: no cast of the aggregate)."""
    return dtype if project_first or dtype == half_storage(precision) else feat_dtype


def _forward_body(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    values: Tensor,
    pattern: tuple,
    shape: tuple,
    k: int,
    precision: str,
    dtype: torch.dtype,
    project_first: bool,
    epilogue: epi.Epilogue | None = None,
) -> tuple:
    """(out, the tensor the backward multiplies by (X W's X, or A X), W in ``dtype``, the copy
    of the epilogue's key its dropout drew with or None) from x, the features in
    ``_input_dtype``. The epilogue adds the bias where no cuBLAS call does."""
    w = None if weight is None else weight.to(dtype)
    key = None
    if epilogue is not None and epilogue.threshold:
        key = epilogue.key.clone()  # the backward draws the mask again from this step's key
    if project_first:
        y = _spmm(*pattern, values, torch.mm(x, w), shape[0], k, precision, False, *NO_TRANSPOSE)
        saved = x
    else:
        saved = _spmm(
            *pattern, values, x, shape[0], k, precision, x.dtype == torch.float32, *NO_TRANSPOSE
        ).to(dtype)
        y = saved
        if w is not None:
            y, bias = _project(saved, w, bias), None
    if epilogue is not None:
        return epi.apply(y, bias, epilogue, key), saved, w, key
    return (y if bias is None else y + bias), saved, w, key


def _backward_body(
    grad: Tensor | None,
    saved: Tensor,
    w: Tensor | None,
    values: Tensor,
    pattern: tuple,
    transposed: list,
    shape: tuple,
    k: int,
    precision: str,
    project_first: bool,
    needs: tuple,
    dtypes: tuple,
    grad_operand: Tensor | None = None,
    recorded: bool = False,
) -> tuple:
    """(grad_feat, grad_weight), None where not ``needs``, from the output's gradient in the
    product's dtype (None: none reached the output) and ``grad_operand``, that of the operand
    the forward returned (``saved``: X in the product's dtype, or A X), or None; ``dtypes``:
    the features' and the weight's. A^T's values come from the cache an eager backward filled
    before any capture of this one (``ops.replay``). With ``recorded`` the gradients are
    functions autograd records (the SpMM's entry, plain products)."""
    need_feat, need_weight = needs
    feat_dtype, weight_dtype = dtypes
    t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src = transposed
    spmm, product = (spmm_call, _recorded_product) if recorded else (_spmm, _product)

    def propagate_back(g: Tensor, out_dtype: torch.dtype) -> Tensor:
        """A^T g in ``out_dtype`` (A^T's own transpose is A, with the slot pairs swapped)."""
        values_t = transposed_values(values, t_col_idx, t_perm, t_src, cache=True)
        return spmm(
            t_row_ptr,
            t_col_idx,
            t_vec_mask,
            values_t,
            *kernel_operands(precision, g),
            shape[1],
            k,
            precision,
            out_dtype == torch.float32,
            *pattern,
            t_src,
            t_perm,
        ).to(out_dtype)

    grad_feat = grad_weight = None
    if project_first:  # out = A (X W): d(XW) = A^T dOut
        if grad is not None and (need_feat or need_weight):
            d_xw = propagate_back(grad, w.dtype)
            grad_weight = product(saved.t(), d_xw, weight_dtype) if need_weight else None
            grad_feat = product(d_xw, w.t(), feat_dtype) if need_feat else None
        if grad_operand is not None:
            d_feat = grad_operand.to(feat_dtype)
            grad_feat = d_feat if grad_feat is None else grad_feat + d_feat
    else:  # out = (A X) W, or A X without weight
        if grad is not None and w is not None and need_weight:
            grad_weight = product(saved.t(), grad, weight_dtype)
        if need_feat:
            d_ax = grad if grad is None or w is None else torch.mm(grad, w.t())
            if grad_operand is not None:
                d_ax = grad_operand if d_ax is None else d_ax + grad_operand
            grad_feat = None if d_ax is None else propagate_back(d_ax, feat_dtype)
    return grad_feat, grad_weight


def _recorded_product(a: Tensor, b: Tensor, dtype: torch.dtype) -> Tensor:
    """``_product`` as autograd records it."""
    return torch.mm(a, b).to(dtype)


def graph_conv(
    a: MEBCRS,
    feat: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    precision: str = "fp32",
    *,
    values: Tensor | None = None,
    replay: NodeReplay | None = None,
    epilogue: epi.Epilogue | None = None,
) -> Tensor:
    """``A (feat W) + bias`` when W has more rows than columns, else ``(A feat) W + bias``.

    a: MEBCRS [N, M]; feat [M, F_in] float16/bfloat16/float32/float64; weight [F_in, F_out] or
    None (no projection); bias [F_out] (or [F_in] without weight) or None; values: A's values
    in its value layout to use instead of ``a.values``; replay: the calling layer's
    ``NodeReplay``, to replay the kernels from CUDA graphs where it applies (``ops.replay``;
    the same bits); epilogue: ``ops.epilogue.Epilogue``, what follows the bias (ReLU, the next
    layer's dropout, the cast), applied as the output is written. The SpMM runs in
    ``precision`` (fp32 accumulation), the projection in autocast's dtype when autocast is on,
    else in feat's. Returns [N, F_out] (in the epilogue's dtype when it sets one).
    Differentiable in feat, weight and bias to any order (in values too, through the composed
    ops, when they require a gradient).
    """
    check_precision(precision)
    values = a.values if values is None else values
    check_values("values", values, a)
    check_dense("feat", feat, a.n_cols, a.device)
    if weight is not None and (weight.dim() != 2 or weight.shape[0] != feat.shape[1]):
        raise ValueError(
            f"weight must have shape ({feat.shape[1]}, out_features), got {tuple(weight.shape)}"
        )
    if epilogue is not None and epilogue.does_nothing():
        epilogue = None
    if epilogue is not None and epilogue.key is not None and epilogue.key.device != feat.device:
        raise ValueError(f"epilogue key is on {epilogue.key.device}, feat on {feat.device}")
    if tracing() or values.requires_grad:
        out = _composed(a, feat, weight, None if epilogue else bias, precision, values)
        return out if epilogue is None else epi.epilogue(out, bias, epilogue)
    # A^T serves dX, and dW when W multiplies first (d(XW) = A^T dOut): not the first layer of
    # a mini-batch, whose input features need no gradient (its block, the largest, then needs
    # no transpose at all)
    need_t = torch.is_grad_enabled() and (
        feat.requires_grad
        or (weight is not None and weight.requires_grad and _projects_first(weight))
    )
    args = (
        feat,
        weight,
        bias,
        values,
        pattern_args(a),
        transpose_args(a, need_t),
        (a.n_rows, a.n_cols),
        a.k,
        precision,
        epilogue,
    )
    plan = None
    if replay is not None and feat.dtype != torch.float64 and replay.applies(feat, a.nnz):
        plan = _replay_plan(replay, a, *args)
    return _GraphConv.apply(*args, plan)[0]


def _replay_plan(
    replay: NodeReplay,
    a: MEBCRS,
    feat: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    values: Tensor,
    pattern: tuple,
    transposed: tuple,
    shape: tuple,
    k: int,
    precision: str,
    epilogue: epi.Epilogue | None,
) -> tuple[Configuration, Slot | None]:
    """(this call's configuration, the slot its forward replays on, or None to run eagerly)."""
    dtype = _dense_dtype(feat) if weight is not None else feat.dtype
    grad = torch.is_grad_enabled()
    needs = tuple(grad and t is not None and t.requires_grad for t in (feat, weight, bias))
    key = (
        id(a),
        id(values),
        tensor_version(values),
        id(weight),
        0 if weight is None else weight.data_ptr(),
        id(bias),
        0 if bias is None else bias.data_ptr(),
        feat.shape,
        feat.dtype,
        dtype,
        precision,
        needs,
        transposed[0] is not None,
        None if epilogue is None else epilogue.identity(),
    )
    project_first = _projects_first(weight)
    x_dtype = _input_dtype(feat.dtype, precision, dtype, project_first)
    weight_dtype = None if weight is None else weight.dtype

    product_dtype = _product_dtype(dtype, bias)

    def grad_input(slot: Slot) -> Tensor:
        out, _, w, _ = slot.outputs
        return torch.zeros(
            out.shape, dtype=product_dtype if w is None else w.dtype, device=out.device
        )

    def backward(slot: Slot, g: Tensor) -> tuple:
        _, saved, w, _ = slot.outputs
        return _backward_body(
            g,
            saved,
            w,
            values,
            pattern,
            transposed,
            shape,
            k,
            precision,
            project_first,
            needs[:2],
            (feat.dtype, weight_dtype),
        )

    return replay.plan(
        key,
        (a, values, weight, bias, None if epilogue is None else epilogue.key),
        feat.device,
        lambda: feat.new_zeros(feat.shape, dtype=x_dtype),
        lambda x: _forward_body(
            x, weight, bias, values, pattern, shape, k, precision, dtype, project_first, epilogue
        ),
        grad_input,
        backward if any(needs) else None,
    )


def _composed(
    a: MEBCRS,
    feat: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    precision: str,
    values: Tensor,
) -> Tensor:
    """``graph_conv`` from the registered ops and torch's matmul (autocast applies to it)."""
    if _projects_first(weight):
        out = spmm(a, feat @ weight, precision, values=values)
    elif weight is not None:
        x = feat.to(_input_dtype(feat.dtype, precision, _dense_dtype(feat), False))
        out = spmm(a, x, precision, values=values) @ weight
    else:
        out = spmm(a, feat, precision, values=values)
    return out if bias is None else out + bias
