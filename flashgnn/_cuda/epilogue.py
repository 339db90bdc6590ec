"""Launcher of kernels/epilogue.cu: a graph convolution's epilogue (bias, ReLU, the next layer's
dropout, the cast) as one elementwise pass, and its backward."""

from __future__ import annotations

import torch

from .runtime import launch, operand, ptr, stride_blocks
from .sources import register
from .spmm import TAG

SOURCE = register(
    "epilogue.cu",
    [f"fg::epi::epilogue_forward<{TAG[a]}, {TAG[b]}>" for a in TAG for b in TAG]
    + [f"fg::epi::epilogue_backward<{TAG[a]}, {TAG[b]}>" for a in TAG for b in TAG],
)
_THREADS = 256


def _mask_args(relu: bool, threshold: int, scale: float, key: torch.Tensor | None, stream: int):
    if threshold and (key is None or key.dtype != torch.int64 or key.numel() != 2):
        raise ValueError("a dropout needs its key: an int64 tensor of 2 elements (seed, offset)")
    return (int(relu), threshold, scale, ptr(key) if threshold else 0, stream)


def epilogue_cuda(
    y: torch.Tensor,
    bias: torch.Tensor | None,
    relu: bool,
    threshold: int,
    scale: float,
    key: torch.Tensor | None,
    stream: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """``ops.epilogue``'s forward on the GPU: y [n, f] float16/bfloat16/float32 on a CUDA
    device; bias [f] (read in fp32) or None; threshold round(p 2^32), 0 without dropout;
    key int64 [2] on y's device; returns [n, f] in ``dtype`` (a dtype of y's set)."""
    y = operand(y, y.dtype)
    n, f = y.shape
    out = torch.empty(n, f, dtype=dtype, device=y.device)
    if n and f:
        launch(
            SOURCE,
            f"fg::epi::epilogue_forward<{TAG[y.dtype]}, {TAG[dtype]}>",
            y.device,
            stride_blocks(n * f, _THREADS),
            (_THREADS,),
            ptr(y),
            n,
            f,
            0 if bias is None else ptr(operand(bias, torch.float32)),
            *_mask_args(relu, threshold, scale, key, stream),
            ptr(out),
        )
    return out


def epilogue_backward_cuda(
    grad: torch.Tensor,
    out: torch.Tensor,
    relu: bool,
    threshold: int,
    scale: float,
    key: torch.Tensor | None,
    stream: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """``ops.epilogue``'s backward on the GPU: grad and out [n, f] of the forward's output type
    (float16/bfloat16/float32) on a CUDA device; returns the gradient of the epilogue's input,
    [n, f] in ``dtype``."""
    out = operand(out, out.dtype)
    grad = operand(grad, out.dtype)
    n, f = out.shape
    grad_in = torch.empty(n, f, dtype=dtype, device=out.device)
    if n and f:
        launch(
            SOURCE,
            f"fg::epi::epilogue_backward<{TAG[out.dtype]}, {TAG[dtype]}>",
            out.device,
            stride_blocks(n * f, _THREADS),
            (_THREADS,),
            ptr(grad),
            ptr(out),
            n,
            f,
            *_mask_args(relu, threshold, scale, key, stream),
            ptr(grad_in),
        )
    return grad_in
