"""Launchers of the row normalisation kernels (kernels/row_normalize.cu), the CUDA path of
AGNN's normalisation in flashgnn/ops/agnn.py."""

from __future__ import annotations

import torch

from .runtime import launch, ptr
from .sources import register
from .spmm import TAG

_WARPS = 8  # rows per block, one warp each
SOURCE = register(
    "row_normalize.cu",
    [f"fg::rownorm::normalize_rows<{i}, {o}>" for i in TAG.values() for o in TAG.values()]
    + [f"fg::rownorm::normalize_rows_backward<{i}>" for i in TAG.values()],
)


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, tuple]:
    if x.dtype not in TAG or x.dim() != 2 or not x.is_cuda:
        raise ValueError(
            f"x must be a 2-D float16/bfloat16/float32 CUDA tensor, got {x.dtype} {tuple(x.shape)} "
            f"on {x.device}"
        )
    return x.contiguous(), (-(-x.shape[0] // _WARPS),)


def normalize_rows_cuda(x: torch.Tensor, storage: torch.dtype, convert_x: bool):
    """(unit, x_k, norm): x [N, F] divided row-wise by max(|x_i|, 1e-12) in fp32 and stored as
    ``storage``; x itself converted to ``storage`` when ``convert_x`` (else None); the fp32 row
    norms [N]."""
    x, grid = _rows(x)
    n, f = x.shape
    unit = torch.empty(n, f, dtype=storage, device=x.device)
    x_k = torch.empty_like(unit) if convert_x else None
    norm = torch.empty(n, dtype=torch.float32, device=x.device)
    if n:
        launch(
            SOURCE,
            f"fg::rownorm::normalize_rows<{TAG[x.dtype]}, {TAG[storage]}>",
            x.device,
            grid,
            (32 * _WARPS,),
            ptr(x),
            n,
            f,
            ptr(unit),
            ptr(x_k) if convert_x else 0,
            ptr(norm),
        )
    return unit, x_k, norm


def normalize_rows_backward_cuda(
    x: torch.Tensor,
    norm: torch.Tensor,
    d_unit: torch.Tensor,
    d_x: torch.Tensor,
    d_head: torch.Tensor | None = None,
) -> torch.Tensor:
    """d_x += the gradient of x through its normalisation, given d_unit [N, F] fp32 (plus
    ``d_head`` [N_head <= N, F] fp32 on its first rows, when given); d_x a contiguous fp32
    [N, F] tensor, updated in place and returned."""
    x, grid = _rows(x)
    n, f = x.shape
    for name, t, rows in (
        ("d_unit", d_unit, f"{n}"),
        ("d_x", d_x, f"{n}"),
        ("d_head", d_head, f"<= {n}"),
    ):
        if t is None:
            continue
        rows_ok = t.dim() == 2 and (t.shape[0] <= n if name == "d_head" else t.shape[0] == n)
        if (
            not rows_ok
            or t.shape[1] != f
            or t.dtype != torch.float32
            or not t.is_contiguous()
            or t.device != x.device
        ):
            raise ValueError(
                f"{name} must be a contiguous float32 tensor of shape ({rows}, {f}) on {x.device}, "
                f"got {t.dtype} {tuple(t.shape)} on {t.device}"
            )
    if n:
        launch(
            SOURCE,
            f"fg::rownorm::normalize_rows_backward<{TAG[x.dtype]}>",
            x.device,
            grid,
            (32 * _WARPS,),
            ptr(x),
            ptr(norm),
            ptr(d_unit),
            0 if d_head is None else ptr(d_head),
            0 if d_head is None else d_head.shape[0],
            n,
            f,
            ptr(d_x),
        )
    return d_x
