"""Nonzeros of an ME-BCRS pattern, looked up by its vec_mask tensor: a launch rule that depends
on nonzeros per vector (the fp32 SpMM's) gets them with no host synchronisation when the
format that owns the mask said them (every MEBCRS does when made), and counts the mask's
bits once otherwise. A fact of the pattern, kept below both the formats that tell it and the
launchers that read it."""

from __future__ import annotations

import torch

from .tensor_cache import TensorCache

_NNZ = TensorCache()  # vec_mask -> nonzeros
# set bits of each byte value
_BITS = torch.tensor([bin(i).count("1") for i in range(256)], dtype=torch.int64)


def remember_nnz(vec_mask: torch.Tensor, nnz: int) -> None:
    _NNZ.set(vec_mask, nnz)


def vector_nnz(vec_mask: torch.Tensor) -> torch.Tensor:
    """int64 [n_vectors] on vec_mask's device: the nonzeros of each vector (its mask's set bits)."""
    return _BITS.to(vec_mask.device)[vec_mask.long()]


def pattern_nnz(vec_mask: torch.Tensor) -> int:
    """Nonzeros of the pattern whose vectors' row masks are ``vec_mask`` (uint8 [n_vectors])."""
    hit = _NNZ.get(vec_mask)
    if hit is None:
        hit = _NNZ.set(vec_mask, int(vector_nnz(vec_mask).sum()))
    return hit
