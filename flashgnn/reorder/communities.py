"""Communities by label propagation, vectorised on any device."""

from __future__ import annotations

import torch

from .undirected import csr_rows

# rounds at most (each moves half the nodes): more merge communities further without fewer
# ME-BCRS vectors (docs/TUNING.md)
COMMUNITY_ROUNDS = 20


def communities(
    indptr: torch.Tensor, indices: torch.Tensor, rounds: int = COMMUNITY_ROUNDS
) -> torch.Tensor:
    """Label propagation (Raghavan, Albert and Kumara) on a symmetric CSR (int64 [n + 1], [m]):
    int64 [n], each node's community, named by a node id. Every node starts alone; in a round
    each node counts its neighbours' labels and takes the most frequent, keeping its own on a
    tie and else taking the smallest tied label. Half the nodes (by a hash of the id) move in
    one round, the other half in the next: when all move at once, two groups can swap labels
    forever. Stops after two rounds without a move, or ``rounds``. Deterministic."""
    n = indptr.numel() - 1
    device = indptr.device
    ids = torch.arange(n, device=device)
    label = ids.clone()
    if indices.numel() == 0:
        return label
    rows = csr_rows(indptr, indices.numel())
    turn = (ids * 2654435761 >> 7) & 1
    idle = 0
    for round_ in range(rounds):
        keys, counts = torch.unique(rows * n + label[indices], return_counts=True)
        node = torch.div(keys, n, rounding_mode="floor")
        votes = keys - node * n
        most = torch.zeros(n, dtype=counts.dtype, device=device)
        most.scatter_reduce_(0, node, counts, "amax")
        tied = counts == most[node]
        stays = torch.zeros(n, dtype=torch.bool, device=device)
        stays[node[tied & (votes == label[node])]] = True
        smallest = torch.full_like(label, n)
        smallest.scatter_reduce_(0, node[tied], votes[tied], "amin")
        moving = ~stays & (smallest < n) & (turn == round_ % 2)
        if not bool(moving.any()):
            idle += 1
            if idle == 2:
                break
            continue
        idle = 0
        label = torch.where(moving, smallest, label)
    return label
