"""The dense end of a GCN layer on a partition, by blocks of rows: ``(a W +) b``, ReLU and the
next layer's dropout, written in the type the next layer reads.

Done as separate ops on a rank of IGB-large (25M rows of 256 columns) it would hold fp32
tensors of 25.6 GB each: the product, the ReLU's output (kept for its backward), the dropout's
output and its mask. Here only a block of rows is in fp32 at a time, the result is written in
the next layer's input type (fp16/bf16 when autocast runs in the precision's storage type,
which is what the next layer would round it to), and the backward keeps one bit per element:
whether the element passed both the ReLU and the dropout. The arithmetic is the separate ops'
(the bias added in fp32, ReLU and dropout on fp32 values, the gradient through them in fp32,
rounded to the product's type for dW and da); the dropout draws its mask block by block.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..ops.graph_conv import _product, _project

# fp32 bytes of the block of rows handled at once (forward and backward)
ROW_BLOCK_BYTES = 1 << 30


def row_blocks(rows: int, width: int):
    """(first, end) of each block of rows whose fp32 [block, width] takes at most
    ROW_BLOCK_BYTES (one empty block when there are no rows)."""
    step = max(1, ROW_BLOCK_BYTES // max(4 * width, 1))
    return [(r, min(r + step, rows)) for r in range(0, rows, step)] or [(0, 0)]


def _shifts(device) -> Tensor:
    return torch.arange(8, dtype=torch.uint8, device=device)


def pack_bits(mask: Tensor) -> Tensor:
    """bool [R, F] -> uint8 [R, ceil(F / 8)]: bit b of byte j is column 8 j + b."""
    rows, width = mask.shape
    pad = -width % 8
    if pad:
        mask = torch.cat([mask, mask.new_zeros(rows, pad)], 1)
    bits = mask.view(rows, -1, 8).to(torch.uint8) << _shifts(mask.device)
    return bits.sum(-1, dtype=torch.uint8)


def unpack_bits(packed: Tensor, width: int) -> Tensor:
    """The inverse of ``pack_bits``: bool [R, width]."""
    bits = (packed[:, :, None] >> _shifts(packed.device)) & 1
    return bits.view(packed.shape[0], -1)[:, :width].bool()


def epilogue(
    a: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    relu: bool,
    dropout: float,
    out_dtype: torch.dtype | None,
    dense: torch.dtype | None,
    reuse_grad: bool = False,
    then: Tensor | None = None,
) -> Tensor:
    """``dropout(relu(a W + bias))`` (each part optional: ``weight`` and ``bias`` None, ``relu``
    False, ``dropout`` 0), [N, F_out] in ``out_dtype`` (None: the type of ``a W + bias``).
    a [N, F_in]; weight [F_in, F_out], multiplied in ``dense`` (autocast's type, or a's),
    giving fp32 where the bias is fp32 (graph_conv's ``_project``); bias [F_out].
    Differentiable in a, weight, bias and then. ``reuse_grad``: the backward writes a's
    gradient into the incoming one where their shapes and types agree (the caller holds no
    other reference to this result's gradient). ``then`` [F_out, F_next], the next layer's
    weight (with ``weight`` given): the result times it, [N, F_next] in ``dense``, the result
    never whole: each block is multiplied as it is made, and the backward makes it again
    from a (kept for dW anyway), W, the bias and the kept bits instead of keeping it."""
    if then is not None and weight is None:
        raise ValueError("epilogue: then needs a weight (the result is made again from a W)")
    return _Epilogue.apply(a, weight, bias, relu, dropout, out_dtype, dense, reuse_grad, then)


def _value(block: Tensor, w: Tensor | None, bias: Tensor | None, dense) -> Tensor:
    """a W + bias (or a + bias) of a block of rows: fp32 where the bias is."""
    if w is not None:
        return _project(block.to(dense), w, bias)
    return block if bias is None else block + bias


class _Epilogue(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, weight, bias, relu, dropout, out_dtype, dense, reuse_grad, then):
        n = a.shape[0]
        w = None if weight is None else weight.to(dense)
        t = None if then is None else then.to(dense)
        width = a.shape[1] if w is None else w.shape[1]
        keep = None
        if relu or dropout > 0:
            keep = a.new_empty((n, -(-width // 8)), dtype=torch.uint8)
        out = None
        for first, end in row_blocks(n, width):
            y = _value(a[first:end], w, bias, dense)
            passed = None
            if relu:
                y = torch.relu(y)
                passed = ~(y <= 0)  # ReLU's backward passes the gradient where this holds
            if dropout > 0:
                y, kept = torch.native_dropout(y, dropout, True)
                passed = kept if passed is None else passed & kept
            if keep is not None:
                keep[first:end] = pack_bits(passed)
            y = y if out_dtype is None else y.to(out_dtype)
            if t is not None:
                y = torch.mm(y.to(dense), t)
            if out is None:
                out = a.new_empty((n, y.shape[1]), dtype=y.dtype)
            out[first:end] = y
            del y, passed
        need_weight = ctx.needs_input_grad[1]
        again = t is not None  # the result is made again in the backward
        ctx.save_for_backward(
            a if need_weight or again else None, w, keep, t, bias if again else None
        )
        ctx.scale = 1.0 / (1.0 - dropout) if dropout > 0 else 1.0
        ctx.relu, ctx.width, ctx.out_dtype = relu, width, out_dtype
        ctx.a_meta = (a.shape[1], a.dtype)
        ctx.types = tuple(None if x is None else x.dtype for x in (weight, bias, then))
        ctx.dense, ctx.reuse = dense, reuse_grad
        return out

    @staticmethod
    def backward(ctx, grad):
        a, w, keep, t, bias = ctx.saved_tensors
        need_a, need_weight, need_bias = ctx.needs_input_grad[:3]
        need_then = ctx.needs_input_grad[8]
        n, width = grad.shape[0], ctx.width
        a_width, a_dtype = ctx.a_meta
        weight_dtype, bias_dtype, then_dtype = ctx.types
        d_a = d_weight = d_bias = d_then = None
        if need_a:
            same = ctx.reuse and t is None and grad.is_contiguous() and grad.dtype == a_dtype
            d_a = grad if same and a_width == width else grad.new_empty((n, a_width), dtype=a_dtype)
        if need_weight:
            d_weight = torch.zeros((a_width, width), dtype=weight_dtype, device=grad.device)
        if need_then:
            d_then = torch.zeros(t.shape, dtype=then_dtype, device=grad.device)
        # in fp32 at least (float64 stays, for checks against float64 references)
        acc = torch.promote_types(grad.dtype, torch.float32)
        if need_bias:
            d_bias = torch.zeros(width, dtype=acc, device=grad.device)
        for first, end in row_blocks(n, width):
            bits = None if keep is None else unpack_bits(keep[first:end], width)
            if t is not None:
                # the forward's result, made again as it was: ReLU and the kept bits (the
                # dropout's mask) scale it as the forward's ops did
                y = _value(a[first:end], w, bias, ctx.dense)
                y = torch.relu(y) if ctx.relu else y
                if bits is not None:
                    y = y * bits * ctx.scale
                y = y if ctx.out_dtype is None else y.to(ctx.out_dtype)
                if need_then:
                    d_then += _product(y.to(ctx.dense).t(), grad[first:end], then_dtype)
                g = torch.mm(grad[first:end], t.t()).to(acc)
                del y
            else:
                g = grad[first:end].to(acc)
            if bits is not None:
                g = g * bits * ctx.scale
            if need_bias:
                d_bias += g.sum(0)
            if w is not None and (need_a or need_weight):
                g = g.to(ctx.dense)
                if need_weight:
                    d_weight += _product(a[first:end].to(ctx.dense).t(), g, weight_dtype)
                if need_a:
                    d_a[first:end] = torch.mm(g, w.t())
            elif need_a:
                d_a[first:end] = g
            del g, bits
        if d_bias is not None:
            d_bias = d_bias.to(bias_dtype)
        return d_a, d_weight, d_bias, None, None, None, None, None, d_then
