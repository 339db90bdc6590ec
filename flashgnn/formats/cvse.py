"""CVSE, the column-vector sparse encoding of Chen et al. (SC'21): rows are cut into strips of V
consecutive rows (V in {2, 4, 8}); within a strip, every column holding a nonzero becomes one
V x 1 column vector, and a strip's vectors are stored in ascending column order, CSR-like. The
V values of a vector are contiguous, so one vector feeds one tensor-core operand fragment. At
V = 8 the strips are ME-BCRS's windows without the k-blocking.

Arrays (``n_strips = ceil(n_rows / V)``, ``n_vectors = row_ptr[-1]``):
  row_ptr   int32 [n_strips + 1], offset of each strip's first vector.
  col_idx   int32 [n_vectors], column of each vector, ascending within a strip.
  values    float [V * n_vectors], vector after vector: values[V * v + r] is row r of the strip
            in vector v's column (0 where that entry is not a nonzero).
  perm      int64 [nnz], value slot of each nonzero in the CSR order it was built from.
  vec_mask  uint8 [n_vectors], bit r set when row r of the strip is a nonzero in that vector.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import torch

from .windowed import MAX_DIM, SlotCoords, WindowedFormat, csr_on_device

VECTORS = (2, 4, 8)  # the vector lengths the encoding defines


@dataclass
class CVSE(WindowedFormat):
    """A sparse n_rows x n_cols matrix in the column-vector sparse encoding (module
    docstring); ``vector`` is V, the rows of a strip and of every column vector."""

    vector: int = 8
    _coords: SlotCoords | None = field(default=None, repr=False, compare=False)

    @property
    def n_strips(self) -> int:
        return self.row_ptr.numel() - 1

    @property
    def n_vectors(self) -> int:
        return self.col_idx.numel()

    @property
    def n_slots(self) -> int:
        """Entries of the value layout: V per vector."""
        return self.vector * self.n_vectors

    @classmethod
    def from_csr(
        cls,
        indptr,
        indices,
        values=None,
        n_cols: int | None = None,
        *,
        vector: int = 8,
        device=None,
    ) -> CVSE:
        """Build from a canonical CSR matrix (sorted, duplicate-free columns in each row).

        indptr: int32/int64 [n_rows + 1]; indices: int32/int64 [nnz]; values: [nnz] or None (all
        ones, float32); n_cols defaults to max(indices) + 1; ``vector`` is V (2, 4 or 8);
        ``device`` chooses where the result lives (default: the device of ``indices``). One
        vectorised pass of torch, the same on the CPU and the GPU. ValueError naming the first
        problem of the input.
        """
        if (
            isinstance(vector, bool)
            or not isinstance(vector, numbers.Integral)
            or vector not in VECTORS
        ):
            raise ValueError(f"vector must be one of {VECTORS}, got {vector!r}")
        vector = int(vector)
        indptr_t, indices_t, values_t, n_cols, device = csr_on_device(
            indptr, indices, values, n_cols, device
        )
        row_ptr, col_idx, perm, vec_mask = build_cvse_pattern(indptr_t, indices_t, n_cols, vector)
        out = values_t.new_zeros(vector * col_idx.numel()).index_copy_(0, perm, values_t)
        return cls(
            row_ptr, col_idx, out, perm, vec_mask, indptr_t.numel() - 1, n_cols, vector=vector
        )

    def slot_coords(self) -> SlotCoords:
        """Slot, row and column of every real nonzero, ordered by slot, read from the arrays
        alone (cached)."""
        if self._coords is None:
            self._coords = decode_cvse_slots(self.row_ptr, self.col_idx, self.vec_mask, self.vector)
        return self._coords


def build_cvse_pattern(indptr: torch.Tensor, indices: torch.Tensor, n_cols: int, vector: int):
    """(row_ptr, col_idx, perm, vec_mask) of a canonical CSR pattern (indptr, indices int64 on
    one device) in strips of ``vector`` rows: one sort by (strip, column), no loop."""
    device = indices.device
    n_rows = indptr.numel() - 1
    n_strips = (n_rows + vector - 1) // vector
    nnz = indices.numel()
    row = torch.repeat_interleave(
        torch.arange(n_rows, device=device), indptr[1:] - indptr[:-1], output_size=nnz
    )
    key_sorted, order = torch.sort((row // vector) * n_cols + indices, stable=True)
    is_new = torch.ones(nnz, dtype=torch.bool, device=device)
    if nnz:
        is_new[1:] = key_sorted[1:] != key_sorted[:-1]
    vec = torch.cumsum(is_new, 0) - 1  # the vector of each sorted nonzero
    vec_key = key_sorted[is_new]
    vec_strip = vec_key // max(n_cols, 1)
    if vec_key.numel() > MAX_DIM:
        raise ValueError(f"the matrix has {vec_key.numel()} vectors; CVSE indexes them with int32")
    row_ptr = torch.zeros(n_strips + 1, dtype=torch.int64, device=device)
    row_ptr[1:] = torch.cumsum(torch.bincount(vec_strip, minlength=n_strips), 0)
    r = row[order] % vector
    perm = torch.empty(nnz, dtype=torch.int64, device=device)
    perm[order] = vector * vec + r
    mask = torch.zeros(vec_key.numel(), dtype=torch.int32, device=device)
    mask.index_add_(0, vec, (torch.ones_like(r) << r).to(torch.int32))
    col_idx = (vec_key - vec_strip * n_cols).to(torch.int32)
    return row_ptr.to(torch.int32), col_idx, perm, mask.to(torch.uint8)


def decode_cvse_slots(
    row_ptr: torch.Tensor, col_idx: torch.Tensor, vec_mask: torch.Tensor, vector: int
) -> SlotCoords:
    """Slot, row and column of every real nonzero of a CVSE pattern, ordered by slot."""
    device = row_ptr.device
    n_vectors = col_idx.numel()
    counts = (row_ptr[1:] - row_ptr[:-1]).to(torch.int64)
    vec_strip = torch.repeat_interleave(
        torch.arange(row_ptr.numel() - 1, device=device), counts, output_size=n_vectors
    )
    r = torch.arange(vector, device=device)
    bits = (vec_mask.to(torch.int64)[:, None] >> r[None, :]) & 1  # [vector, row]
    v, rr = bits.nonzero(as_tuple=True)  # row-major: slots ascend
    return SlotCoords(vector * v + rr, vector * vec_strip[v] + rr, col_idx[v].to(torch.int64))
