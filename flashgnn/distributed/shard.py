"""A rank's shard of a partitioned graph: its rows of A (the in-edges of its own nodes), cut
from the whole graph or given by a loader, and the local bipartite graph they make once the
remote sources are numbered after the own nodes (GCN splits it by source,
``aggregation.SplitRows``)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..graph import Graph


def rows_of_part(
    graph: Graph, old_of_new: Tensor, new_of_old: Tensor, lo: int, hi: int
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The rows of the nodes with new ids lo .. hi - 1 of ``graph`` (square), renumbered:
    (indptr int64 [hi - lo + 1], indices int64 [E] (new ids of the sources), the edge weights
    float [E] in that CSR order or None), on the CPU."""
    indptr, indices = graph.indptr.cpu(), graph.indices.cpu()
    rows = old_of_new[lo:hi].cpu()
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    local_ptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    total = int(local_ptr[-1])
    positions = torch.repeat_interleave(
        starts - local_ptr[:-1], counts, output_size=total
    ) + torch.arange(total)
    sources = new_of_old.cpu()[indices[positions]]
    weight = graph.edge_weight
    if weight is not None:
        weight = weight.detach().cpu()[graph.edge_ids.cpu()[positions]]
    return local_ptr, sources, weight


def add_row_self_loops(
    indptr: Tensor, indices: Tensor, weight: Tensor | None, first_id: int
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Rows of nodes first_id, first_id + 1, ... with a self-loop appended to every row that
    has none (weight 1), as ``Graph.add_self_loops`` gives the whole graph. Same layout as the
    input: indptr int64 [n + 1], indices int64 [E'] (global ids), weight [E'] or None."""
    n = indptr.numel() - 1
    counts = indptr[1:] - indptr[:-1]
    row = torch.repeat_interleave(torch.arange(n), counts, output_size=indices.numel())
    has_loop = torch.zeros(n, dtype=torch.bool)
    has_loop[row[indices == row + first_id]] = True
    missing = ~has_loop
    new_ptr = torch.cat([indptr.new_zeros(1), torch.cumsum(counts + missing, 0)])
    total = int(new_ptr[-1])
    old_pos = torch.arange(indices.numel()) - indptr[row] + new_ptr[row]
    loop_rows = missing.nonzero()[:, 0]
    loop_pos = new_ptr[loop_rows + 1] - 1
    new_indices = indices.new_empty(total)
    new_indices[old_pos] = indices
    new_indices[loop_pos] = loop_rows + first_id
    new_weight = None
    if weight is not None:
        new_weight = weight.new_empty(total)
        new_weight[old_pos] = weight
        new_weight[loop_pos] = 1.0
    return new_ptr, new_indices, new_weight


def local_graph(
    indptr: Tensor, indices: Tensor, weight: Tensor | None, lo: int, hi: int, device
) -> tuple[Graph, Tensor]:
    """(the local graph, halo ids) of the rows of own nodes lo .. hi - 1 (indptr int64
    [hi - lo + 1], indices int64 [E] global source ids, weight [E] or None, in CSR order).

    The local graph is bipartite on ``device``: destinations are the own nodes (local id =
    global - lo), sources the own nodes then the halo, the remote sources in increasing global
    id (int64 [H], on ``device``); its edge ids are the given CSR positions."""
    num_own = hi - lo
    indptr, indices = indptr.to(device), indices.to(device)
    own = (indices >= lo) & (indices < hi)
    halo_ids = torch.unique(indices[~own])
    local_src = torch.where(own, indices - lo, num_own + torch.searchsorted(halo_ids, indices))
    graph = Graph.from_csr(
        indptr,
        local_src,
        (num_own + halo_ids.numel(), num_own),
        None if weight is None else weight.to(device),
    )
    return graph, halo_ids
