"""What the windowed formats (ME-BCRS in ``mebcrs.py``, the 16x1 baseline in ``blocked16.py``)
share: the checks of the canonical CSR they (and the other formats) are built from, the arrays
both hold, and the coordinates of their real value slots (docs/FORMAT.md)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .device_builders import check_device
from .slot_layout import SlotLayout

# The most rows or columns a format holds: its column indices are int32, and so are the row
# indices of the kernels (and A^T's columns are A's rows).
MAX_DIM = 2**31 - 1


def check_dim(n, name: str) -> int:
    """``n`` as an int, after checking that it is an integer in [0, MAX_DIM]: a number of rows
    or columns of a format. ValueError naming ``name`` otherwise."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {type(n).__name__}")
    if n < 0 or n > MAX_DIM:
        raise ValueError(
            f"{name} must be in [0, 2^31) (formats index rows and columns with int32), got {n}"
        )
    return int(n)


def _as_index_tensor(a, name: str) -> torch.Tensor:
    t = torch.as_tensor(a)
    if t.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must hold int32 or int64 indices, got {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t.to(torch.int64)


def check_csr(indptr: torch.Tensor, indices: torch.Tensor, n_cols: int) -> None:
    """Raise ValueError unless (indptr, indices) is a canonical CSR pattern of n_cols columns:
    monotone row pointers, in-range columns, strictly increasing columns within each row.
    Every check is computed on the tensors' device and read back at once (one host
    synchronisation on a GPU; mini-batch training builds a graph per step)."""
    if indptr.numel() < 1:
        raise ValueError("indptr must have n_rows + 1 >= 1 entries")
    nnz = indices.numel()
    checks = [indptr[0], indptr[-1], (indptr[1:] < indptr[:-1]).any()]
    if nnz:
        step = indices[1:] - indices[:-1]
        # positions whose successor starts a new row; rows past the end go to a spare slot
        row_ends = indptr[1:-1] - 1
        row_ends = torch.where((row_ends >= 0) & (row_ends < step.numel()), row_ends, step.numel())
        same_row = torch.ones(step.numel() + 1, dtype=torch.bool, device=indices.device)
        same_row.index_fill_(0, row_ends, False)
        bad = same_row[:-1] & (step <= 0)
        checks += [indices.min(), indices.max(), bad.any()]
    first, last, decreasing, *columns = torch.stack([c.to(torch.int64) for c in checks]).tolist()
    if first != 0:
        raise ValueError(f"indptr[0] must be 0, got {first}")
    if last != nnz:
        raise ValueError(f"indptr[-1] = {last} does not match len(indices) = {nnz}")
    if decreasing:
        raise ValueError("indptr must be non-decreasing")
    if not nnz:
        return
    lo, hi, unordered = columns
    if lo < 0 or hi >= n_cols:
        pos = int(((indices < 0) | (indices >= n_cols)).nonzero()[0, 0])
        row = _row_of(indptr, pos)
        raise ValueError(
            f"column index out of range [0, {n_cols}): found {int(indices[pos])} at position "
            f"{pos} (row {row})"
        )
    if unordered:
        pos = int(bad.nonzero()[0])
        row = _row_of(indptr, pos)
        kind = "duplicate" if int(step[pos]) == 0 else "unsorted"
        raise ValueError(
            f"{kind} column indices in row {row} (positions {pos} and {pos + 1}); "
            "columns must be strictly increasing within a row"
        )


def _row_of(indptr: torch.Tensor, pos: int) -> int:
    """The row holding CSR position ``pos``."""
    at = torch.tensor(pos, device=indptr.device)
    return int(torch.searchsorted(indptr, at, right=True)) - 1


def csr_inputs(indptr, indices, values, n_cols: int | None, device):
    """Checked builder inputs: (indptr int64, indices int64, values [nnz] float (ones when
    None), n_cols, target torch.device), all on the device of ``indices``; ValueError naming
    the first problem (see check_csr)."""
    indptr_t = _as_index_tensor(indptr, "indptr")
    indices_t = _as_index_tensor(indices, "indices")
    device = torch.device(indices_t.device if device is None else device)
    nnz = indices_t.numel()
    check_dim(max(indptr_t.numel() - 1, 0), "n_rows")
    if n_cols is None:
        n_cols = int(indices_t.max()) + 1 if nnz else 0
    n_cols = check_dim(n_cols, "n_cols")
    if values is None:
        values_t = torch.ones(nnz, dtype=torch.float32, device=indices_t.device)
    else:
        values_t = torch.as_tensor(values)
        if values_t.dim() != 1 or values_t.numel() != nnz:
            raise ValueError(
                f"values must be 1-D with one entry per nonzero ({nnz}), "
                f"got shape {tuple(values_t.shape)}"
            )
        if not values_t.is_floating_point():
            raise ValueError(f"values must be floating point, got {values_t.dtype}")
    indptr_t = indptr_t.to(indices_t.device)
    check_csr(indptr_t, indices_t, n_cols)
    return indptr_t, indices_t, values_t, n_cols, device


def csr_on_device(indptr, indices, values, n_cols: int | None, device):
    """``csr_inputs``, then a clear error unless formats can be built on the target device,
    and the three tensors moved there: (indptr int64, indices int64, values float, n_cols,
    device), the preamble of every format's ``from_csr``."""
    indptr_t, indices_t, values_t, n_cols, device = csr_inputs(
        indptr, indices, values, n_cols, device
    )
    check_device(device)
    return indptr_t.to(device), indices_t.to(device), values_t.to(device), n_cols, device


@dataclass
class SlotCoords:
    """Coordinates of the real (nonzero-pattern) value slots of a windowed-format matrix.

    slot, row, col: int64 [nnz], ordered by slot.
    """

    slot: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor


@dataclass
class WindowedFormat(SlotLayout):
    """The arrays and sizes common to the windowed formats (MEBCRS, Blocked16, CVSE); each
    documents what its arrays hold."""

    row_ptr: torch.Tensor
    col_idx: torch.Tensor
    values: torch.Tensor
    perm: torch.Tensor
    vec_mask: torch.Tensor
    n_rows: int
    n_cols: int

    @property
    def n_windows(self) -> int:
        return self.row_ptr.numel() - 1
