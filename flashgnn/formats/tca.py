"""TCA-SpMM's matrix (Tensor Core-Adapted SpMM): plain CSR, its values in CSR order as given (no
reordering, no value re-layout), plus the per-warp schedule of the paper's kernel, so building it
costs a few vectorised passes over the row pointers.

The kernel (kernels/tca.cu) turns each row's dot products with X into m16n8k8 MMAs whose
8 x 8 right operand holds up to 64 of the row's nonzeros; a row of ``nnz`` nonzeros takes q of
its 8 columns, q = 1, 2, 4, 8 for nnz <= 8, 16, 32, 64 (and q = 8 with ceil(nnz / 64) chunks of
64 above), and each MMA then yields 16 / q outputs of the row. A row is given as many warps as
keep every warp near N / 16 MMAs: q warps for a row of at most 64 nonzeros (so short rows pack
into blocks, several to a block), 8 per chunk of 64 above, at most ROW_WARPS_MAX. The warps of a
row split its outputs (the columns of X) round-robin by MMA tile, each covering all of the
row's nonzeros, so no partial sums are added across warps.

Arrays:
  indptr      int64 [n_rows + 1], CSR row pointers.
  indices     int32 [nnz], CSR columns (ascending within a row).
  values      float [nnz], CSR values.
  warp_row    int32 [n_warps], the row of each warp (rows without nonzeros get none).
  warp_rank   int32 [n_warps], the warp's index among its row's warps.
  row_warps   int32 [n_warps], how many warps its row has.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .slot_layout import SlotFormat
from .windowed import MAX_DIM, SlotCoords, csr_on_device

CHUNK = 64  # nonzeros of one MMA's right operand (8 x 8)
K_MMA = 8  # the MMA's k: nonzeros per column of the right operand
M_MMA = 16  # the MMA's m: rows of the left operand (X's gathered columns)
N_MMA = 8  # the MMA's n
ROW_WARPS_MAX = 32  # warps of one row at most: 64 outputs per round at q = 8


def row_q(row_nnz: torch.Tensor) -> torch.Tensor:
    """q, the right operand's columns a row uses (int64, 0 for an empty row): the power of
    two at least ceil(nnz / 8), at most 8."""
    cols = (row_nnz + K_MMA - 1) // K_MMA
    q = torch.ones_like(row_nnz)
    for step in (2, 4, 8):
        q = torch.where(cols > step // 2, torch.full_like(q, step), q)
    return torch.where(row_nnz > 0, q, torch.zeros_like(q))


def row_chunks(row_nnz: torch.Tensor) -> torch.Tensor:
    """MMAs of 64 nonzeros needed per output tile of each row (int64; 0 for an empty row)."""
    return (row_nnz + CHUNK - 1) // CHUNK


def row_warp_counts(row_nnz: torch.Tensor) -> torch.Tensor:
    """Warps given to each row (int64): q up to 64 nonzeros, 8 per chunk of 64 above, at most
    ROW_WARPS_MAX."""
    long = (N_MMA * row_chunks(row_nnz)).clamp_max(ROW_WARPS_MAX)
    return torch.where(row_nnz > CHUNK, long, row_q(row_nnz))


def tiles_per_row(row_nnz: torch.Tensor, n: int) -> torch.Tensor:
    """Output tiles (one MMA each per chunk) of each row at N = n: 16 / q outputs a tile."""
    q = row_q(row_nnz)
    outputs = torch.where(q > 0, M_MMA // q.clamp_min(1), torch.ones_like(q))
    tiles = (n + outputs - 1) // outputs
    return torch.where(q > 0, tiles, torch.zeros_like(tiles))


def eq1_mma_bound(row_nnz, n: int) -> float:
    """The paper's Eq. (1): sum over rows of ceil(nnz_i / (K_mma N_mma)) * N * N_mma / M_mma,
    the m16n8k8 MMAs that compute A @ X [n_cols, n] when every row takes 2 outputs per MMA.
    row_nnz: nonzeros of each row (any integer tensor or sequence)."""
    row_nnz = torch.as_tensor(row_nnz, dtype=torch.int64)
    fragments = int(row_chunks(row_nnz).sum())
    return fragments * n * N_MMA / M_MMA


@dataclass
class TCACSR(SlotFormat):
    """A sparse n_rows x n_cols matrix as CSR with TCA-SpMM's per-warp schedule (module
    docstring)."""

    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor
    warp_row: torch.Tensor
    warp_rank: torch.Tensor
    row_warps: torch.Tensor
    n_rows: int
    n_cols: int
    _coords: SlotCoords | None = field(default=None, repr=False, compare=False)

    @property
    def nnz(self) -> int:
        return self.indices.numel()

    @property
    def n_slots(self) -> int:
        """Entries of the value layout (CSR order): one per nonzero."""
        return self.nnz

    @property
    def n_warps(self) -> int:
        return self.warp_row.numel()

    @classmethod
    def from_csr(
        cls, indptr, indices, values=None, n_cols: int | None = None, *, device=None
    ) -> TCACSR:
        """Keep a canonical CSR matrix (sorted, duplicate-free columns in each row) and derive
        the warp schedule.

        indptr: int32/int64 [n_rows + 1]; indices: int32/int64 [nnz]; values: [nnz] or None (all
        ones, float32), kept in CSR order and dtype; n_cols defaults to max(indices) + 1;
        ``device`` chooses where the result lives (default: the device of ``indices``).
        Vectorised torch on the CPU and the GPU alike. ValueError naming the first problem of
        the input.
        """
        indptr_t, indices_t, values_t, n_cols, device = csr_on_device(
            indptr, indices, values, n_cols, device
        )
        warp_row, warp_rank, row_warps = build_tca_schedule(indptr_t)
        return cls(
            indptr_t,
            indices_t.to(torch.int32),
            values_t,
            warp_row,
            warp_rank,
            row_warps,
            indptr_t.numel() - 1,
            n_cols,
        )

    def row_nnz(self) -> torch.Tensor:
        """Nonzeros of each row, int64 [n_rows]."""
        return self.indptr[1:] - self.indptr[:-1]

    def mma_count(self, n: int) -> int:
        """The m16n8k8 MMAs the kernel issues for A @ X with X [n_cols, n]: per row with
        nonzeros, ceil(n / (16 / q)) tiles times ceil(nnz / 64) chunks, wherever its warps
        run (read from the schedule's row sizes; at most ``eq1_mma_bound`` for even n)."""
        nnz = self.row_nnz()
        return int((tiles_per_row(nnz, n) * row_chunks(nnz)).sum())

    def slot_coords(self) -> SlotCoords:
        """Slot, row and column of every nonzero, in CSR order (cached)."""
        if self._coords is None:
            row = torch.repeat_interleave(
                torch.arange(self.n_rows, device=self.device), self.row_nnz(), output_size=self.nnz
            )
            slot = torch.arange(self.nnz, device=self.device)
            self._coords = SlotCoords(slot, row, self.indices.to(torch.int64))
        return self._coords

    def to_csr(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(indptr int64 [n_rows + 1], indices int64 [nnz], values [nnz]): the CSR it holds."""
        return self.indptr, self.indices.to(torch.int64), self.values

    def with_values(self, values: torch.Tensor) -> TCACSR:
        """The same pattern with other values ([nnz], CSR order)."""
        if values.shape != (self.nnz,):
            raise ValueError(
                f"values must have shape ({self.nnz},) (CSR order), got {tuple(values.shape)}"
            )
        return replace(self, values=values)


def build_tca_schedule(indptr: torch.Tensor):
    """(warp_row, warp_rank, row_warps), int32 [n_warps], of the rows of ``indptr`` (int64):
    ``row_warp_counts`` warps per row, in row order; no loop."""
    device = indptr.device
    counts = row_warp_counts(indptr[1:] - indptr[:-1])
    n_warps = int(counts.sum())
    if n_warps > MAX_DIM:
        raise ValueError(f"the schedule has {n_warps} warps; TCA indexes them with int32")
    warp_row = torch.repeat_interleave(
        torch.arange(counts.numel(), device=device), counts, output_size=n_warps
    )
    first = torch.cumsum(counts, 0) - counts  # each row's first warp
    warp_rank = torch.arange(n_warps, device=device) - first[warp_row]
    row_warps = counts[warp_row]
    return warp_row.to(torch.int32), warp_rank.to(torch.int32), row_warps.to(torch.int32)
