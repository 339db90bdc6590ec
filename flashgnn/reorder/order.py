"""The node orders a graph can be renumbered by, one entry point for every method."""

from __future__ import annotations

import torch

from .communities import communities
from .cuthill_mckee import cuthill_mckee
from .metis import metis_parts
from .undirected import undirected, within_groups

METHODS = ("none", "rcm", "degree", "community", "metis")


def check_method(method) -> str:
    """``method`` when it names an ordering; ValueError listing them otherwise."""
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"reorder method must be one of {METHODS}, got {method!r}")
    return method


def node_order(indptr: torch.Tensor, indices: torch.Tensor, method: str) -> torch.Tensor:
    """The new order of the nodes of a square CSR (indptr int64 [n + 1], indices [nnz]) by
    ``method``: int64 [n] on indptr's device, the old id of each new position. Every method
    reads the undirected pattern (A + A^T, no self-loops) and is deterministic:

    - "none": the identity.
    - "rcm": reverse Cuthill-McKee (``cuthill_mckee``): a breadth-first order from a
      peripheral node of each component, reversed.
    - "degree": by decreasing degree, ties by id: hubs, which most rows read, side by side.
    - "community": label-propagation communities (``communities``), then Cuthill-McKee within
      each community.
    - "metis": METIS parts of about ``metis.METIS_PART_NODES`` nodes (pymetis), then
      Cuthill-McKee within each part.
    """
    check_method(method)
    n = indptr.numel() - 1
    if method == "none":
        return torch.arange(n, device=indptr.device)
    sym_indptr, sym_indices = undirected(indptr, indices)
    if method == "rcm":
        return cuthill_mckee(sym_indptr, sym_indices).flip(0)
    if method == "degree":
        degree = sym_indptr[1:] - sym_indptr[:-1]
        return torch.sort(-degree, stable=True).indices
    group = (
        communities(sym_indptr, sym_indices)
        if method == "community"
        else metis_parts(sym_indptr, sym_indices)
    )
    return cuthill_mckee(*within_groups(sym_indptr, sym_indices, group), group)
