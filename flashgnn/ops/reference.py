"""Vectorised torch implementations of the sparse ops on ME-BCRS.

They walk the format's blocks (decoded from row_ptr, col_idx, vec_mask and k), never the
original CSR, and run on any device. They are the CPU implementation of the ops and the
reference every CUDA kernel is checked against.
"""

from __future__ import annotations

import torch

from ..formats.mebcrs import WINDOW, SlotCoords, decode_slots
from ..tensor_cache import TensorCache, built_for_reuse, tensor_version
from .precision import compute_dtype, round_to_precision

_CHUNK_ELEMENTS = 1 << 24  # bounds the temporary [chunk, N] products
_COORDS = TensorCache()  # col_idx -> (row_ptr, vec_mask, (k, their versions), coordinates)


def _coords(row_ptr, col_idx, vec_mask, k: int) -> SlotCoords:
    """decode_slots, cached while ``col_idx`` lives, for the same row_ptr, vec_mask and k."""
    key = (k, tensor_version(row_ptr), tensor_version(vec_mask))
    hit = _COORDS.get(col_idx)
    if hit is None or hit[0] is not row_ptr or hit[1] is not vec_mask or hit[2] != key:
        coords = built_for_reuse(lambda: decode_slots(row_ptr, col_idx, vec_mask, k))
        hit = _COORDS.set(col_idx, (row_ptr, vec_mask, key, coords))
    return hit[3]


def _chunks(n: int, width: int):
    step = max(1, _CHUNK_ELEMENTS // max(width, 1))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def spmm_reference(
    row_ptr, col_idx, vec_mask, values, x, n_rows: int, k: int, precision: str, out_fp32: bool
) -> torch.Tensor:
    """A @ x for A in ME-BCRS; x [n_cols, N] -> [n_rows, N]."""
    return spmm_on_coords(
        _coords(row_ptr, col_idx, vec_mask, k), values, x, n_rows, precision, out_fp32
    )


def spmm_on_coords(
    c: SlotCoords, values, x, n_rows: int, precision: str, out_fp32: bool
) -> torch.Tensor:
    """A @ x for A given by the coordinates of its real slots in any value layout."""
    dtype = compute_dtype(values, x)
    xr = round_to_precision(x, precision, dtype)
    vr = round_to_precision(values[c.slot], precision, dtype)
    out = torch.zeros(n_rows, x.shape[1], dtype=dtype, device=x.device)
    for s in _chunks(c.slot.numel(), x.shape[1]):
        out.index_add_(0, c.row[s], vr[s, None] * xr[c.col[s]])
    return out.to(torch.float32 if out_fp32 else x.dtype)


def sddmm_reference(row_ptr, col_idx, vec_mask, x, y, k: int, precision: str) -> torch.Tensor:
    """(x @ y^T) on A's pattern, in A's value layout [8 * n_vectors]; x [n_rows, K], y [n_cols,
    K]."""
    return sddmm_on_coords(
        _coords(row_ptr, col_idx, vec_mask, k), WINDOW * col_idx.numel(), x, y, precision
    )


def sddmm_on_coords(c: SlotCoords, n_slots: int, x, y, precision: str) -> torch.Tensor:
    """(x @ y^T) on the real slots ``c`` of a value layout of ``n_slots`` entries, 0 elsewhere."""
    dtype = compute_dtype(x, y)
    xr = round_to_precision(x, precision, dtype)
    yr = round_to_precision(y, precision, dtype)
    out = torch.zeros(n_slots, dtype=dtype, device=x.device)
    for s in _chunks(c.slot.numel(), x.shape[1]):
        out[c.slot[s]] = (xr[c.row[s]] * yr[c.col[s]]).sum(1)
    return out


def edge_softmax_reference(row_ptr, col_idx, vec_mask, scores, n_rows: int, k: int) -> torch.Tensor:
    """Softmax of ``scores`` ([8 * n_vectors], A's value layout) over each row's real
    nonzeros; slots outside the pattern are 0 in the output."""
    dtype = compute_dtype(scores)
    c = _coords(row_ptr, col_idx, vec_mask, k)
    s = scores[c.slot].to(dtype)
    row_max = torch.full((n_rows,), float("-inf"), dtype=dtype, device=scores.device)
    row_max.scatter_reduce_(0, c.row, s, "amax")
    e = torch.exp(s - row_max[c.row])
    denom = torch.zeros(n_rows, dtype=dtype, device=scores.device).index_add_(0, c.row, e)
    out = torch.zeros(scores.numel(), dtype=dtype, device=scores.device)
    out[c.slot] = e / denom[c.row]
    return out


def edge_softmax_backward_reference(
    row_ptr, col_idx, vec_mask, probs, grad, n_rows: int, k: int
) -> torch.Tensor:
    """d(scores) = p * (g - sum_row(p * g)) on the real slots."""
    dtype = compute_dtype(probs, grad)
    c = _coords(row_ptr, col_idx, vec_mask, k)
    p, g = probs[c.slot].to(dtype), grad[c.slot].to(dtype)
    dot = torch.zeros(n_rows, dtype=dtype, device=probs.device).index_add_(0, c.row, p * g)
    out = torch.zeros(probs.numel(), dtype=dtype, device=probs.device)
    out[c.slot] = p * (g - dot[c.row])
    return out


def normalize_rows_reference(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / max(|x_i|, eps) row-wise, as F.normalize computes it; the norms [N, 1])."""
    norm = x.norm(2, 1, keepdim=True)
    return x / norm.clamp_min(eps), norm


def normalize_rows_backward_reference(
    x: torch.Tensor, norm: torch.Tensor, d_unit: torch.Tensor, eps: float
) -> torch.Tensor:
    """The gradient of x through ``normalize_rows_reference`` given d_unit; the norm takes a
    gradient only where it was not clamped (clamp_min's rule)."""
    denom = norm.clamp_min(eps)
    unit = x / denom
    radial = (d_unit * unit).sum(1, keepdim=True).mul_(norm >= eps)
    return torch.addcmul(d_unit, unit, radial, value=-1).div_(denom)
