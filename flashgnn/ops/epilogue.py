"""What follows a graph convolution's product, applied where its output is written: the bias,
ReLU, the next layer's dropout and the cast to the next layer's input type.

Separate ops would read and write the layer's output four times and keep, for the backward,
ReLU's fp32 output and the dropout's mask. Here the forward is one pass (kernels/epilogue.cu,
after cuBLAS or the SpMM) that keeps nothing but its output, in the next layer's type; the
dropout's mask is a counter-based hash of (seed, offset, the layer's stream, element index)
(``keeps``), drawn again by the backward. The backward is one elementwise kernel that also
casts, rather than a step of the A^T SpMM's read: in a layer that multiplies by W last the
gradient meets W^T before any SpMM, and the bias gradient and dW need the masked gradient
whole anyway. ReLU's mask is the sign of the stored output (an element whose value underflows
the output type gets no gradient, where separate ops would pass it one).

The arithmetic is that of the separate ops in fp32 (float64 stays): the bias added, ReLU, the
kept elements times 1 / (1 - p), then the cast; the CPU twin (vectorised torch, any device)
computes the same bits and draws the same mask as the kernel given a key.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._cuda.epilogue import epilogue_backward_cuda, epilogue_cuda

_M32 = 0xFFFFFFFF
_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True, eq=False)
class Epilogue:
    """A layer's epilogue: ``relu``; ``dropout`` p in [0, 1) of the next layer, its mask drawn
    from ``key`` (int64 [2]: seed, offset, on the features' device; advanced by the caller
    between steps, ``advance``) and ``stream`` (the layer's number, in [0, 2^32)); ``dtype``
    the output's type (None: that of the product plus the bias)."""

    relu: bool = False
    dropout: float = 0.0
    key: Tensor | None = None
    stream: int = 0
    dtype: torch.dtype | None = None

    def __post_init__(self):
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"epilogue dropout must be in [0, 1), got {self.dropout}")
        if not 0 <= self.stream <= _M32:
            raise ValueError(f"epilogue stream must be in [0, 2^32), got {self.stream}")
        if self.dropout > 0 and (
            not isinstance(self.key, Tensor)
            or self.key.dtype != torch.int64
            or self.key.shape != (2,)
        ):
            raise TypeError("epilogue dropout needs a key: an int64 tensor of shape (2,)")
        if self.dtype is not None and not self.dtype.is_floating_point:
            raise TypeError(f"epilogue dtype must be a floating type, got {self.dtype}")

    @property
    def threshold(self) -> int:
        """The 32-bit hash value below which an element is dropped: round(p 2^32)."""
        return min(round(self.dropout * 2**32), _M32)

    @property
    def scale(self) -> float:
        return 1.0 / (1.0 - self.dropout)

    def does_nothing(self) -> bool:
        """Whether it leaves the product plus the bias as it is."""
        return not self.relu and not self.threshold and self.dtype is None

    def identity(self) -> tuple:
        """What a replay key needs of it (the key tensor by identity: its values change)."""
        return (self.relu, self.dropout, id(self.key), self.stream, self.dtype)


def new_key(device=None) -> Tensor:
    """A dropout key: int64 [2], a seed drawn from torch's default generator and offset 0."""
    seed = torch.randint(0, 2**31, (1,), dtype=torch.int64)
    return torch.cat([seed, torch.zeros(1, dtype=torch.int64)]).to(device)


def advance(key: Tensor) -> None:
    """The next step's masks: the key's offset plus one, in place and on its device, so that a
    CUDA graph that captured it advances it at every replay."""
    key[1:].add_(1)


def _mul32(x: Tensor, c: int) -> Tensor:
    """x c mod 2^32 for x in [0, 2^32) held in int64, in 16-bit halves of c (no overflow)."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _mix32(h: Tensor) -> Tensor:
    """kernels/epilogue.cuh's mix32 on int64 tensors holding 32-bit words."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def keeps(key: Tensor, stream: int, rows: int, columns: int, dropout: float) -> Tensor:
    """bool [rows, columns] on key's device: the elements a dropout of p ``dropout`` keeps with
    ``key`` and ``stream`` (kernels/epilogue.cuh's dropout_keeps, the same bits)."""
    threshold = Epilogue(dropout=dropout, key=key, stream=stream).threshold
    word = (key & _M32).clone()
    k = _mix32(_mix32(word[0] ^ 0x9E3779B9) ^ word[1] ^ ((stream * 0x632BE5AB) & _M32))
    index = torch.arange(rows * columns, dtype=torch.int64, device=key.device)
    h = _mix32(_mix32((index & _M32) ^ k) ^ (index >> 32))
    return (h >= threshold).view(rows, columns)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def output_dtype(y: Tensor, bias: Tensor | None, epilogue: Epilogue) -> torch.dtype:
    """The epilogue's output type for product ``y`` and ``bias``."""
    if epilogue.dtype is not None:
        return epilogue.dtype
    return y.dtype if bias is None else torch.promote_types(y.dtype, bias.dtype)


