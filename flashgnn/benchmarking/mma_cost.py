"""MMA count and bytes moved of SpMM and SDDMM on ME-BCRS (8x1 vectors, swap-and-transpose)
and on the 16x1 baseline (flashgnn.formats.blocked16), fp16/bf16 operands on mma.m16n8k8.

MMAs, as each design needs them (N feature columns for SpMM, K features for SDDMM):
  SpMM 8x1:   sum over windows of ceil(vectors / 8) * ceil(N / 16)  (16 features x 8 rows, 8
  vectors)
  SpMM 16x1:  blocks * ceil(N / 8)                                  (16 rows x 8 features, 8
  columns)
  SDDMM 8x1:  sum over windows of ceil(vectors / 16) * ceil(K / 8)  (16 vectors x 8 rows, 8
  features)
  SDDMM 16x1: blocks * ceil(K / 8)                                  (16 rows x 8 columns, 8
  features)
The kernels may issue a few more, all on zeros: spmm.cu's feature chunks (32 or 64 columns) round
N up, blocked16.cu's (32 or 64) too; the ablation's sizes (N = 32, 128; K = 32) are multiples
of every chunk.

Bytes, every array once at its stored size, dense rows once per use that a kernel without reuse
across windows makes (``elem``: bytes of a dense element, 2 for fp16/bf16; values are float32):
  SpMM 8x1:   row_ptr + col_idx + vec_mask + values (8 per vector) + X (a row per vector) + Y
  SpMM 16x1:  row_ptr + col_idx (8 per block) + values (128 per block) + X (8 rows per block,
              padding columns included) + Y
  SDDMM 8x1:  row_ptr + col_idx + vec_mask + X (once) + Y (a row per vector) + out (8 per vector)
  SDDMM 16x1: row_ptr + col_idx + vec_mask (int16, 8 per block) + X (once) + Y (8 rows per
              block) + out (128 per block)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..formats.blocked16 import COLS, Blocked16
from ..formats.mebcrs import MEBCRS


@dataclass
class Cost:
    mmas: int
    bytes: int


def _ceil(a, b):
    return -(-a // b)


def _mma_steps(fmt: MEBCRS | Blocked16, per_step: int) -> int:
    """Sum over windows of ceil(vectors / per_step) (8x1), or the block count (16x1)."""
    if fmt.vector == 16:
        return fmt.n_blocks
    vectors = fmt.row_ptr[1:] - fmt.row_ptr[:-1]
    return int(torch.sum(_ceil(vectors, per_step)))


def _stored_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _gathered_rows(fmt: MEBCRS | Blocked16) -> int:
    """Dense rows a kernel gathers through col_idx: one per vector (8x1), 8 per block (16x1)."""
    return fmt.col_idx.numel()


def spmm_cost(fmt: MEBCRS | Blocked16, n: int, elem: int = 2) -> Cost:
    per_mma = 16 if fmt.vector == 8 else COLS
    mmas = _mma_steps(fmt, 8) * _ceil(n, per_mma)
    pattern = (fmt.row_ptr, fmt.col_idx) + (
        (fmt.vec_mask,) if fmt.vector == 8 else ()
    )  # 16x1 reads no mask
    nbytes = (
        _stored_bytes(*pattern) + 4 * fmt.n_slots + elem * n * (_gathered_rows(fmt) + fmt.n_rows)
    )
    return Cost(mmas, nbytes)


def sddmm_cost(fmt: MEBCRS | Blocked16, k: int, elem: int = 2) -> Cost:
    mmas = _mma_steps(fmt, 16) * _ceil(k, 8)
    nbytes = (
        _stored_bytes(fmt.row_ptr, fmt.col_idx, fmt.vec_mask)
        + elem * k * (fmt.n_rows + _gathered_rows(fmt))
        + 4 * fmt.n_slots
    )
    return Cost(mmas, nbytes)


def padding_fraction(fmt: MEBCRS | Blocked16) -> float:
    """Share of block columns that hold no nonzero: the zero padding of 16x1 blocks (ME-BCRS
    stores none: 0)."""
    if fmt.vector == 8 or fmt.n_blocks == 0:
        return 0.0
    return fmt.n_padding_columns / (COLS * fmt.n_blocks)
