"""Work segments: windows cut into runs of at most ``seg_vectors`` vectors, one warp each, so a
hub window does not serialise one warp. Built on the device from row_ptr, cached per row_ptr."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.weak import WeakIdKeyDictionary

# Vectors per segment: a power of two in [128, 256] (multiples of 16, the SDDMM's vectors per
# MMA), the smallest that keeps about TARGET_SEGMENTS segments (one resident warp each on an
# H100/H200). Small graphs are cut finer to fill the GPU; large ones keep long segments, since
# every split window costs partial sums in a workspace (measured on an H200: 128 is 15-30%
# faster than 256 on graphs of a few thousand windows, 40-60% slower on a 300k-window graph;
# 64 was no faster than 128 on a 3.5k-window graph).
MIN_SEG_VECTORS, MAX_SEG_VECTORS = 128, 256
TARGET_SEGMENTS = 132 * 32


def default_seg_vectors(n_vectors: int) -> int:
    seg = MIN_SEG_VECTORS
    while seg < MAX_SEG_VECTORS and seg * TARGET_SEGMENTS < n_vectors:
        seg *= 2
    return seg


@dataclass
class Segments:
    window: torch.Tensor       # int32 [n_segments]
    begin: torch.Tensor        # int32 [n_segments], first vector relative to the window
    first: torch.Tensor        # int64 [n_segments], first vector of the format (row_ptr[window] + begin)
    count: torch.Tensor        # int32 [n_segments], vectors in the segment
    part: torch.Tensor         # int32 [n_segments], workspace slot of a split window's segment, or -1
    split_window: torch.Tensor  # int32 [n_split], windows cut into several segments
    split_part: torch.Tensor   # int32 [n_split], workspace slot of their first segment
    split_count: torch.Tensor  # int32 [n_split], their number of segments
    seg_vectors: int
    n_parts: int               # workspace slots: segments of split windows

    @property
    def n_segments(self) -> int:
        return self.window.numel()


_CACHE: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _build(row_ptr: torch.Tensor, seg_vectors: int) -> Segments:
    device = row_ptr.device
    n_windows = row_ptr.numel() - 1
    vectors = row_ptr[1:] - row_ptr[:-1]
    count = torch.clamp((vectors + seg_vectors - 1) // seg_vectors, min=1)
    window = torch.repeat_interleave(torch.arange(n_windows, device=device), count)
    first = torch.cumsum(count, 0) - count
    begin = (torch.arange(window.numel(), device=device) - first[window]) * seg_vectors
    split = count[window] > 1
    part = torch.where(split, torch.cumsum(split, 0) - 1, torch.full_like(window, -1))
    split_window = torch.nonzero(count > 1).flatten()
    i32 = torch.int32
    split_count = count[split_window]
    first_vector = row_ptr[:-1][window] + begin
    length = torch.clamp(vectors[window] - begin, max=seg_vectors)
    return Segments(window.to(i32), begin.to(i32), first_vector, length.to(i32), part.to(i32), split_window.to(i32),
                    part[first[split_window]].to(i32), split_count.to(i32), seg_vectors,
                    int(split_count.sum()))


def segments_for(row_ptr: torch.Tensor, seg_vectors: int | None = None) -> Segments:
    """Segments of the windows of ``row_ptr`` (cached while that tensor lives); by default
    ``default_seg_vectors`` of its vector count. Only a cache miss synchronises."""
    key = (row_ptr._version, seg_vectors)
    hit = _CACHE.get(row_ptr)
    if hit is not None and hit[0] == key:
        return hit[1]
    seg = _build(row_ptr, seg_vectors or default_seg_vectors(int(row_ptr[-1])))
    _CACHE[row_ptr] = (key, seg)
    return seg