def _on_kernel(*dtypes: torch.dtype) -> bool:
    return all(d in _KERNEL_DTYPES for d in dtypes)


def apply(y: Tensor, bias: Tensor | None, epilogue: Epilogue, key: Tensor | None = None) -> Tensor:
    """``cast(dropout(relu(y + bias)))``: y [N, F] float16/bfloat16/float32/float64, bias [F]
    or None; ``key`` the key to draw the mask with (default the epilogue's: a forward passes a
    copy, which its backward reads again). Returns [N, F] in ``output_dtype``. One kernel for
    CUDA tensors of the kernel's types (bias read in fp32), else the twin, which autograd
    records (the composed path)."""
    key = epilogue.key if key is None else key
    dtype = output_dtype(y, bias, epilogue)
    if y.is_cuda and _on_kernel(y.dtype, dtype) and y.dim() == 2:
        return epilogue_cuda(
            y, bias, epilogue.relu, epilogue.threshold, epilogue.scale, key, epilogue.stream, dtype
        )
    acc = _accumulator(y.dtype)
    v = y.to(acc)
    if bias is not None:
        v = v + bias.to(acc)
    if epilogue.relu:
        v = torch.relu(v)
    if epilogue.threshold:
        kept = keeps(key, epilogue.stream, v.shape[0], v.shape[1], epilogue.dropout)
        v = torch.where(kept, v * epilogue.scale, torch.zeros((), dtype=acc, device=v.device))
    return v.to(dtype)


def backward(
    grad: Tensor, out: Tensor | None, epilogue: Epilogue, key: Tensor | None, dtype: torch.dtype
) -> Tensor:
    """The gradient of ``apply``'s y: grad [N, F] in ``apply``'s output type, out its output
    (read with ReLU only: None without), ``key`` the one the forward drew with; returns [N, F]
    in ``dtype``. Differentiable in grad on the twin (a higher derivative records it)."""
    key = epilogue.key if key is None else key
    if grad.is_cuda and _on_kernel(grad.dtype, dtype) and not torch.is_grad_enabled():
        return epilogue_backward_cuda(
            grad,
            grad if out is None else out,
            epilogue.relu,
            epilogue.threshold,
            epilogue.scale,
            key,
            epilogue.stream,
            dtype,
        )
    acc = _accumulator(grad.dtype)
    g = grad.to(acc)
    zero = torch.zeros((), dtype=acc, device=g.device)
    if epilogue.relu:
        g = torch.where(out > 0, g, zero)
    if epilogue.threshold:
        kept = keeps(key, epilogue.stream, g.shape[0], g.shape[1], epilogue.dropout)
        g = torch.where(kept, g * epilogue.scale, zero)
    return g.to(dtype)


class _Apply(torch.autograd.Function):
    """``apply`` as one autograd node: the kernel both ways, nothing saved but the output and
    the key's copy."""

    @staticmethod
    def forward(ctx, y, bias, epilogue):
        key = epilogue.key.clone() if epilogue.threshold else None
        out = apply(y, bias, epilogue, key)
        ctx.save_for_backward(out if epilogue.relu else None, key)
        ctx.epilogue, ctx.dtypes = epilogue, (y.dtype, None if bias is None else bias.dtype)
        return out

    @staticmethod
    def backward(ctx, grad):
        out, key = ctx.saved_tensors
        y_dtype, bias_dtype = ctx.dtypes
        acc = _accumulator(y_dtype)
        g = backward(grad, out, ctx.epilogue, key, acc if bias_dtype is not None else y_dtype)
        grad_bias = None
        if bias_dtype is not None and ctx.needs_input_grad[1]:
            grad_bias = g.sum(0).to(bias_dtype)
        return g.to(y_dtype) if ctx.needs_input_grad[0] else None, grad_bias, None


def epilogue(y: Tensor, bias: Tensor | None, epilogue: Epilogue) -> Tensor:
    """``apply`` differentiable in y and bias: [N, F] -> [N, F] in ``output_dtype``; one node,
    which keeps its output (for ReLU's mask) and a copy of the key."""
    if y.dim() != 2:
        raise ValueError(f"epilogue input must be 2-D, got shape {tuple(y.shape)}")
    if bias is not None and bias.shape != (y.shape[1],):
        raise ValueError(f"epilogue bias must have shape ({y.shape[1]},), got {tuple(bias.shape)}")
    if epilogue.key is not None and epilogue.key.device != y.device:
        raise ValueError(f"epilogue key is on {epilogue.key.device}, the input on {y.device}")
    return _Apply.apply(y, bias, epilogue)
