"""Magnitude pruning of dense weights into V x 1 vectors (the pattern of ``nn.SparseLinear``).

A weight W [out, in] is cut into vectors of ``vector`` consecutive output rows in one input
column: vector (s, j) holds W[s V : s V + V, j], the last strip shorter when out is not a
multiple of V. Pruning keeps the vectors of largest L2 norm and zeroes the others as a whole,
so that what is left is exactly a CVSE pattern of full vectors along the output dimension.
"""

from __future__ import annotations

import numbers

import torch


def check_sparsity(sparsity) -> float:
    """``sparsity`` as a float, after checking that it is a number in [0, 1]."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Real):
        raise TypeError(f"sparsity must be a number in [0, 1], got {type(sparsity).__name__}")
    sparsity = float(sparsity)
    if not 0.0 <= sparsity <= 1.0:  # also refuses NaN
        raise ValueError(f"sparsity must be in [0, 1], got {sparsity}")
    return sparsity


def check_vector(vector) -> int:
    """``vector`` as an int, after checking that it is a positive integer."""
    if isinstance(vector, bool) or not isinstance(vector, numbers.Integral) or vector < 1:
        raise ValueError(f"vector must be a positive integer, got {vector!r}")
    return int(vector)


def pruned_vectors(n_vectors: int, sparsity: float) -> int:
    """How many of ``n_vectors`` vectors pruning at ``sparsity`` zeroes: sparsity * n_vectors
    rounded to the nearest integer, halves up."""
    return min(n_vectors, int(check_sparsity(sparsity) * n_vectors + 0.5))


def vector_norms(weight: torch.Tensor, vector: int) -> torch.Tensor:
    """L2 norms of the V x 1 vectors of ``weight`` [out, in], float64 [ceil(out / V), in]; a
    short last strip's vectors are normed over the rows they have."""
    out_features, in_features = weight.shape
    strips = -(-out_features // vector)
    padded = weight.new_zeros((strips * vector, in_features), dtype=torch.float64)
    padded[:out_features] = weight.detach()
    return padded.square().view(strips, vector, in_features).sum(1).sqrt()


def magnitude(weight: torch.Tensor, sparsity: float, vector: int = 8) -> torch.Tensor:
    """The mask of W's vectors kept by magnitude pruning: bool [out, in], True on kept entries.

    weight: floating-point tensor [out, in] (finite); sparsity: the fraction of the
    ceil(out / V) * in vectors to zero, in [0, 1] (rounded as ``pruned_vectors`` says);
    vector: V >= 1, the output rows of a vector. The vectors of largest L2 norm are kept; among
    equal norms the vector that comes first in (strip, input column) order is kept first, so
    the mask depends on the values alone.
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if not weight.is_floating_point():
        raise ValueError(f"weight must be floating point, got {weight.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    sparsity = check_sparsity(sparsity)
    vector = check_vector(vector)
    if not bool(torch.isfinite(weight).all()):
        raise ValueError("weight must be finite to be pruned by magnitude")
    out_features, in_features = weight.shape
    norms = vector_norms(weight, vector).flatten()
    keep = norms.numel() - pruned_vectors(norms.numel(), sparsity)
    # a stable sort keeps equal norms in (strip, column) order
    order = torch.sort(norms, descending=True, stable=True).indices
    kept = torch.zeros(norms.numel(), dtype=torch.bool, device=weight.device)
    kept[order[:keep]] = True
    strips = -(-out_features // vector)
    mask = kept.view(strips, 1, in_features).expand(strips, vector, in_features)
    return mask.reshape(strips * vector, in_features)[:out_features].clone()


__all__ = ["magnitude", "pruned_vectors", "vector_norms", "check_sparsity", "check_vector"]
