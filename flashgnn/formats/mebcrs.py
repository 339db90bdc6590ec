"""ME-BCRS, the sparse format of FlashSparse, and its CPU reference builder.

Rows are cut into windows of 8 consecutive rows. A *vector* is one column of one window
that holds at least one nonzero (an 8x1 slice); a window's vectors are sorted by column.
``k`` consecutive vectors of a window form one tensor-core block (k = 8 for fp16/bf16,
k = 4 for tf32). Values are stored block after block: a full block as 8 x k values,
row-major; the window's last block, holding r = n_vec mod k vectors, as 8 x r, row-major,
with no padding. So vector ``v`` of window ``w`` owns 8 value slots and the whole value
array has exactly ``8 * n_vectors`` entries. docs/FORMAT.md specifies every array.

This module is the executable specification of the format: the GPU builder and every
kernel are tested against it. It imports no kernels: ``from_csr`` builds on a device with
the builder registered for the device's type (``flashgnn.formats.device_builders``): the reference
builder below for the CPU, the GPU builder for CUDA, which ``flashgnn.ops`` registers.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, replace

import torch

from ..pattern_nnz import remember_nnz
from ..tensor_cache import built_for_reuse
from .blocked16 import Blocked16
from .device_builders import builder_for, register_builder
from .windowed import SlotCoords, WindowedFormat, check_dim, csr_inputs

WINDOW = 8
BLOCK_WIDTHS = (8, 4)


def vector_windows(row_ptr: torch.Tensor, n_vectors: int | None = None) -> torch.Tensor:
    """Window of each vector, int64 [n_vectors] (given: no host synchronisation)."""
    n_windows = row_ptr.numel() - 1
    counts = row_ptr[1:] - row_ptr[:-1]
    return torch.repeat_interleave(
        torch.arange(n_windows, device=row_ptr.device), counts, output_size=n_vectors
    )


def vector_slots(row_ptr: torch.Tensor, k: int, win: torch.Tensor | None = None) -> torch.Tensor:
    """Value slots of every vector: int64 [n_vectors, 8], entry [v, r] is the slot of
    row r of vector v's window in column col_idx[v]; ``win``: ``vector_windows(row_ptr)``
    when the caller has it."""
    win = vector_windows(row_ptr) if win is None else win
    v = torch.arange(win.numel(), device=row_ptr.device)
    start = row_ptr[win]
    j = v - start
    block_start = start + (j // k) * k
    width = torch.clamp(row_ptr[win + 1] - block_start, max=k)
    r = torch.arange(WINDOW, device=row_ptr.device)
    return (
        WINDOW * block_start[:, None]
        + r[None, :] * width[:, None]
        + (j - (block_start - start))[:, None]
    )


def decode_slots(row_ptr, col_idx, vec_mask, k: int) -> SlotCoords:
    """Slot, row and column of every real nonzero, read from the format alone."""
    n_vectors = col_idx.numel()
    r = torch.arange(WINDOW, device=row_ptr.device)
    present = ((vec_mask.to(torch.int64)[:, None] >> r[None, :]) & 1).bool()
    real = (
        present.flatten().nonzero().flatten()
    )  # 8 * vector + row of each real slot (one host synchronisation)
    win = vector_windows(row_ptr, n_vectors)
    slot = vector_slots(row_ptr, k, win).flatten()[real]
    order = torch.argsort(slot)
    vector, row = real[order] // WINDOW, real[order] % WINDOW
    return SlotCoords(slot[order], WINDOW * win[vector] + row, col_idx.to(torch.int64)[vector])


@dataclass
class MEBCRS(WindowedFormat):
    """A sparse n_rows x n_cols matrix in ME-BCRS.

    row_ptr:  int64 [n_windows + 1], offset of each window's first vector.
    col_idx:  int32 [n_vectors], column of each vector.
    values:   float [8 * n_vectors], blocks of 8 x k (last block of a window 8 x r), row-major;
              slots outside the sparsity pattern hold exactly 0.
    perm:     int64 [nnz], value slot of each nonzero in the CSR order it was built from.
    vec_mask: uint8 [n_vectors], bit r set when row r of the vector's window is a real nonzero.
    """

    k: int
    _transpose: Transpose | None = field(default=None, repr=False, compare=False)
    # (indptr, indices) of the CSR that perm's order refers to, when the builder's caller keeps
    # it anyway (a Graph): A^T is then built from it instead of decoding the format
    _csr: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False, compare=False)
    # the format whose pattern this one shares (``with_values``): its A^T's pattern serves
    _pattern_of: MEBCRS | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        remember_nnz(self.vec_mask, self.nnz)  # for launch rules given only the arrays

    @property
    def n_vectors(self) -> int:
        return self.col_idx.numel()

    @property
    def n_slots(self) -> int:
        """Entries of the value layout: 8 per vector."""
        return WINDOW * self.n_vectors

    @property
    def vector(self) -> int:
        """Rows of a nonzero vector: 8 (the 16x1 baseline format says 16)."""
        return WINDOW

    # ------------------------------------------------------------------ building
    @classmethod
    def from_csr(
        cls,
        indptr,
        indices,
        values=None,
        n_cols: int | None = None,
        k: int = 8,
        device=None,
        vector: int = 8,
    ):
        """Build from a canonical CSR matrix (sorted, duplicate-free columns in each row).

        indptr: int32/int64 [n_rows + 1]; indices: int32/int64 [nnz]; values: [nnz] or None
        (all ones, float32). n_cols defaults to max(indices) + 1. ``device`` chooses where
        the result lives (``"cuda"`` builds it there); the default is the device of ``indices``.
        ``vector=16`` returns the 16x1 baseline format instead (``flashgnn.formats.Blocked16``,
        blocks of 16 x 8; ``k`` must stay 8).
        """
        if vector == 16:
            if k != 8:
                raise ValueError(
                    f"the 16x1 format has blocks of 16 x 8 (one width for every precision); got "
                    f"k = {k}"
                )
            return Blocked16.from_csr(indptr, indices, values, n_cols=n_cols, device=device)
        if vector != WINDOW:
            raise ValueError(f"vector must be 8 (ME-BCRS) or 16 (the 16x1 baseline), got {vector}")
        return build_canonical(*csr_inputs(indptr, indices, values, n_cols, device), k)

    # ------------------------------------------------------------------ reading
    def slot_coords(self) -> SlotCoords:
        return decode_slots(self.row_ptr, self.col_idx, self.vec_mask, self.k)

    def with_values(self, values: torch.Tensor) -> MEBCRS:
        """Same pattern, new values in the value layout ([8 * n_vectors]). Its A^T shares this
        one's pattern and holds the new values."""
        if values.shape != (WINDOW * self.n_vectors,):
            raise ValueError(
                f"values must have shape ({WINDOW * self.n_vectors},), got {tuple(values.shape)}"
            )
        source = self if self._pattern_of is None else self._pattern_of
        return replace(self, values=values, _transpose=None, _pattern_of=source)

    def values_from_csr(self, csr_values: torch.Tensor) -> torch.Tensor:
        """Place values given in CSR nonzero order ([nnz]) into the value layout."""
        if csr_values.shape[:1] != (self.nnz,):
            raise ValueError(
                f"expected {self.nnz} values in CSR order, got shape {tuple(csr_values.shape)}"
            )
        out = csr_values.new_zeros((WINDOW * self.n_vectors,) + tuple(csr_values.shape[1:]))
        return out.index_copy(0, self.perm, csr_values)

    # ------------------------------------------------------------------ transpose
    def transpose(self) -> Transpose:
        """A^T in ME-BCRS with the same k, holding A's values, built once and cached, with the
        map of each of its value slots back to A's slots. A format made by ``with_values``
        takes the pattern of its source's A^T and moves its own values into it."""
        if self._transpose is None:
            self._transpose = built_for_reuse(
                lambda: (
                    _build_transpose(self)
                    if self._pattern_of is None
                    else self._pattern_of.transpose().with_values_of(self)
                )
            )
        return self._transpose

    # ------------------------------------------------------------------ checking
    def validate(self) -> None:
        """Check every invariant of the format; raise ValueError naming the first that fails."""

        def fail(msg):
            raise ValueError(f"invalid ME-BCRS: {msg}")

        n_win = (self.n_rows + WINDOW - 1) // WINDOW
        if self.k not in BLOCK_WIDTHS:
            fail(f"k = {self.k} is not 8 or 4")
        if self.row_ptr.dtype != torch.int64 or self.row_ptr.shape != (n_win + 1,):
            fail(
                f"row_ptr must be int64 [{n_win + 1}], got {self.row_ptr.dtype} "
                f"{tuple(self.row_ptr.shape)}"
            )
        if self.col_idx.dtype != torch.int32 or self.col_idx.dim() != 1:
            fail(f"col_idx must be int32 1-D, got {self.col_idx.dtype} {tuple(self.col_idx.shape)}")
        n_vec = self.n_vectors
        if int(self.row_ptr[0]) != 0 or int(self.row_ptr[-1]) != n_vec:
            fail("row_ptr must start at 0 and end at n_vectors")
        if bool((self.row_ptr[1:] < self.row_ptr[:-1]).any()):
            fail("row_ptr is not non-decreasing")
        if self.values.shape != (WINDOW * n_vec,):
            fail(f"values must have {WINDOW * n_vec} entries, got {tuple(self.values.shape)}")
        if self.perm.dtype != torch.int64 or self.perm.dim() != 1:
            fail(f"perm must be int64 1-D, got {self.perm.dtype} {tuple(self.perm.shape)}")
        if self.vec_mask.dtype != torch.uint8 or self.vec_mask.shape != (n_vec,):
            fail("vec_mask must be uint8 [n_vectors]")
        if n_vec:
            cols = self.col_idx.to(torch.int64)
            if int(cols.min()) < 0 or int(cols.max()) >= self.n_cols:
                fail("col_idx out of range")
            win = vector_windows(self.row_ptr, self.n_vectors)
            same = win[1:] == win[:-1]
            if bool((same & (cols[1:] <= cols[:-1])).any()):
                fail("vectors of a window are not strictly increasing by column")
            if bool((self.vec_mask == 0).any()):
                fail("a vector holds no nonzero")
            last_rows = self.n_rows - WINDOW * win
            bits = torch.arange(WINDOW, device=self.device)
            beyond = ((self.vec_mask.to(torch.int64)[:, None] >> bits) & 1).bool() & (
                bits[None, :] >= last_rows[:, None]
            )
            if bool(beyond.any()):
                fail("vec_mask marks a row past n_rows")
        coords = self.slot_coords()
        if coords.slot.numel() != self.nnz:
            fail(f"vec_mask marks {coords.slot.numel()} nonzeros but perm has {self.nnz}")
        real = torch.zeros(WINDOW * n_vec, dtype=torch.bool, device=self.device)
        real[coords.slot] = True
        if bool((self.values[~real] != 0).any()):
            fail("a slot outside the sparsity pattern holds a nonzero value")
        key = coords.row * max(self.n_cols, 1) + coords.col
        csr_slot = coords.slot[torch.argsort(key)]
        if not torch.equal(csr_slot, self.perm):
            fail("perm does not map CSR order to the value slots of the pattern")


