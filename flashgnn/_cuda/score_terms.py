"""Launchers of kernels/score_terms.cu: GAT's per-node score terms and their gradients."""

from __future__ import annotations

import torch

from .runtime import launch, ptr, stride_blocks
from .sources import register
from .spmm import TAG

_TERMS = (1, 2)  # attention vectors per head
SOURCE = register(
    "score_terms.cu",
    [
        f"fg::{kernel}<{tag}, {a}>"
        for kernel in ("score_terms", "score_terms_backward")
        for tag in TAG.values()
        for a in _TERMS
    ],
)
_THREADS = 256
_BLOCKS_PER_SM = 8  # the backward's blocks, over all heads
MAX_FEATURES = _THREADS  # the backward's threads take a feature each


def supported(ft: torch.Tensor, attn: torch.Tensor) -> bool:
    """Whether the kernels take these operands: ft [heads * rows, F] fp16/bf16/fp32 and attn
    [heads, A, F] fp32 (A = 1 or 2, F up to MAX_FEATURES) on one CUDA device."""
    return (
        ft.is_cuda
        and ft.dtype in TAG
        and attn.dtype == torch.float32
        and attn.device == ft.device
        and attn.dim() == 3
        and attn.shape[1] in _TERMS
        and ft.dim() == 2
        and attn.shape[2] == ft.shape[1]
        and 0 < ft.shape[1] <= MAX_FEATURES
        and ft.shape[0] % attn.shape[0] == 0
    )


def score_terms_cuda(ft: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """terms [heads * rows, A] fp32, terms[h * rows + i, a] = ft[h * rows + i] . attn[h, a]."""
    ft, attn = ft.contiguous(), attn.contiguous()  # alive through the launch
    heads, terms_per_head, f_dim = attn.shape
    out = torch.empty(ft.shape[0], terms_per_head, dtype=torch.float32, device=ft.device)
    if ft.shape[0]:
        launch(
            SOURCE,
            f"fg::score_terms<{TAG[ft.dtype]}, {terms_per_head}>",
            ft.device,
            stride_blocks(ft.shape[0], _THREADS),
            (_THREADS,),
            ptr(ft),
            ptr(attn),
            ft.shape[0],
            ft.shape[0] // heads,
            f_dim,
            ptr(out),
        )
    return out


def score_terms_backward_cuda(
    ft: torch.Tensor, attn: torch.Tensor, d_terms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(d_ft in ft's dtype, d_attn [heads, A, F] fp32) from d_terms [heads * rows, A] fp32."""
    ft, attn, d_terms = ft.contiguous(), attn.contiguous(), d_terms.contiguous()
    heads, terms_per_head, f_dim = attn.shape
    rows = ft.shape[0] // heads
    d_ft = torch.empty(ft.shape, dtype=ft.dtype, device=ft.device)
    sms = torch.cuda.get_device_properties(ft.device).multi_processor_count
    blocks = max(1, min(-(-rows // (_THREADS // f_dim)), _BLOCKS_PER_SM * sms // heads))
    partial = torch.empty(
        heads, blocks, terms_per_head, f_dim, dtype=torch.float32, device=ft.device
    )
    launch(
        SOURCE,
        f"fg::score_terms_backward<{TAG[ft.dtype]}, {terms_per_head}>",
        ft.device,
        (blocks, heads),
        (_THREADS,),
        ptr(ft),
        ptr(attn),
        ptr(d_terms),
        rows,
        f_dim,
        ptr(d_ft),
        ptr(partial),
        shmem=terms_per_head * _THREADS * 4,
    )
    return d_ft, partial.sum(1)
