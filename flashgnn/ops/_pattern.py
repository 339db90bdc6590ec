"""Unpacking an MEBCRS into the tensors the custom ops take, A^T's values, and checks of dense
inputs."""

from __future__ import annotations

import torch

from .._cuda.move_values import move_values_cuda
from ..formats.mebcrs import MEBCRS
from ..tensor_cache import TensorCache
from ._autograd import tracing

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TRANSPOSED = TensorCache()  # values -> (t_perm, A^T values)
NO_TRANSPOSE = (None,) * 5  # the A^T arguments of an op call that needs no gradient


def pattern_args(a: MEBCRS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return a.row_ptr, a.col_idx, a.vec_mask


def transpose_args(a: MEBCRS, needed: bool) -> tuple:
    """(t_row_ptr, t_col_idx, t_vec_mask, t_perm, t_src) of A^T, or five Nones when no
    gradient will need it (A^T is built once and cached on ``a``)."""
    if not needed:
        return NO_TRANSPOSE
    t = a.transpose()
    return t.fmt.row_ptr, t.fmt.col_idx, t.fmt.vec_mask, t.fmt.perm, t.src_slot


def transposed_values(
    values, t_col_idx, t_perm, t_src, cache: bool = False, vector: int = 8
) -> torch.Tensor:
    """A^T's value layout, ``vector`` slots per vector of ``t_col_idx`` (8 for ME-BCRS, V for
    CVSE), filled from A's values, for the ops, which read real slots only (the padding slots
    are left unset): one kernel on the GPU. With ``cache`` the result is kept for as long as
    ``values`` lives unchanged (for constant values, such as GCN's normalised weights)."""
    if cache and not tracing():
        hit = _TRANSPOSED.get(values)
        if hit is not None and hit[0] is t_perm:
            return hit[1]
    n_slots = vector * t_col_idx.numel()
    # the kernel records no gradient: values that take one in a higher derivative are indexed
    if values.is_cuda and not tracing() and not (values.requires_grad and torch.is_grad_enabled()):
        out = move_values_cuda(values, t_src, t_perm, values.new_empty(n_slots))
    else:
        out = values.new_empty(n_slots)
        out[t_perm] = values[t_src]
    if cache and not tracing():
        _TRANSPOSED.set(values, (t_perm, out))
    return out


def check_dense(name: str, t: torch.Tensor, rows: int, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _FLOATS:
        raise ValueError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if t.shape[0] != rows:
        raise ValueError(
            f"{name} must have {rows} rows to match the sparse matrix, got {t.shape[0]}"
        )
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the sparse matrix is on {device}")


def check_values(name: str, t: torch.Tensor, a: MEBCRS) -> None:
    if t.shape != (a.n_slots,):
        raise ValueError(
            f"{name} must have shape ({a.n_slots},) (A's value layout), got {tuple(t.shape)}"
        )
    if t.dtype not in _FLOATS:
        raise ValueError(f"{name} must be floating point, got {t.dtype}")
    if t.device != a.device:
        raise ValueError(f"{name} is on {t.device} but the sparse matrix is on {a.device}")
