"""The 16x1 blocked format: the baseline design that ME-BCRS improves on.

Rows are cut into windows of 16 consecutive rows. A window's distinct columns (sorted) are cut
into blocks of 8 columns; the window's last block is zero-padded to 8 columns (ME-BCRS stores
no such padding). A block is the left operand of one ``mma.m16n8k8`` (16 rows x 8 columns,
row-major, zeros where (row, column) is not a nonzero), so SpMM needs no swap-and-transpose,
but every block moves and multiplies 16 x 8 slots however few nonzeros it holds.

Arrays (``n_windows = ceil(n_rows / 16)``, ``n_blocks = row_ptr[-1]``):
  row_ptr   int64 [n_windows + 1], offset of each window's first block.
  col_idx   int32 [8 * n_blocks], column of each block column; a padding column repeats the
            block's last real column, so gathers through it stay in bounds.
  values    float [128 * n_blocks], block after block, 16 x 8 row-major.
  perm      int64 [nnz], value slot of each nonzero in the CSR order it was built from.
  vec_mask  int16 [8 * n_blocks], bit r set when row r of the window is a nonzero in that
            block column (0 for padding columns); the SDDMM writes only those slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .windowed import SlotCoords, WindowedFormat, csr_on_device

ROWS = 16  # rows per window
COLS = 8  # columns per block
BLOCK = ROWS * COLS


@dataclass
class Blocked16(WindowedFormat):
    """A sparse n_rows x n_cols matrix in the 16x1 blocked format (module docstring)."""

    _coords: SlotCoords | None = field(default=None, repr=False, compare=False)

    vector = ROWS

    @property
    def n_blocks(self) -> int:
        return self.col_idx.numel() // COLS

    @property
    def n_slots(self) -> int:
        """Entries of the value layout: 128 per block."""
        return BLOCK * self.n_blocks

    @property
    def n_vectors(self) -> int:
        """Real block columns (distinct columns of each window, the 16x1 vectors)."""
        return COLS * self.n_blocks - self.n_padding_columns

    @property
    def n_padding_columns(self) -> int:
        """Block columns that hold no nonzero: the zero padding of each window's last block."""
        return int((self.vec_mask == 0).sum())

    @classmethod
    def from_csr(
        cls, indptr, indices, values=None, n_cols: int | None = None, device=None
    ) -> Blocked16:
        """Build from a canonical CSR matrix; the arguments and their errors are those of
        ``MEBCRS.from_csr``. Vectorised torch, the same code on the CPU and the GPU."""
        indptr_t, indices_t, values_t, n_cols, device = csr_on_device(
            indptr, indices, values, n_cols, device
        )
        row_ptr, col_idx, perm, vec_mask = build_pattern16(indptr_t, indices_t, n_cols)
        out = values_t.new_zeros(BLOCK * row_ptr[-1].item()).index_copy_(0, perm, values_t)
        return cls(row_ptr, col_idx, out, perm, vec_mask, indptr_t.numel() - 1, n_cols)

    def slot_coords(self) -> SlotCoords:
        """Slot, row and column of every real nonzero, ordered by slot, read from the format
        alone (cached)."""
        if self._coords is None:
            self._coords = decode_slots16(self.row_ptr, self.col_idx, self.vec_mask)
        return self._coords

    def real_slots(self) -> torch.Tensor:
        """bool [128 * n_blocks]: True on the slots of real nonzeros."""
        real = torch.zeros(self.n_slots, dtype=torch.bool, device=self.device)
        real[self.slot_coords().slot] = True
        return real


def build_pattern16(indptr: torch.Tensor, indices: torch.Tensor, n_cols: int):
    """(row_ptr, col_idx, perm, vec_mask) of a canonical CSR pattern (indptr, indices int64 on
    one device): one sort by (window, column), no loop over rows or windows."""
    device = indices.device
    n_rows = indptr.numel() - 1
    n_win = (n_rows + ROWS - 1) // ROWS
    nnz = indices.numel()
    row = torch.repeat_interleave(torch.arange(n_rows, device=device), indptr[1:] - indptr[:-1])
    win = row // ROWS
    key_sorted, order = torch.sort(win * n_cols + indices, stable=True)
    is_new = torch.ones(nnz, dtype=torch.bool, device=device)
    if nnz:
        is_new[1:] = key_sorted[1:] != key_sorted[:-1]
    vec = torch.cumsum(is_new, 0) - 1  # distinct (window, column) of each sorted nonzero
    vec_key = key_sorted[is_new]
    vec_win = vec_key // max(n_cols, 1)
    vec_col = vec_key - vec_win * n_cols
    vectors = torch.bincount(vec_win, minlength=n_win)
    vec_start = torch.cumsum(vectors, 0) - vectors
    blocks = (vectors + COLS - 1) // COLS
    row_ptr = torch.zeros(n_win + 1, dtype=torch.int64, device=device)
    row_ptr[1:] = torch.cumsum(blocks, 0)
    n_blocks = int(row_ptr[-1])

    # each block column reads vector first + min(lane, width - 1): padding repeats the last column
    block_win = torch.repeat_interleave(
        torch.arange(n_win, device=device), blocks, output_size=n_blocks
    )
    block_in_win = torch.arange(n_blocks, device=device) - row_ptr[block_win]
    first = vec_start[block_win] + COLS * block_in_win
    width = torch.clamp(vectors[block_win] - COLS * block_in_win, max=COLS)
    lane = torch.arange(COLS, device=device)
    source = first[:, None] + torch.minimum(lane[None, :], width[:, None] - 1)
    col_idx = vec_col[source].flatten().to(torch.int32)

    j = vec - vec_start[vec_win[vec]]  # position of the nonzero's column in its window
    block = row_ptr[vec_win[vec]] + j // COLS
    r = row[order] % ROWS
    perm = torch.empty(nnz, dtype=torch.int64, device=device)
    perm[order] = BLOCK * block + COLS * r + j % COLS
    mask = torch.zeros(COLS * n_blocks, dtype=torch.int32, device=device)
    mask.index_add_(0, COLS * block + j % COLS, (torch.ones_like(r) << r).to(torch.int32))
    return row_ptr, col_idx, perm, mask.to(torch.int16)


def decode_slots16(
    row_ptr: torch.Tensor, col_idx: torch.Tensor, vec_mask: torch.Tensor
) -> SlotCoords:
    """Slot, row and column of every real nonzero of a 16x1 pattern, ordered by slot."""
    device = row_ptr.device
    n_blocks = col_idx.numel() // COLS
    counts = row_ptr[1:] - row_ptr[:-1]
    block_win = torch.repeat_interleave(
        torch.arange(row_ptr.numel() - 1, device=device), counts, output_size=n_blocks
    )
    r = torch.arange(ROWS, device=device)
    bits = (
        vec_mask.to(torch.int64).view(n_blocks, 1, COLS) >> r.view(1, ROWS, 1)
    ) & 1  # [block, row, col]
    b, rr, j = bits.nonzero(as_tuple=True)  # row-major: slots ascend
    return SlotCoords(
        BLOCK * b + COLS * rr + j, ROWS * block_win[b] + rr, col_idx[COLS * b + j].to(torch.int64)
    )
