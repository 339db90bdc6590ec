"""What a sparse layout stores: value slots against nonzeros (the zero fill) and bytes, for
HB-ELL (``HBELL.storage``), ME-BCRS and cuSPARSE's Blocked-ELL, which torch does not build, so
its size follows from its definition."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .windowed import WindowedFormat, csr_inputs


@dataclass(frozen=True)
class Storage:
    """layout: its name; nnz: real nonzeros; slots: stored values, zero fill included; bytes:
    every array an SpMM on the layout reads."""

    layout: str
    nnz: int
    slots: int
    bytes: int

    @property
    def zero_fill(self) -> float:
        """Fraction of the stored values that hold no nonzero (0 for an empty matrix)."""
        return (self.slots - self.nnz) / self.slots if self.slots else 0.0


def mebcrs_storage(fmt: WindowedFormat, value_bytes: int | None = None) -> Storage:
    """ME-BCRS's report (8 slots per vector): row_ptr, col_idx, vec_mask and the values, at
    ``value_bytes`` each (default: their element size); perm maps back to CSR only and is not
    counted."""
    vb = fmt.values.element_size() if value_bytes is None else value_bytes
    index_bytes = sum(
        t.numel() * t.element_size() for t in (fmt.row_ptr, fmt.col_idx, fmt.vec_mask)
    )
    return Storage("ME-BCRS", fmt.nnz, fmt.n_slots, index_bytes + vb * fmt.n_slots)


def blocked_ell_storage(
    indptr, indices, n_cols: int | None = None, *, block: int = 16, value_bytes: int = 2
) -> Storage:
    """cuSPARSE's Blocked-ELL (cusparseCreateBlockedEll) of a canonical CSR matrix: square
    blocks of ``block`` rows and columns, every block row padded to the largest count of
    nonempty blocks in a block row, ``ell_cols = block * that count``; it stores
    ellColInd (int32, one per block slot) and ellValue (n_brows * block x ell_cols values at
    ``value_bytes`` each)."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    indptr_t, indices_t, _, n_cols, _ = csr_inputs(indptr, indices, None, n_cols, None)
    n_rows = indptr_t.numel() - 1
    n_brows = (n_rows + block - 1) // block
    nnz = indices_t.numel()
    row = torch.repeat_interleave(
        torch.arange(n_rows, device=indices_t.device), indptr_t[1:] - indptr_t[:-1], output_size=nnz
    )
    n_bcols = max((n_cols + block - 1) // block, 1)
    blocks = torch.unique((row // block) * n_bcols + indices_t // block)
    per_brow = torch.bincount(blocks // n_bcols, minlength=n_brows)
    widest = int(per_brow.max()) if n_brows else 0
    slots = n_brows * widest * block * block
    return Storage("Blocked-ELL", nnz, slots, 4 * n_brows * widest + value_bytes * slots)
