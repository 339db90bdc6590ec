"""Graph convolution's normalised edge values: each edge's weight scaled by the degrees of its
endpoints, placed in A's value layout. On CUDA (float32) one kernel (``kernels/gcn_norm.cu``),
since mini-batch training builds them for new blocks every step; elsewhere torch."""

from __future__ import annotations

import torch

from .._cuda.gcn_norm import gcn_values_cuda
from ..formats.mebcrs import MEBCRS

NORMS = ("both", "right", "left", "none")


def gcn_norm_factor(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    n_src: int,
    norm: str,
    dtype: torch.dtype,
    out_degree: torch.Tensor | None = None,
) -> torch.Tensor:
    """The degree normalisation of every CSR nonzero, [nnz] in ``dtype``: "both"
    1 / sqrt(d_in(row) d_out(col)), "right" 1 / d_in(row), "left" 1 / d_out(col), "none" 1, with
    the CSR's in-degrees of rows and out-degrees of its ``n_src`` columns, clamped to >= 1.
    indptr int64 [n_rows + 1], indices int64 [nnz] on one device. ``out_degree``: int64
    [n_src], the columns' out-degrees when the CSR holds only some of their edges (a rank's
    rows of a partitioned graph); None counts them in ``indices``."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating point torch.dtype, got {dtype!r}")
    nnz = indices.numel()
    power = -0.5 if norm == "both" else -1.0
    factors = []
    if norm in ("both", "right"):
        in_degree = indptr[1:] - indptr[:-1]
        rows = torch.arange(in_degree.numel(), device=indptr.device)
        row = torch.repeat_interleave(rows, in_degree, output_size=nnz)
        factors.append(in_degree.to(dtype).clamp_(min=1).pow_(power)[row])
    if norm in ("both", "left"):
        if out_degree is None:
            # index_add, unlike bincount, needs no host synchronisation
            out_degree = torch.zeros(n_src, dtype=torch.int64, device=indices.device)
            out_degree.index_add_(0, indices, torch.ones_like(indices))
        elif out_degree.shape != (n_src,):
            raise ValueError(
                f"out_degree must have shape ({n_src},), got {tuple(out_degree.shape)}"
            )
        factors.append(out_degree.to(dtype).clamp_(min=1).pow_(power)[indices])
    if not factors:
        return torch.ones(nnz, dtype=dtype, device=indices.device)
    return factors[0] if len(factors) == 1 else factors[0].mul_(factors[1])


def gcn_norm_values(
    a: MEBCRS,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    n_src: int,
    norm: str,
    dtype: torch.dtype = torch.float32,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """[8 * n_vectors] in ``dtype``: A's value layout holding, at the slot of each nonzero of
    the CSR (indptr, indices) that ``a`` was built from, ``gcn_norm_factor`` times ``weight``
    (``dtype`` [nnz] in CSR order, or None: 1); the other slots 0. ``norm``: one of NORMS."""
    if indices.is_cuda and dtype == torch.float32:  # else gcn_norm_factor checks dtype
        return gcn_values_cuda(indptr, indices, n_src, a.perm, a.n_slots, norm, weight)
    factor = gcn_norm_factor(indptr, indices, n_src, norm, dtype)
    return a.values_from_csr(factor if weight is None else factor * weight)
