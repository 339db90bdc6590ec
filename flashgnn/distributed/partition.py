"""Node partitions for full-graph training across processes, and the renumbering that makes
each part a contiguous range of node ids."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..graph import Graph

METHODS = ("metis", "contiguous", "degree", "label-propagation")
# label-propagation rounds (each moves the nodes that gain most): on a planted partition of
# shuffled ids the cut falls slowly for 20 rounds, then to the planted one by 40
PROPAGATION_ROUNDS = 40
PROPAGATION_SLACK = 0.05  # a part may hold this fraction more or fewer nodes than n / parts


def partition_nodes(
    graph: Graph, parts: int, method: str = "metis", seed: int = 0, device=None
) -> torch.Tensor:
    """The part of every node, int64 [num_nodes] on the CPU, values in [0, parts).

    ``method``: "metis" minimises the edge cut with METIS (``pymetis``, the ``distributed``
    extra) on the undirected graph without self-loops, seeded by ``seed``; "contiguous" splits
    the ids into ``parts`` ranges of equal node counts (within one); "degree" splits them into
    ranges of about equal in-edge counts (each part keeps at least one node);
    "label-propagation" starts from "contiguous" and moves nodes to the part most of their
    in-neighbours are in (``label_propagation``), on ``device`` (default: the graph's), for
    graphs too large for METIS or where pymetis is absent. Deterministic: the same graph and
    arguments give the same parts."""
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a flashgnn.Graph, got {type(graph).__name__}")
    n = graph.num_nodes  # a bipartite graph has no node set to partition: raises ValueError
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise ValueError(f"parts must be an integer >= 1, got {parts!r}")
    if parts > n:
        raise ValueError(f"cannot split {n} nodes into {parts} parts")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "metis":
        return _metis(graph, int(parts), seed)
    if method == "label-propagation":
        on = graph.indptr.device if device is None else torch.device(device)
        return label_propagation(graph.indptr.to(on), graph.indices.to(on), int(parts)).cpu()
    if method == "contiguous":
        weight = torch.ones(n, dtype=torch.int64)
    else:
        weight = graph.in_degrees().cpu()
    return _split_by_weight(weight, int(parts))


def _split_by_weight(weight: torch.Tensor, parts: int) -> torch.Tensor:
    """Parts of contiguous id ranges whose weights (int64 [n], >= 0) sum to about
    total / parts each: part p starts at the first node whose cumulative weight before it
    reaches p * total / parts, moved so that no part is empty."""
    n = weight.numel()
    before = torch.cumsum(weight, 0) - weight  # weight of the nodes before each node
    total = int(weight.sum())
    targets = torch.arange(parts, dtype=torch.float64) * (total / parts)
    starts = torch.searchsorted(before.to(torch.float64), targets).tolist()
    if total == 0:
        starts = [p * n // parts for p in range(parts)]
    starts[0] = 0
    for p in range(1, parts):  # at least one node per part, and room for the parts after
        starts[p] = min(max(starts[p], starts[p - 1] + 1), n - (parts - p))
    sizes = torch.tensor(starts[1:] + [n]) - torch.tensor(starts)
    return torch.repeat_interleave(torch.arange(parts), sizes)


def label_propagation(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    parts: int,
    rounds: int = PROPAGATION_ROUNDS,
    slack: float = PROPAGATION_SLACK,
) -> torch.Tensor:
    """Balanced label propagation on the CSR of A[dst, src] (indptr int64 [n + 1], indices
    [nnz], square): int64 [n] parts on indptr's device. From equal contiguous ranges, each
    round every node counts the parts of its in-neighbours (the sources its row reads) and
    asks for the most frequent one; the moves that gain most are made first, as many as keep
    every part within ``slack`` of n / parts (each move counted against both its parts' room,
    so no part leaves the bounds). A node keeps its part on a tie. Vectorised torch, no loop
    over nodes; deterministic."""
    n = indptr.numel() - 1
    device = indptr.device
    part = torch.div(torch.arange(n, device=device) * parts, max(n, 1), rounding_mode="floor")
    if parts == 1 or n == 0:
        return part
    rows = torch.repeat_interleave(
        torch.arange(n, device=device), indptr[1:] - indptr[:-1], output_size=indices.numel()
    )
    cols = indices.to(torch.int64)
    most = int(-(-(1 + slack) * n // parts))
    least = int((1 - slack) * n // parts)
    ids = torch.arange(n, device=device)
    # a node moves in every other round only (its id's hash picks which): when all nodes move
    # at once, a group that should join a part swaps with it instead
    turn = (ids * 2654435761 >> 7) & 1
    idle = 0  # consecutive rounds without a move: two end the propagation
    for round_ in range(rounds):
        if idle == 2:
            break
        counts = torch.zeros(n * parts, device=device)
        counts.index_add_(0, rows * parts + part[cols], torch.ones_like(cols, dtype=counts.dtype))
        counts = counts.view(n, parts)
        here = counts.gather(1, part[:, None]).squeeze(1)
        best = counts.argmax(1)
        gain = counts.gather(1, best[:, None]).squeeze(1) - here
        moving = torch.nonzero((gain > 0) & (turn == round_ % 2)).squeeze(1)
        if moving.numel() == 0:
            idle += 1
            continue
        # the largest gains first, then the lowest ids: rank every move within its target part
        # and within its source part, and keep those both parts have room for
        key = gain[moving].to(torch.int64) * n + (n - 1 - ids[moving])  # counts are whole
        order = moving[torch.argsort(key, descending=True, stable=True)]
        sizes = torch.bincount(part, minlength=parts)
        keep = torch.ones(order.numel(), dtype=torch.bool, device=device)
        for side, room in ((best[order], most - sizes), (part[order], sizes - least)):
            ranked = torch.argsort(side, stable=True)  # by part, gain order kept within one
            first = torch.searchsorted(side[ranked], torch.arange(parts, device=device))
            rank = torch.empty_like(ranked)
            rank[ranked] = torch.arange(order.numel(), device=device) - first[side[ranked]]
            keep &= rank < room.clamp(min=0)[side]
        idle = 0 if keep.any() else idle + 1
        part[order[keep]] = best[order[keep]]
    return part


def _metis(graph: Graph, parts: int, seed: int) -> torch.Tensor:
    try:
        import pymetis
    except ImportError as e:
        raise ImportError(
            "partition method 'metis' needs pymetis: install the 'distributed' extra "
            "(pip install 'flashgnn[distributed]') or choose method 'contiguous' or 'degree'"
        ) from e
    if parts == 1:
        return torch.zeros(graph.num_nodes, dtype=torch.int64)
    n = graph.num_nodes
    a = sp.csr_matrix(
        (
            np.ones(graph.num_edges, dtype=np.int8),
            graph.indices.cpu().numpy(),
            graph.indptr.cpu().numpy(),
        ),
        shape=(n, n),
    )
    sym = (a + a.T).tocsr()
    sym.setdiag(0)
    sym.eliminate_zeros()
    options = pymetis.Options()
    options.seed = seed
    _, membership = pymetis.part_graph(parts, xadj=sym.indptr, adjncy=sym.indices, options=options)
    return torch.as_tensor(np.asarray(membership, dtype=np.int64))


def renumbering(part: torch.Tensor, parts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(new_of_old, old_of_new, part_ptr) for ``part`` (int64 [n], values in [0, parts)): the
    nodes of part p take the new ids part_ptr[p] .. part_ptr[p + 1] - 1, in their old order.
    new_of_old and old_of_new are inverse int64 [n] permutations; part_ptr int64 [parts + 1]."""
    part = torch.as_tensor(part)
    if part.dim() != 1 or part.dtype != torch.int64:
        raise ValueError(f"part must be int64 [num_nodes], got {part.dtype} {tuple(part.shape)}")
    if part.numel() and (int(part.min()) < 0 or int(part.max()) >= parts):
        raise ValueError(f"part holds values outside [0, {parts})")
    old_of_new = torch.sort(part, stable=True).indices
    new_of_old = torch.empty_like(old_of_new)
    new_of_old[old_of_new] = torch.arange(part.numel(), device=part.device)
    counts = torch.bincount(part, minlength=parts)
    part_ptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return new_of_old, old_of_new, part_ptr
