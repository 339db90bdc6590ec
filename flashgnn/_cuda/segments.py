"""Work segments: windows cut into runs of at most ``seg_vectors`` vectors, one warp each, so a
hub window does not serialise one warp. Built on the device from row_ptr, cached per row_ptr.

Segments are ordered longest first (stable: window order among equal lengths). Blocks start
in index order as earlier ones finish, so the short last segments of long windows fill the
gaps left at the end instead of forming a tail of their own (longest-processing-time-first
scheduling), and the segments that share a block are of about equal length.

On large graphs of long rows (Reddit-like: each window's vectors span several segments) they
are ordered by the column of their first vector instead, when the launcher passes the pattern's
columns: the blocks that run together then gather rows of X from one band of columns, which
stays in L2, where in window order every block reads from the whole of X. On graphs whose X
fits in L2 the longest-first balance is worth more, and on windows of a few hundred vectors
neither order gains: hence the thresholds below (docs/TUNING.md has the measurements,
benchmarks/segment_order.py repeats them).

Nothing depends on the order: a split window's partial sums sit in its own workspace slots
(``part``), summed in slot order, so every order gives the same bits."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..tensor_cache import TensorCache, built_for_reuse
from .runtime import launch, ptr, stride_blocks
from .sources import register

SOURCE = register("segments.cu", ["fg::segment_sizes", "fg::segment_fill", "fg::segment_totals"])
_THREADS = 256
TOTALS_SIZES = (32, 64, 128, 256)  # kernels/segments.cu: segment_totals

# Vectors per segment by default (edge softmax, fp32 SpMM): a power of two in [shortest, 256]
# (multiples of 16, the SDDMM's vectors per MMA), the smallest that keeps about TARGET_SEGMENTS
# segments (32 resident warps on each of 132 SMs, a Hopper SXM). Small graphs are cut finer to
# fill the GPU; large ones keep long segments, since every split window costs partial sums in a
# workspace. The tensor-core SpMM (spmm.work_split) and the SDDMM (sddmm.seg_vectors) pick
# their own.
MIN_SEG_VECTORS, MAX_SEG_VECTORS = 128, 256
TARGET_SEGMENTS = 132 * 32


# Column order (see the module doc) from this many vectors, on average this many per window.
COLUMN_ORDER_MIN_VECTORS = 1 << 20
COLUMN_ORDER_WINDOW_VECTORS = 512


def column_ordered(n_vectors: int, n_windows: int) -> bool:
    """Whether segments of a pattern of this size are ordered by column."""
    return (
        n_vectors >= COLUMN_ORDER_MIN_VECTORS
        and n_vectors >= COLUMN_ORDER_WINDOW_VECTORS * n_windows
    )


def default_seg_vectors(n_vectors: int, shortest: int = MIN_SEG_VECTORS) -> int:
    seg = shortest
    while seg < MAX_SEG_VECTORS and seg * TARGET_SEGMENTS < n_vectors:
        seg *= 2
    return seg


@dataclass
class Segments:
    window: torch.Tensor  # int32 [n_segments]
    begin: torch.Tensor  # int32 [n_segments], first vector relative to the window
    first: torch.Tensor  # int64 [n_segments], first vector of the format (row_ptr[window] + begin)
    count: torch.Tensor  # int32 [n_segments], vectors in the segment
    part: torch.Tensor  # int32 [n_segments], workspace slot of a split window's segment, or -1
    split: (
        torch.Tensor
    )  # int32 [n_segments], index of a split window's segment among split windows, or -1
    split_window: torch.Tensor  # int32 [n_split], windows cut into several segments
    split_part: torch.Tensor  # int32 [n_split], workspace slot of their first segment
    split_count: torch.Tensor  # int32 [n_split], their number of segments
    seg_vectors: int
    n_parts: int  # workspace slots: segments of split windows
    most_parts: int  # segments of the longest window
    # a kernel reading these tables has been launched since they were built: later launches
    # may read them, and their pattern's columns and masks, before waiting for the kernel ahead
    # of them (the preamble of kernels/common.cuh's programmatic dependent launch)
    launched: bool = False
    _pointers: dict = field(default_factory=dict, repr=False)
    _longer: dict = field(default_factory=dict, repr=False)
    _counters: dict = field(default_factory=dict, repr=False)

    @property
    def n_segments(self) -> int:
        return self.window.numel()

    @property
    def n_split(self) -> int:
        return self.split_window.numel()

    def pointers(self, *names: str) -> tuple:
        """Device addresses of the named arrays as kernel arguments, cached: the
        launchers pass them on every call."""
        hit = self._pointers.get(names)
        if hit is None:
            hit = self._pointers[names] = tuple(getattr(self, n).data_ptr() for n in names)
        return hit

    def split_longer_than(self, parts: int) -> tuple:
        """(split_window, split_part, split_count) of the split windows of more than ``parts``
        segments, cached per ``parts`` (a miss synchronises, unless it keeps all or none)."""
        hit = self._longer.get(parts)
        if hit is None and (parts == 0 or parts >= self.most_parts):
            keep = slice(None) if parts == 0 else slice(0)
            hit = self._longer[parts] = (
                self.split_window[keep],
                self.split_part[keep],
                self.split_count[keep],
            )
        elif hit is None:
            keep = torch.nonzero(self.split_count > parts).flatten()
            hit = self._longer[parts] = (
                self.split_window[keep],
                self.split_part[keep],
                self.split_count[keep],
            )
        return hit

    def of_windows(self, keep: torch.Tensor) -> Segments:
        """The segments of the windows where ``keep`` (bool [n_windows], on this device) holds,
        in their order here; the split windows among them are renumbered (``split``, the split
        tables), their workspace slots (``part``) kept, so ``n_parts`` stays as it is (0 when
        none is kept) and a workspace sized by it still fits. Synchronises (the sizes are
        read): built once per pattern, like the segments themselves."""
        kept = torch.nonzero(keep[self.window.long()]).flatten()
        split_kept = keep[self.split_window.long()]
        renumber = torch.cumsum(split_kept, 0, dtype=torch.int32) - 1
        split = self.split[kept]
        if self.n_split:
            split = torch.where(split >= 0, renumber[split.clamp(min=0).long()], split)
        splits = torch.nonzero(split_kept).flatten()
        split_count = self.split_count[splits]
        most_parts = int(split_count.max()) if splits.numel() else min(kept.numel(), 1)
        return Segments(
            self.window[kept],
            self.begin[kept],
            self.first[kept],
            self.count[kept],
            self.part[kept],
            split,
            self.split_window[splits],
            self.split_part[splits],
            split_count,
            self.seg_vectors,
            self.n_parts if splits.numel() else 0,  # no slot is used when no split window is kept
            most_parts,
        )

    def counters(self, chunks: int, stream: int) -> torch.Tensor:
        """int32 zeros [n_split, chunks]: per split window and feature chunk, the segments a
        kernel has finished. Kernels leave them at zero, so one tensor per (chunks, stream)
        serves every launch; launches on one stream never overlap."""
        key = (chunks, stream)
        hit = self._counters.get(key)
        if hit is None:
            hit = self._counters[key] = torch.zeros(
                max(self.n_split * chunks, 1), dtype=torch.int32, device=self.window.device
            )
        return hit


_CACHE = TensorCache()  # row_ptr -> {(seg_vectors, by column): Segments}
_TOTALS = TensorCache()  # row_ptr -> {seg_vectors: (n_segments, n_split, n_parts, most_parts)}


def segment_totals_cuda(row_ptr: torch.Tensor) -> torch.Tensor:
    """int64 [16] on row_ptr's device, not read here: for seg_vectors 32, 64, 128, 256 in turn,
    (segments, split windows, their segments, the longest window's segments). The format
    builder reads them with its own sizes and passes them to ``remember_totals``."""
    totals = torch.zeros(4 * len(TOTALS_SIZES), dtype=torch.int64, device=row_ptr.device)
    n_windows = row_ptr.numel() - 1
    if n_windows:
        launch(
            SOURCE,
            "fg::segment_totals",
            row_ptr.device,
            stride_blocks(n_windows, _THREADS),
            (_THREADS,),
            ptr(row_ptr),
            n_windows,
            ptr(totals),
        )
    return totals


def remember_totals(row_ptr: torch.Tensor, totals: list[int]) -> None:
    """Keep ``segment_totals_cuda``'s values, read, for the segments of ``row_ptr`` built later."""
    _TOTALS.set(
        row_ptr, {seg: tuple(totals[4 * i : 4 * i + 4]) for i, seg in enumerate(TOTALS_SIZES)}
    )


def _build(
    row_ptr: torch.Tensor, seg_vectors: int, col_idx: torch.Tensor | None = None
) -> Segments:
    """Segments longest first, or by the column of their first vector when ``col_idx`` is given
    (kernels/segments.cu). A few launches and one host synchronisation, none when the format
    builder read the totals: a mini-batch builds segments for new blocks every step."""
    device = row_ptr.device
    n_windows = row_ptr.numel() - 1
    sizes = (torch.empty if n_windows else torch.zeros)(
        3, max(n_windows, 1), dtype=torch.int64, device=device
    )
    if n_windows:
        launch(
            SOURCE,
            "fg::segment_sizes",
            device,
            stride_blocks(n_windows, _THREADS),
            (_THREADS,),
            ptr(row_ptr),
            n_windows,
            seg_vectors,
            ptr(sizes),
        )
    known = (_TOTALS.get(row_ptr) or {}).get(seg_vectors)
    if known is None:
        most_parts = sizes[0].max()
        sizes.cumsum_(1)
        known = torch.cat([sizes[:, -1], most_parts[None]]).tolist()
    else:
        sizes.cumsum_(1)
    n_segments, n_split, n_parts, most_parts = known
    table = torch.empty(6, n_segments, dtype=torch.int32, device=device)
    first = torch.empty(n_segments, dtype=torch.int64, device=device)
    split_table = torch.empty(3, n_split, dtype=torch.int32, device=device)
    if n_segments:
        launch(
            SOURCE,
            "fg::segment_fill",
            device,
            stride_blocks(n_segments, _THREADS),
            (_THREADS,),
            ptr(row_ptr),
            ptr(sizes),
            n_windows,
            n_segments,
            n_split,
            seg_vectors,
            0 if col_idx is None else ptr(col_idx),
            0 if col_idx is None else col_idx.numel(),
            ptr(table),
            ptr(first),
            ptr(split_table),
        )
    order = torch.argsort(table[5], stable=True)
    window, begin, count, part, split = table[:5, order]
    split_window, split_part, split_count = split_table
    return Segments(
        window,
        begin,
        first[order],
        count,
        part,
        split,
        split_window,
        split_part,
        split_count,
        seg_vectors,
        n_parts,
        most_parts,
    )


def segments_for(
    row_ptr: torch.Tensor, seg_vectors: int | None = None, col_idx: torch.Tensor | None = None
) -> Segments:
    """Segments of the windows of ``row_ptr`` (cached while that tensor lives) of ``seg_vectors``
    vectors, by default ``default_seg_vectors(n_vectors)``; ordered by column when ``col_idx``
    (the pattern's) is given and ``column_ordered`` says so. Only a cache miss synchronises, and
    not when the GPU format builder read the totals (``remember_totals``)."""
    by_column = col_idx is not None and column_ordered(col_idx.numel(), row_ptr.numel() - 1)
    built = _CACHE.get(row_ptr)
    if built is None:
        built = _CACHE.set(row_ptr, {})
    seg = built.get((seg_vectors, by_column))
    if seg is None:
        seg = built[seg_vectors, by_column] = built_for_reuse(
            lambda: _build(
                row_ptr,
                seg_vectors
                or default_seg_vectors(int(row_ptr[-1]) if col_idx is None else col_idx.numel()),
                col_idx if by_column else None,
            )
        )
    return seg
