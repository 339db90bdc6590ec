"""Node partitions for full-graph training across processes, and the renumbering that makes
each part a contiguous range of node ids."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..graph import Graph

METHODS = ("metis", "contiguous", "degree")


def partition_nodes(graph: Graph, parts: int, method: str = "metis", seed: int = 0) -> torch.Tensor:
    """The part of every node, int64 [num_nodes] on the CPU, values in [0, parts).

    ``method``: "metis" minimises the edge cut with METIS (``pymetis``, the ``distributed``
    extra) on the undirected graph without self-loops, seeded by ``seed``; "contiguous" splits
    the ids into ``parts`` ranges of equal node counts (within one); "degree" splits them into
    ranges of about equal in-edge counts (each part keeps at least one node). Deterministic:
    the same graph and arguments give the same parts."""
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
