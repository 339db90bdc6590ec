"""Reordering: a renumbering of a graph's nodes and the maps between the user's node order and
the new one."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, eq=False)  # tensors: identity, not elementwise, equality
class Reordering:
    """A renumbering of ``n`` nodes.

    perm: int64 [n], the user's id of each new node (``perm[new] = old``).
    inverse: int64 [n], the new id of each user node (``inverse[old] = new``).
    method: the ordering method that produced it.

    Node tensors (features, labels, masks, outputs: [n, ...]) move between the orders with
    ``apply_to_nodes`` (user order -> new order) and ``restore`` (new order -> user order); node
    ids with ``new_ids``. Both maps are differentiable row gathers.
    """

    perm: torch.Tensor
    inverse: torch.Tensor
    method: str

    @classmethod
    def from_perm(cls, perm: torch.Tensor, method: str) -> Reordering:
        """The reordering whose new node i is user node ``perm[i]`` (int64 [n], a permutation
        of 0 .. n - 1: ValueError otherwise)."""
        if not isinstance(perm, torch.Tensor):
            raise TypeError(f"perm must be a torch.Tensor, got {type(perm).__name__}")
        if perm.dim() != 1 or perm.dtype != torch.int64:
            raise ValueError(f"perm must be int64 [n], got {perm.dtype} {tuple(perm.shape)}")
        n = perm.numel()
        inverse = torch.full_like(perm, -1)
        in_range = (perm >= 0) & (perm < n)
        if not bool(in_range.all()):
            raise ValueError(f"perm must be a permutation of 0..{n - 1}: it holds ids out of range")
        inverse[perm] = torch.arange(n, device=perm.device)
        if bool((inverse < 0).any()):
            raise ValueError(f"perm must be a permutation of 0..{n - 1}: it repeats ids")
        return cls(perm, inverse, method)

    @classmethod
    def identity(cls, n: int, device=None) -> Reordering:
        """The reordering that keeps every node's id (method "none")."""
        ids = torch.arange(n, device=device)
        return cls(ids, ids, "none")

    @property
    def num_nodes(self) -> int:
        return self.perm.numel()

    def to(self, device) -> Reordering:
        return Reordering(self.perm.to(device), self.inverse.to(device), self.method)

    def _rows(self, t: torch.Tensor, index: torch.Tensor, what: str) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what} takes a torch.Tensor, got {type(t).__name__}")
        if t.dim() == 0 or t.shape[0] != self.num_nodes:
            raise ValueError(
                f"{what} takes a tensor of one row per node ({self.num_nodes}), got shape "
                f"{tuple(t.shape)}"
            )
        return t.index_select(0, index.to(t.device))

    def apply_to_nodes(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` [n, ...] in the user's node order -> the same rows in the new order."""
        return self._rows(t, self.perm, "apply_to_nodes")

    def restore(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` [n, ...] in the new node order -> the same rows in the user's order."""
        return self._rows(t, self.inverse, "restore")

    def new_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """The new ids (int64, ``ids``' shape) of the user node ids ``ids``."""
        return self.inverse.to(ids.device)[ids]
