"""What a format reads back from the coordinates of its real value slots: its device, shape,
a dense copy and a move to another device (SlotFormat, every format); and, where a perm maps
CSR order to a layout of slots, its CSR and values moved between CSR order and the layout
(SlotLayout)."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Self

import torch


def csr_order(
    rows: torch.Tensor, cols: torch.Tensor, n_rows: int, n_cols: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of the distinct nonzeros at (rows, cols), int64 [nnz] each, of an n_rows x n_cols
    matrix: (indptr int64 [n_rows + 1], order int64 [nnz]), ``order`` sorting the nonzeros by
    row, then column."""
    order = torch.argsort(rows * max(n_cols, 1) + cols)
    indptr = torch.zeros(n_rows + 1, dtype=torch.int64, device=rows.device)
    indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=n_rows), 0)
    return indptr, order


def moved_to(fmt, device):
    """A copy of the dataclass format ``fmt`` with every tensor field on ``device`` and every
    cache cleared: a format's fields left out of comparisons hold data derived from its arrays
    (None until first needed)."""
    device = torch.device(device)
    changes = {}
    for f in fields(fmt):
        value = getattr(fmt, f.name)
        if not f.compare:
            changes[f.name] = None
        elif isinstance(value, torch.Tensor):
            changes[f.name] = value.to(device)
    return replace(fmt, **changes)


class SlotFormat:
    """Mixin of a dataclass format that has ``slot_coords()`` (SlotCoords ordered by slot),
    ``values`` [n_slots], ``n_rows`` and ``n_cols``: its device, shape, dense copy and move."""

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.n_cols)

    def to(self, device) -> Self:
        """The same matrix with its arrays on ``device``."""
        return moved_to(self, device)

    def to_dense(self) -> torch.Tensor:
        """Dense [n_rows, n_cols] copy, for small matrices."""
        c = self.slot_coords()
        out = torch.zeros(self.n_rows, self.n_cols, dtype=self.values.dtype, device=self.device)
        out[c.row, c.col] = self.values[c.slot]
        return out


class SlotLayout(SlotFormat):
    """Mixin of a SlotFormat that also has ``perm`` int64 [nnz] (the slot of each nonzero in
    CSR order) and ``n_slots``: values moved between CSR order and the layout."""

    @property
    def nnz(self) -> int:
        return self.perm.numel()

    def to_csr(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(indptr int64 [n_rows + 1], indices int64 [nnz], values [nnz]), canonical CSR read
        from the arrays (the CSR it was built from, exactly)."""
        c = self.slot_coords()
        indptr, order = csr_order(c.row, c.col, self.n_rows, self.n_cols)
        return indptr, c.col[order], self.values[self.perm]

    def values_from_csr(self, csr_values: torch.Tensor) -> torch.Tensor:
        """Place values given in CSR nonzero order ([nnz]) into the value layout (0 in the
        slots of no nonzero)."""
        if csr_values.shape != (self.nnz,):
            raise ValueError(
                f"expected {self.nnz} values in CSR order, got shape {tuple(csr_values.shape)}"
            )
        return csr_values.new_zeros(self.n_slots).index_copy(0, self.perm, csr_values)

    def with_values(self, values: torch.Tensor):
        """The same pattern with other values ([n_slots], the value layout)."""
        if values.shape != (self.n_slots,):
            raise ValueError(
                f"values must have shape ({self.n_slots},) (the value layout), got "
                f"{tuple(values.shape)}"
            )
        return replace(self, values=values)
