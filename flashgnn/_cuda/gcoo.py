"""Launcher of the GCOO SpMM on CUDA cores (kernels/gcoo.cu): fp32, and tf32 with the inputs
rounded as read. It takes a GCOO's arrays, so any format whose CSR is at hand can run its fp32
SpMM here through a GCOO built once from that CSR and its values moved by ``GCOO.perm``.

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..tensor_cache import TensorCache, built_for_reuse
from .runtime import launch, operand, ptr, stride_blocks
from .sources import register

STRIPS = (1, 2, 4, 8)  # rows per strip the kernel is built for (GCOO.group)
FEATURES = (1, 2, 4)  # per lane: one 4-, 8- or 16-byte load of X
# Features per lane by N: the widest load whose 32-lane tile N fills at least once (N = 32 takes
# one feature, 128 and 256 take four); narrower where N or the addresses forbid it.
FEATURES_FROM_N = ((128, 4), (64, 2))
# Loads of X a lane keeps in flight, by features per lane: registers grow with both.
IN_FLIGHT = {1: 8, 2: 8, 4: 4}
# Nonzeros a warp takes at most: a longer strip is split into segments whose partial sums
# gcoo_reduce adds in order. Short enough that a hub row spreads over many warps, long enough
# that a warp's staging and sums are paid over many nonzeros.
SEGMENT_NNZ = 256
WARPS = 4  # per block (kernels/gcoo.cu, WARPS)
_CONVERTIBLE = (torch.float16, torch.bfloat16, torch.float32)


def _kernel(strip: int, features: int, tf32: bool) -> str:
    return f"fg::gcoo::gcoo_spmm<{strip}, {features}, {IN_FLIGHT[features]}, {str(tf32).lower()}>"


SOURCE = register(
    "gcoo.cu",
    [_kernel(p, vw, tf32) for p in STRIPS for vw in FEATURES for tf32 in (False, True)]
    + ["fg::gcoo::gcoo_reduce"],
)


class Segments(NamedTuple):
    """The warps' work on a GCOO pattern: segment s is nonzeros [begin[s], begin[s] + seg_nnz)
    of strip group[s] (cut at the strip's end); part[s] is its workspace slot, -1 when it holds
    the whole strip. A strip without nonzeros still has a segment, which writes its zeros.
    Strip split_group[i] has split_count[i] slots from split_first[i] on."""

    group: torch.Tensor  # int32 [n_segments]
    begin: torch.Tensor  # int64 [n_segments]
    part: torch.Tensor  # int32 [n_segments]
    split_group: torch.Tensor  # int32 [n_split]
    split_first: torch.Tensor  # int32 [n_split]
    split_count: torch.Tensor  # int32 [n_split]
    n_parts: int
    seg_nnz: int

    @property
    def n_segments(self) -> int:
        return self.group.numel()


def build_segments(group_ptr: torch.Tensor, seg_nnz: int) -> Segments:
    """Segments of at most ``seg_nnz`` nonzeros of the strips of ``group_ptr`` (int64 [n_groups +
    1]), on its device: vectorised torch, two host reads (the segment and part counts)."""
    device = group_ptr.device
    counts = group_ptr[1:] - group_ptr[:-1]
    per = ((counts + seg_nnz - 1) // seg_nnz).clamp_min(1)
    split = per > 1
    parts = torch.where(split, per, torch.zeros_like(per))
    n_segments, n_parts = torch.stack([per.sum(), parts.sum()]).tolist()
    seg_group = torch.repeat_interleave(
        torch.arange(per.numel(), device=device), per, output_size=n_segments
    )
    k = torch.arange(n_segments, device=device) - (torch.cumsum(per, 0) - per)[seg_group]
    part_first = torch.cumsum(parts, 0) - parts
    seg_part = torch.where(split[seg_group], part_first[seg_group] + k, -1)
    split_group = split.nonzero().squeeze(1)
    return Segments(
        seg_group.to(torch.int32),
        group_ptr[:-1][seg_group] + k * seg_nnz,
        seg_part.to(torch.int32),
        split_group.to(torch.int32),
        part_first[split_group].to(torch.int32),
        per[split_group].to(torch.int32),
        n_parts,
        seg_nnz,
    )


_SEGMENTS = TensorCache()  # group_ptr -> {seg_nnz: Segments}


def segments_for(group_ptr: torch.Tensor, seg_nnz: int) -> Segments:
    """``build_segments``, cached while ``group_ptr`` lives unchanged."""
    table = _SEGMENTS.get(group_ptr)
    if table is None:
        table = _SEGMENTS.set(group_ptr, {})
    if seg_nnz not in table:
        table[seg_nnz] = built_for_reuse(lambda: build_segments(group_ptr, seg_nnz))
    return table[seg_nnz]


def features_per_lane(n: int, *tensors: torch.Tensor) -> int:
    """Features per lane at N = n (FEATURES_FROM_N), where N and the tensors' addresses allow
    loads of that width; else 1."""
    for least, features in FEATURES_FROM_N:
        if (
            n >= least
            and n % features == 0
            and all(t.data_ptr() % (4 * features) == 0 for t in tensors)
        ):
            return features
    return 1


def gcoo_spmm_cuda(
    group_ptr: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    n_rows: int,
    group: int,
    *,
    precision: str = "fp32",
    seg_nnz: int | None = None,
    features: int | None = None,
) -> torch.Tensor:
    """Y = A @ X on CUDA cores for A in GCOO (flashgnn.formats.GCOO's arrays), in fp32; with
    precision "tf32", x and the values rounded to tf32 as read.

    group_ptr int64 [n_groups + 1], rows and cols int32 [nnz], values [nnz] in GCOO order,
    x [n_cols, N]; values and x float32, or float16/bfloat16 (widened to float32 first; float64
    belongs to the reference). ``group`` is the strip height p. Returns float32 [n_rows, N].
    Deterministic: split strips are summed in a fixed order. ``seg_nnz`` (default
    SEGMENT_NNZ) and ``features`` (per lane, one of FEATURES) override the defaults.
    """
    if group not in STRIPS:
        raise ValueError(f"group must be one of {STRIPS}, got {group!r}")
    if group_ptr.dtype != torch.int64 or rows.dtype != torch.int32 or cols.dtype != torch.int32:
        raise ValueError(
            "group_ptr, rows and cols must be int64, int32 and int32, got "
            f"{group_ptr.dtype}, {rows.dtype} and {cols.dtype}"
        )
    for name, t in (("values", values), ("x", x)):
        if t.dtype not in _CONVERTIBLE:
            raise ValueError(
                f"{name} must be float32, float16 or bfloat16 (float64 takes the reference), "
                f"got {t.dtype}"
            )
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got shape {tuple(x.shape)}")
    if values.shape != cols.shape or rows.shape != cols.shape:
        raise ValueError(
            f"rows, cols and values must have one entry per nonzero, got shapes "
            f"{tuple(rows.shape)}, {tuple(cols.shape)} and {tuple(values.shape)}"
        )
    if group_ptr.numel() - 1 != (n_rows + group - 1) // group:
        raise ValueError(
            f"group_ptr has {group_ptr.numel() - 1} groups, {n_rows} rows in strips of {group} "
            f"need {(n_rows + group - 1) // group}"
        )
    if precision not in ("fp32", "tf32"):
        raise ValueError(f"gcoo_spmm_cuda: precision must be fp32 or tf32, got {precision!r}")
    tensors = (group_ptr, rows, cols, values, x)
    if any(t.device != x.device for t in tensors) or x.device.type != "cuda":
        raise ValueError("group_ptr, rows, cols, values and x must be on one CUDA device")
    n = x.shape[1]
    y = torch.empty(n_rows, n, dtype=torch.float32, device=x.device)
    if n == 0 or n_rows == 0:
        return y
    x = operand(x, torch.float32)
    values = operand(values, torch.float32)
    features = features or features_per_lane(n, x)
    if features not in FEATURES or n % features or x.data_ptr() % (4 * features):
        raise ValueError(
            f"features must be one of {FEATURES}, divide N = {n} and match x's alignment, "
            f"got {features}"
        )
    seg = segments_for(group_ptr, seg_nnz or SEGMENT_NNZ)
    workspace = (
        torch.empty(seg.n_parts * group * n, dtype=torch.float32, device=x.device)
        if seg.n_parts
        else y
    )
    n_tiles = -(-n // (32 * features))
    warps = seg.n_segments * n_tiles
    launch(
        SOURCE,
        _kernel(group, features, precision == "tf32"),
        x.device,
        (-(-warps // WARPS),),
        (32 * WARPS,),
        ptr(group_ptr),
        ptr(rows),
        ptr(cols),
        ptr(values),
        ptr(seg.group),
        ptr(seg.begin),
        ptr(seg.part),
        seg.n_segments,
        seg.seg_nnz,
        n_rows,
        n,
        n_tiles,
        ptr(x),
        ptr(y),
        ptr(workspace),
    )
    n_split = seg.split_group.numel()
    if n_split:
        launch(
            SOURCE,
            "fg::gcoo::gcoo_reduce",
            x.device,
            stride_blocks(n_split * group * n, 256),
            (256,),
            ptr(workspace),
            ptr(seg.split_group),
            ptr(seg.split_first),
            ptr(seg.split_count),
            n_split,
            group,
            n_rows,
            n,
            ptr(y),
        )
    return y
