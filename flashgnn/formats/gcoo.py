"""GCOO, the grouped coordinate format of GCOOSpDM (Shi et al.), by row strips: the rows are cut
into groups of p consecutive rows (a strip; the last may be shorter), and each group is a COO
list of its nonzeros sorted by column (rows ascending within a column), the groups concatenated
in order. A kernel that takes one group reads a column of X once for every row of the strip
holding that column.

Arrays (``n_groups = ceil(n_rows / p)``):
  group_ptr  int64 [n_groups + 1], offset of each group's first nonzero (the paper's gIdxes).
  group_nnz  int32 [n_groups], nonzeros of each group (its nnzPerGroup).
  rows       int32 [nnz], row of each nonzero (of the matrix, not of the strip).
  cols       int32 [nnz], column of each nonzero, ascending within a group.
  values     float [nnz], the value of each nonzero in that order.
  perm       int64 [nnz], position in GCOO order of each nonzero of the CSR it was built from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .slot_layout import SlotLayout
from .windowed import SlotCoords, csr_on_device

GROUPS = (1, 2, 4, 8)  # rows per strip: the kernel keeps a strip's sums in registers

# The strip height chosen for a pattern (choose_group): the tallest strip whose nonzeros per
# distinct column (the reads of X it saves) reach its entry here, else 1. Taller strips cost a
# select per nonzero and registers; on the real graphs, whose strips share few columns, p = 1
# is the faster kernel (docs/TUNING.md, GCOO).
GROUP_REUSE = ((8, 4.0), (4, 2.5), (2, 1.8))


@dataclass
class GCOO(SlotLayout):
    """A sparse n_rows x n_cols matrix in GCOO (module docstring); ``group`` is p, the rows of a
    strip."""

    group_ptr: torch.Tensor
    group_nnz: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor
    perm: torch.Tensor
    n_rows: int
    n_cols: int
    group: int

    @property
    def n_slots(self) -> int:
        """Entries of the value layout: one per nonzero."""
        return self.nnz

    @property
    def n_groups(self) -> int:
        return self.group_ptr.numel() - 1

    @classmethod
    def from_csr(
        cls,
        indptr,
        indices,
        values=None,
        n_cols: int | None = None,
        *,
        group: int = 4,
        device=None,
    ) -> GCOO:
        """Build from a canonical CSR matrix (sorted, duplicate-free columns in each row).

        indptr: int32/int64 [n_rows + 1]; indices: int32/int64 [nnz]; values: [nnz] or None (all
        ones, float32); n_cols defaults to max(indices) + 1; ``group`` is p (1, 2, 4 or 8;
        ``choose_group`` picks one from the pattern); ``device`` chooses where the result lives
        (default: the device of ``indices``). One stable sort of torch, the same on the CPU and
        the GPU. ValueError naming the first problem of the input.
        """
        if type(group) is not int or group not in GROUPS:
            raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
        indptr_t, indices_t, values_t, n_cols, device = csr_on_device(
            indptr, indices, values, n_cols, device
        )
        group_ptr, group_nnz, rows, cols, perm = build_gcoo_pattern(
            indptr_t, indices_t, n_cols, group
        )
        out = torch.empty_like(values_t).index_copy_(0, perm, values_t)
        n_rows = indptr_t.numel() - 1
        return cls(group_ptr, group_nnz, rows, cols, out, perm, n_rows, n_cols, group)

    def slot_coords(self) -> SlotCoords:
        """Slot, row and column of every nonzero, ordered by slot."""
        slot = torch.arange(self.nnz, device=self.device)
        return SlotCoords(slot, self.rows.to(torch.int64), self.cols.to(torch.int64))


def build_gcoo_pattern(indptr: torch.Tensor, indices: torch.Tensor, n_cols: int, group: int):
    """(group_ptr, group_nnz, rows, cols, perm) of a canonical CSR pattern (indptr, indices int64
    on one device) in strips of ``group`` rows: one stable sort by (strip, column), which keeps
    the rows of a column ascending, no loop."""
    device = indices.device
    n_rows = indptr.numel() - 1
    n_groups = (n_rows + group - 1) // group
    nnz = indices.numel()
    row = torch.repeat_interleave(
        torch.arange(n_rows, device=device), indptr[1:] - indptr[:-1], output_size=nnz
    )
    if group == 1:  # CSR order already
        order = torch.arange(nnz, device=device)
    else:
        order = torch.sort((row // group) * n_cols + indices, stable=True)[1]
    perm = torch.empty(nnz, dtype=torch.int64, device=device)
    perm[order] = torch.arange(nnz, device=device)
    first = torch.arange(n_groups, device=device) * group
    counts = indptr[(first + group).clamp_max(n_rows)] - indptr[first]  # the last may be short
    group_ptr = torch.zeros(n_groups + 1, dtype=torch.int64, device=device)
    group_ptr[1:] = torch.cumsum(counts, 0)
    rows = row[order].to(torch.int32)
    cols = indices[order].to(torch.int32)
    return group_ptr, counts.to(torch.int32), rows, cols, perm


def column_reuse(indptr, indices, group: int) -> float:
    """Nonzeros per distinct (strip, column) pair when the rows are cut into strips of
    ``group`` rows: how many products each read of X serves in a GCOO kernel (1.0 at group 1).
    indptr, indices: a canonical CSR pattern (tensors of one device)."""
    indptr = torch.as_tensor(indptr).to(torch.int64)
    indices = torch.as_tensor(indices).to(torch.int64)
    nnz = indices.numel()
    if nnz == 0 or group == 1:
        return 1.0
    n_rows = indptr.numel() - 1
    n_cols = int(indices.max()) + 1
    row = torch.repeat_interleave(
        torch.arange(n_rows, device=indices.device), indptr[1:] - indptr[:-1], output_size=nnz
    )
    distinct = torch.unique((row // group) * n_cols + indices).numel()
    return nnz / distinct


def choose_group(indptr, indices) -> int:
    """The strip height p for a canonical CSR pattern: the tallest strip of GROUP_REUSE whose
    column reuse (``column_reuse``) reaches its threshold, else 1. A few sorts of the
    pattern."""
    for group, least in GROUP_REUSE:
        if column_reuse(indptr, indices, group) >= least:
            return group
    return 1