@dataclass
class Transpose:
    """A^T of an ME-BCRS matrix A: ``fmt`` is A^T, and ``src_slot`` [nnz] gives, for each
    real slot ``fmt.perm[i]`` of A^T, the slot of A holding the same nonzero; i runs over
    A^T's nonzeros in CSR order, whose row pointers are ``indptr`` [n_cols(A) + 1]."""

    fmt: MEBCRS
    src_slot: torch.Tensor
    indptr: torch.Tensor

    def with_values_of(self, a: MEBCRS) -> Transpose:
        """The A^T of ``a``, a matrix of A's pattern: this one holding ``a``'s values."""
        return Transpose(
            self.fmt.with_values(self.values_from(a.values)), self.src_slot, self.indptr
        )

    def values_from(self, a_values: torch.Tensor) -> torch.Tensor:
        """A^T's value layout filled from A's values ([8 * n_vectors(A)])."""
        out = a_values.new_zeros(WINDOW * self.fmt.n_vectors)
        return out.index_copy(0, self.fmt.perm, a_values[self.src_slot])


def build_pattern(indptr, indices, n_cols: int, k: int):
    """(row_ptr, col_idx, perm, vec_mask) of a canonical CSR pattern: the reference builder,
    vectorised over nonzeros (one sort by (window, column), no loop over rows)."""
    device = indices.device
    n_rows = indptr.numel() - 1
    n_win = (n_rows + WINDOW - 1) // WINDOW
    nnz = indices.numel()
    row = torch.repeat_interleave(torch.arange(n_rows, device=device), indptr[1:] - indptr[:-1])
    win = row >> 3
    key_sorted, order = torch.sort(win * n_cols + indices, stable=True)
    is_new = torch.ones(nnz, dtype=torch.bool, device=device)
    if nnz:
        is_new[1:] = key_sorted[1:] != key_sorted[:-1]
    vec = torch.cumsum(is_new, 0) - 1
    vec_key = key_sorted[is_new]
    vec_win = vec_key // max(n_cols, 1)
    col_idx = (vec_key - vec_win * n_cols).to(torch.int32)
    row_ptr = torch.zeros(n_win + 1, dtype=torch.int64, device=device)
    row_ptr[1:] = torch.cumsum(torch.bincount(vec_win, minlength=n_win), 0)

    r = row[order] & (WINDOW - 1)
    start = row_ptr[vec_win[vec]]
    block_start = start + ((vec - start) // k) * k
    width = torch.clamp(row_ptr[vec_win[vec] + 1] - block_start, max=k)
    perm = torch.empty(nnz, dtype=torch.int64, device=device)
    perm[order] = WINDOW * block_start + r * width + (vec - block_start)

    vec_mask = torch.zeros(col_idx.numel(), dtype=torch.int64, device=device)
    vec_mask.index_add_(0, vec, torch.ones_like(r) << r)
    return row_ptr, col_idx, perm, vec_mask.to(torch.uint8)


def build_canonical(indptr, indices, values, n_cols: int, device: torch.device, k: int) -> MEBCRS:
    """ME-BCRS of a CSR known to be canonical (int64 indptr and indices, float values [nnz]),
    built on ``device`` by the builder registered for its type, without the checks of
    ``MEBCRS.from_csr``: for callers whose CSR is canonical by construction (a Graph's, A^T's)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k not in BLOCK_WIDTHS:
        raise ValueError(f"k must be 8 (fp16/bf16) or 4 (tf32), got {k!r}")
    n_rows = check_dim(indptr.numel() - 1, "n_rows")
    n_cols = check_dim(n_cols, "n_cols")
    k = int(k)
    arrays = builder_for(device).build_mebcrs(indptr, indices, values, n_cols, k, device)
    return MEBCRS(*arrays, n_rows, n_cols, k)


def build_reference(indptr, indices, values, n_cols: int, k: int, device: torch.device):
    """(row_ptr, col_idx, values, perm, vec_mask) of a canonical CSR, built by ``build_pattern``
    on ``device``: the builder registered for the CPU."""
    indptr, indices, values = indptr.to(device), indices.to(device), values.to(device)
    row_ptr, col_idx, perm, vec_mask = build_pattern(indptr, indices, n_cols, k)
    out_values = values.new_zeros(WINDOW * col_idx.numel()).index_copy_(0, perm, values)
    return row_ptr, col_idx, out_values, perm, vec_mask


def _build_transpose(a: MEBCRS) -> Transpose:
    if a._csr is not None:
        indptr, cols = a._csr
        rows = torch.repeat_interleave(
            torch.arange(a.n_rows, device=a.device), indptr[1:] - indptr[:-1], output_size=a.nnz
        )
        slots = a.perm
    else:
        c = a.slot_coords()
        rows, cols, slots = c.row, c.col, c.slot
    key = cols * max(a.n_rows, 1) + rows  # A^T in CSR order = A's nonzeros sorted by (col, row)
    order = torch.argsort(key)
    t_rows, t_cols = cols[order], rows[order]
    # rows are sorted: each row's start is a binary search (no host synchronisation, as bincount
    # has)
    indptr = torch.searchsorted(t_rows, torch.arange(a.n_cols + 1, device=a.device))
    src_slot = slots[order]
    return Transpose(
        build_canonical(indptr, t_cols, a.values[src_slot], a.n_rows, a.device, a.k),
        src_slot,
        indptr,
    )


register_builder("cpu", build_reference)
