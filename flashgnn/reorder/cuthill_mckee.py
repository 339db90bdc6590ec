"""Cuthill-McKee orders computed level by level, vectorised (no loop over nodes), on any device.

Sequential Cuthill-McKee visits the nodes breadth first from a root and appends the unvisited
neighbours of each visited node in increasing degree. A node of level L + 1 is appended while
the earliest-placed of its level-L neighbours is processed, so one level's order is the sort of
its nodes by (position of that first parent, degree, id): each level is one frontier
expansion and two stable sorts, and the loop runs once per level. Every component starts at a
pseudo-peripheral root (George and Liu's heuristic, one round: the least-degree node of the
last level of a search from the least-degree node), and the components follow one another.
Siblings, the children of one parent, get consecutive ids and share that parent as a column,
which is what lets 8 consecutive rows share column vectors.
"""

from __future__ import annotations

import torch

from .undirected import csr_rows


def components(indptr: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The connected components of a symmetric CSR (int64 [n + 1], [m]): int64 [n], each
    node's component named by its smallest node id. Hooking and pointer jumping (Shiloach and
    Vishkin): each round hooks the tree of every edge's end onto the smaller label, then flattens
    the trees, a few rounds for any diameter."""
    n = indptr.numel() - 1
    parent = torch.arange(n, device=indptr.device)
    rows = csr_rows(indptr, indices.numel())
    while True:
        # parent[x] <= x in the same component holds throughout: no cycle can form
        parent.scatter_reduce_(0, parent[rows], parent[indices], "amin")
        parent.scatter_reduce_(0, rows, parent[indices], "amin")
        while True:
            grand = parent[parent]
            if torch.equal(grand, parent):
                break
            parent = grand
        if bool((parent[rows] == parent[indices]).all()):
            return parent


def _levels(
    indptr: torch.Tensor, indices: torch.Tensor, degree: torch.Tensor, roots: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(level, rank), int64 [n] each, of the breadth-first search from ``roots`` (int64 [R],
    one per component, in the order the components take): a node's level is its distance
    from its root, its rank its position within its level in Cuthill-McKee order."""
    n = indptr.numel() - 1
    device = indptr.device
    level = torch.full((n,), -1, dtype=torch.int64, device=device)
    rank = torch.zeros(n, dtype=torch.int64, device=device)
    level[roots] = 0
    rank[roots] = torch.arange(roots.numel(), device=device)
    frontier, depth = roots, 0
    while frontier.numel():
        counts = degree[frontier]
        ends = torch.cumsum(counts, 0)
        total = int(ends[-1])
        if total == 0:
            break
        # every neighbour of the frontier, with the rank of the frontier node it came from
        parent = torch.repeat_interleave(
            torch.arange(frontier.numel(), device=device), counts, output_size=total
        )
        pos = (indptr[frontier] - ends + counts)[parent] + torch.arange(total, device=device)
        child = indices[pos]
        fresh = level[child] < 0
        child, parent = child[fresh], parent[fresh]
        if child.numel() == 0:
            break
        # each new node's first parent: the lowest rank among its frontier neighbours
        keys = torch.unique(child * frontier.numel() + parent)
        child = torch.div(keys, frontier.numel(), rounding_mode="floor")
        parent = keys - child * frontier.numel()
        first = torch.ones_like(child, dtype=torch.bool)
        first[1:] = child[1:] != child[:-1]
        child, parent = child[first], parent[first]  # by id
        by_degree = torch.sort(degree[child], stable=True).indices
        child, parent = child[by_degree], parent[by_degree]
        frontier = child[torch.sort(parent, stable=True).indices]
        depth += 1
        level[frontier] = depth
        rank[frontier] = torch.arange(frontier.numel(), device=device)
    return level, rank


def _least_degree(
    component: torch.Tensor, degree: torch.Tensor, among: torch.Tensor | None = None
) -> torch.Tensor:
    """int64 [n]: at each component's name (its smallest id), the node of least degree of the
    component (``among`` it, bool [n], when given), ties to the smaller id; elsewhere junk."""
    n = component.numel()
    ids = torch.arange(n, device=component.device)
    key = degree * n + ids
    if among is not None:
        key = torch.where(among, key, torch.iinfo(torch.int64).max)
    best = torch.full_like(key, torch.iinfo(torch.int64).max)
    best.scatter_reduce_(0, component, key, "amin")
    return best - torch.div(best, n, rounding_mode="floor") * n


def cuthill_mckee(
    indptr: torch.Tensor, indices: torch.Tensor, group: torch.Tensor | None = None
) -> torch.Tensor:
    """The Cuthill-McKee order of a symmetric CSR without self-loops (int64 [n + 1], [m]):
    int64 [n], the old id of each new position. Components come by ``group`` (int64 [n], a
    key per node, equal over a component; None: one group), then by smallest id; within one,
    by level, then Cuthill-McKee's order. Deterministic, and the same on every device."""
    n = indptr.numel() - 1
    device = indptr.device
    if n == 0:
        return torch.zeros(0, dtype=torch.int64, device=device)
    degree = indptr[1:] - indptr[:-1]
    component = components(indptr, indices)
    names = torch.nonzero(component == torch.arange(n, device=device)).flatten()
    if group is not None:
        names = names[torch.sort(group[names], stable=True).indices]
    start = _least_degree(component, degree)[names]
    level, _ = _levels(indptr, indices, degree, start)
    deepest = torch.full_like(level, -1).scatter_reduce_(0, component, level, "amax")
    roots = _least_degree(component, degree, level == deepest[component])[names]
    level, rank = _levels(indptr, indices, degree, roots)
    place = torch.empty_like(component)  # each component's position, at its name
    place[names] = torch.arange(names.numel(), device=device)
    order = torch.sort(rank, stable=True).indices
    order = order[torch.sort(level[order], stable=True).indices]
    return order[torch.sort(place[component[order]], stable=True).indices]
