"""HB-ELL, the hybrid blocked ELL format of Wu et al. ("Generic, Sparse Tensor Core for Neural
Networks"): the matrix is cut into 16 x 16 blocks and only blocks holding a nonzero are kept,
block row after block row, by column within a block row. A block at least ``DENSE_FILL`` full
is stored dense (16 x 16, row-major); any other block as ELL: each of its 16 rows holds ``w``
entries (w = the block's longest row), its nonzeros packed to the left in column order with an
8-bit column offset inside the block, the rest padded with value 0 and the row's last offset
(offset 0 for an empty row). The per-block width is what sets HB-ELL apart from a uniform ELL.

Arrays (``n_brows = ceil(n_rows / 16)``, ``n_blocks = brow_ptr[-1]``; the names are the paper's
but for ``ell_ptr``, ``row_mask`` and ``perm``):
  brow_ptr     int64 [n_brows + 1], first block of each block row.
  bridx        int32 [n_blocks], first row of each block (16 * its block row).
  bcidx        int32 [n_blocks], first column of each block (16 * its block column).
  bcols        uint8 [n_blocks], columns stored per block row: 16 for a dense block, the ELL
               width w (1..16) for a sparse one.
  brow_valptr  int64 [n_blocks + 1], first value of each block: 256 values for a dense block,
               16 * w for an ELL block.
  values       float [brow_valptr[-1]], block after block: a dense block's value of (r, c) at
               16 r + c, an ELL block's j-th entry of row r at w r + j.
  ell_ptr      int64 [n_blocks + 1], first offset of each block (a dense block holds none,
               which is how a block is known to be dense).
  offsets      uint8 [ell_ptr[-1]], column in the block of each ELL value slot, same order.
  row_mask     int16 [16 * n_blocks], bit c of entry 16 b + r set when (r, c) of block b is a
               nonzero: it tells a dense block's zero fill and ELL padding from real zeros.
  perm         int64 [nnz], value slot of each nonzero in the CSR order it was built from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .slot_layout import SlotLayout
from .storage import Storage
from .windowed import MAX_DIM, SlotCoords, csr_on_device

BLOCK = 16  # rows and columns of a block
BLOCK_SLOTS = BLOCK * BLOCK
# A block with at least this fraction of its 256 entries nonzero (sparsity below 25%) is stored
# dense: the paper's rule, as dense MMAs beat a sparse format on such blocks.
DENSE_FILL = 0.75
DENSE_MIN_NNZ = 192  # ceil(DENSE_FILL * BLOCK_SLOTS)


@dataclass
class HBELL(SlotLayout):
    """A sparse n_rows x n_cols matrix in HB-ELL (module docstring)."""

    brow_ptr: torch.Tensor
    bridx: torch.Tensor
    bcidx: torch.Tensor
    bcols: torch.Tensor
    brow_valptr: torch.Tensor
    values: torch.Tensor
    ell_ptr: torch.Tensor
    offsets: torch.Tensor
    row_mask: torch.Tensor
    perm: torch.Tensor
    n_rows: int
    n_cols: int
    _coords: SlotCoords | None = field(default=None, repr=False, compare=False)

    @property
    def n_brows(self) -> int:
        return self.brow_ptr.numel() - 1

    @property
    def n_blocks(self) -> int:
        return self.bcidx.numel()

    @property
    def n_slots(self) -> int:
        """Entries of the value layout (dense blocks' 256 and ELL blocks' 16 w)."""
        return self.values.numel()

    @property
    def dense(self) -> torch.Tensor:
        """bool [n_blocks], True where the block is stored dense."""
        return self.ell_ptr[1:] == self.ell_ptr[:-1]

    @property
    def n_dense_blocks(self) -> int:
        return int(self.dense.sum())

    @classmethod
    def from_csr(
        cls,
        indptr,
        indices,
        values=None,
        n_cols: int | None = None,
        *,
        device=None,
        dense_fill: float = DENSE_FILL,
    ) -> HBELL:
        """Build from a canonical CSR matrix (sorted, duplicate-free columns in each row).

        indptr: int32/int64 [n_rows + 1]; indices: int32/int64 [nnz]; values: [nnz] or None (all
        ones, float32); n_cols defaults to max(indices) + 1; ``device`` chooses where the result
        lives (default: the device of ``indices``); ``dense_fill`` is the fill from which a block
        is stored dense (the paper's DENSE_FILL; 0 stores every block dense, the pure blocked
        layout HB-ELL is compared with). One vectorised pass of torch, the same on the CPU and
        the GPU. ValueError naming the first problem of the input.
        """
        if isinstance(dense_fill, bool) or not isinstance(dense_fill, int | float):
            raise ValueError(f"dense_fill must be a number in [0, 1], got {dense_fill!r}")
        if not 0 <= dense_fill <= 1:
            raise ValueError(f"dense_fill must be in [0, 1], got {dense_fill}")
        indptr_t, indices_t, values_t, n_cols, device = csr_on_device(
            indptr, indices, values, n_cols, device
        )
        min_nnz = max(math.ceil(dense_fill * BLOCK_SLOTS), 1)
        arrays = build_hbell_pattern(indptr_t, indices_t, n_cols, min_nnz)
        n_values = int(arrays["brow_valptr"][-1])
        out = values_t.new_zeros(n_values).index_copy_(0, arrays["perm"], values_t)
        return cls(**arrays, values=out, n_rows=indptr_t.numel() - 1, n_cols=n_cols)

    def slot_coords(self) -> SlotCoords:
        """Slot, row and column of every real nonzero, ordered by slot, read from the arrays
        alone (cached)."""
        if self._coords is None:
            self._coords = decode_hbell_slots(
                self.bridx, self.bcidx, self.brow_valptr, self.bcols, self.dense, self.row_mask
            )
        return self._coords

    def storage(self, value_bytes: int | None = None) -> Storage:
        """Value slots, nonzeros and bytes of the arrays an SpMM reads (every array but
        row_mask and perm, which only map the pattern back to CSR), values at ``value_bytes``
        each (default: their element size)."""
        vb = self.values.element_size() if value_bytes is None else value_bytes
        index_bytes = sum(
            getattr(self, name).numel() * getattr(self, name).element_size()
            for name in ("brow_ptr", "bridx", "bcidx", "bcols", "brow_valptr", "ell_ptr", "offsets")
        )
        return Storage("HB-ELL", self.nnz, self.n_slots, index_bytes + vb * self.n_slots)

    def zero_fill(self) -> float:
        """Fraction of the stored value slots that hold no nonzero (dense blocks' zeros and ELL
        padding)."""
        return self.storage().zero_fill

    def stored_bytes(self, value_bytes: int | None = None) -> int:
        """Bytes of ``storage(value_bytes)``."""
        return self.storage(value_bytes).bytes


def _exclusive_cumsum(counts: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=counts.device)
    out[1:] = torch.cumsum(counts, 0)
    return out


def build_hbell_pattern(
    indptr: torch.Tensor, indices: torch.Tensor, n_cols: int, dense_min_nnz: int = DENSE_MIN_NNZ
) -> dict[str, torch.Tensor]:
    """Every array of HB-ELL but ``values`` (module docstring), of a canonical CSR pattern
    (indptr, indices int64 on one device), blocks of at least ``dense_min_nnz`` nonzeros
    dense: one stable sort by block, no loop."""
    device = indices.device
    n_rows = indptr.numel() - 1
    n_brows = (n_rows + BLOCK - 1) // BLOCK
    n_bcols = max((n_cols + BLOCK - 1) // BLOCK, 1)
    nnz = indices.numel()
    row = torch.repeat_interleave(
        torch.arange(n_rows, device=device), indptr[1:] - indptr[:-1], output_size=nnz
    )
    # CSR order is (row, column), so within a block the stable sort keeps (r, c) order
    key_sorted, order = torch.sort((row // BLOCK) * n_bcols + indices // BLOCK, stable=True)
    is_new = torch.ones(nnz, dtype=torch.bool, device=device)
    if nnz:
        is_new[1:] = key_sorted[1:] != key_sorted[:-1]
    block = torch.cumsum(is_new, 0) - 1  # block of each sorted nonzero
    block_key = key_sorted[is_new]
    n_blocks = block_key.numel()
    if n_blocks > MAX_DIM:
        raise ValueError(f"the matrix has {n_blocks} blocks; HB-ELL indexes them with int32")
    brow = block_key // n_bcols
    r = row[order] % BLOCK
    c = indices[order] % BLOCK

    block_nnz = torch.bincount(block, minlength=n_blocks)
    dense = block_nnz >= dense_min_nnz
    row_nnz = torch.bincount(block * BLOCK + r, minlength=n_blocks * BLOCK)  # per (block, r)
    width = row_nnz.view(n_blocks, BLOCK).amax(1)
    bcols = torch.where(dense, BLOCK, width)
    brow_valptr = _exclusive_cumsum(BLOCK * bcols)
    ell_ptr = _exclusive_cumsum(torch.where(dense, 0, BLOCK * width))

    # j: the entry's rank in its block row (sorted order is by block, r, c)
    row_start = _exclusive_cumsum(row_nnz)[:-1]
    j = torch.arange(nnz, device=device) - row_start[block * BLOCK + r]
    in_block = torch.where(dense[block], BLOCK * r + c, width[block] * r + j)
    perm = torch.empty(nnz, dtype=torch.int64, device=device)
    perm[order] = brow_valptr[block] + in_block

    # offsets of every ELL slot: the j-th column of its row, or the row's last one past its end
    n_ell = int(ell_ptr[-1])
    ell_counts = ell_ptr[1:] - ell_ptr[:-1]
    slot_block = torch.repeat_interleave(
        torch.arange(n_blocks, device=device), ell_counts, output_size=n_ell
    )
    q = torch.arange(n_ell, device=device) - ell_ptr[slot_block]
    w = width[slot_block]
    group = slot_block * BLOCK + q // w
    count = row_nnz[group]
    src = row_start[group] + torch.minimum(q % w, (count - 1).clamp_min(0))
    offsets = torch.where(count > 0, c[src.clamp_max(max(nnz - 1, 0))], 0)

    mask = torch.zeros(n_blocks * BLOCK, dtype=torch.int32, device=device)
    mask.index_add_(0, block * BLOCK + r, (torch.ones_like(c) << c).to(torch.int32))
    return {
        "brow_ptr": _exclusive_cumsum(torch.bincount(brow, minlength=n_brows)),
        "bridx": (BLOCK * brow).to(torch.int32),
        "bcidx": (BLOCK * (block_key - brow * n_bcols)).to(torch.int32),
        "bcols": bcols.to(torch.uint8),
        "brow_valptr": brow_valptr,
        "ell_ptr": ell_ptr,
        "offsets": offsets.to(torch.uint8),
        "row_mask": mask.to(torch.int16),
        "perm": perm,
    }


def decode_hbell_slots(
    bridx: torch.Tensor,
    bcidx: torch.Tensor,
    brow_valptr: torch.Tensor,
    bcols: torch.Tensor,
    dense: torch.Tensor,
    row_mask: torch.Tensor,
) -> SlotCoords:
    """Slot, row and column of every real nonzero of an HB-ELL pattern, ordered by slot."""
    device = bcidx.device
    masks = row_mask.to(torch.int64) & 0xFFFF
    (pair,) = torch.nonzero(masks, as_tuple=True)  # (block, r) pairs holding a nonzero
    b, r = pair // BLOCK, pair % BLOCK
    cols = torch.arange(BLOCK, device=device)
    bits = ((masks[pair, None] >> cols) & 1).to(torch.bool)  # [pairs, 16]
    rank = torch.cumsum(bits, 1) - 1  # an ELL entry's position in its row
    p, c = bits.nonzero(as_tuple=True)  # row-major: slots ascend
    bb, rr = b[p], r[p]
    width = bcols.to(torch.int64)[bb]
    in_block = torch.where(dense[bb], BLOCK * rr + c, width * rr + rank[p, c])
    return SlotCoords(
        brow_valptr[bb] + in_block,
        bridx.to(torch.int64)[bb] + rr,
        bcidx.to(torch.int64)[bb] + c,
    )
