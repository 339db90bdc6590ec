"""Precisions of the sparse ops and their emulation in torch.

Every precision accumulates in fp32; the name says how the *inputs* are stored when they
enter the tensor cores. The reference implementation rounds the inputs exactly as the
kernels do, then computes in fp32 (float64 when the inputs are float64, for gradcheck).
"""

from __future__ import annotations

import torch

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")

_STORAGE = {"fp16": torch.float16, "bf16": torch.bfloat16}


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float64 when any input is float64, else float32."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def on_kernels(*tensors: torch.Tensor) -> bool:
    """Whether the CUDA kernels take the inputs: CUDA tensors, none of them float64 (which the
    reference keeps, for gradcheck)."""
    return tensors[0].device.type == "cuda" and all(t.dtype != torch.float64 for t in tensors)


def half_storage(precision: str) -> torch.dtype | None:
    """The 16-bit type fp16/bf16 operands are stored in; None for fp32 and tf32."""
    return _STORAGE.get(precision)


def kernel_operands(precision: str, *tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Dense operands as the CUDA kernels of ``precision`` read them: float32 CUDA tensors
    converted to fp16/bf16 (one tensor passed twice is converted once), the rest (None
    included) unchanged. For operands that several kernels read: each kernel would round them
    to the same values."""
    dtype = _STORAGE.get(precision)
    converted: dict[int, torch.Tensor] = {}
    out = []
    for t in tensors:
        if dtype is not None and t is not None and t.dtype == torch.float32 and t.is_cuda:
            if id(t) not in converted:
                converted[id(t)] = t.to(dtype)
            t = converted[id(t)]
        out.append(t)
    return out


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to tf32 (10 mantissa bits), nearest with ties away from zero, as
    ``cvt.rna.tf32.f32`` does; inf and NaN pass through."""
    bits = x.contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


def round_to_precision(x: torch.Tensor, precision: str, dtype: torch.dtype) -> torch.Tensor:
    """``x`` rounded to the storage type of ``precision``, returned in ``dtype``."""
    if precision in _STORAGE:
        return x.to(_STORAGE[precision]).to(dtype)
    if precision == "tf32":
        return round_tf32(x.to(torch.float32)).to(dtype)
    return x.to(dtype)
