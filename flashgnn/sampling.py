"""Neighbour sampling for mini-batch training: the blocks of a batch of seed nodes, as DGL's
``NeighborSampler`` makes them, built as bipartite flashgnn Graphs on the graph's device with
vectorised torch and ``flashgnn.ops.sample_in_edges`` (no loop over nodes; two host
synchronisations per hop, to size tensors, and one for the seed checks)."""

from __future__ import annotations

import torch

from .graph import Graph
from .ops.sampling import sample_in_edges


class NeighborSampler:
    """``NeighborSampler(graph, fanouts).sample(seeds)`` -> (input_nodes, blocks).

    graph: a square Graph (a node's in-edges are its CSR row); fanouts: the in-edges kept per
    destination for each graph layer, the layer nearest the input first (DGL's order), -1 for
    all of them. Each hop keeps for every destination a uniform random subset of
    min(fanout, in-degree) of its in-edges, without replacement. A block's sources are its
    destinations first (so ``feat[:num_dst]`` are theirs, DGL's block convention), then the
    new neighbours in increasing id order; its edges keep the graph's weights.

    Returns input_nodes, int64 [N_in], the global ids of blocks[0]'s sources, and blocks, one
    Graph per layer: blocks[i] has blocks[i + 1]'s sources as destinations, blocks[-1] the
    seeds. ``generator`` (on the graph's device) makes a sample reproducible. A sampler keeps
    node-sized scratch tensors between calls: use one per thread.
    """

    def __init__(self, graph: Graph, fanouts):
        if not isinstance(graph, Graph) or graph.is_bipartite:
            raise ValueError("NeighborSampler needs a square flashgnn.Graph")
        fanouts = list(fanouts)
        if not fanouts or any(
            isinstance(f, bool) or not isinstance(f, int) or (f < 1 and f != -1) for f in fanouts
        ):
            raise ValueError(
                f"fanouts must be a non-empty list of integers >= 1 or -1 (all), got {fanouts}"
            )
        self.graph = graph
        self.fanouts = fanouts
        self._local = None  # int64 [num_nodes] of -1: global id -> id in the block being built
        self._new = None  # bool [num_nodes + 1], False: marks a hop's new sources (the last: none)

    def sample(self, seeds: torch.Tensor, generator: torch.Generator | None = None):
        g = self.graph
        if (
            not isinstance(seeds, torch.Tensor)
            or seeds.dim() != 1
            or seeds.is_floating_point()
            or seeds.dtype == torch.bool
        ):
            raise TypeError(f"seeds must be a 1-D integer tensor of node ids, got {seeds!r}")
        if seeds.device != g.device:
            raise ValueError(f"seeds are on {seeds.device} but the graph is on {g.device}")
        seeds = seeds.to(torch.int64)
        if seeds.numel():
            ordered = torch.sort(seeds).values
            lo, hi, repeated = torch.stack(
                [ordered[0], ordered[-1], (ordered[1:] == ordered[:-1]).any()]
            ).tolist()
            if lo < 0 or hi >= g.num_nodes:
                pos = int(((seeds < 0) | (seeds >= g.num_nodes)).nonzero()[0, 0])
                raise ValueError(
                    f"seed id {int(seeds[pos])} (position {pos}) is out of range for "
                    f"{g.num_nodes} nodes"
                )
            if repeated:
                raise ValueError("seeds must be distinct node ids")
        if self._local is None:
            self._local = torch.full((g.num_nodes,), -1, dtype=torch.int64, device=g.device)
            self._new = torch.zeros(g.num_nodes + 1, dtype=torch.bool, device=g.device)
        blocks, nodes = [], seeds
        for fanout in reversed(self.fanouts):
            block, nodes = self._hop(nodes, fanout, generator)
            blocks.insert(0, block)
        return nodes, blocks

    def _hop(self, dst_nodes: torch.Tensor, fanout: int, generator) -> tuple[Graph, torch.Tensor]:
        """The block into ``dst_nodes`` and its source nodes (global ids)."""
        g, device, n_dst = self.graph, self.graph.device, dst_nodes.numel()
        start = g.indptr[dst_nodes]
        degree = g.indptr[dst_nodes + 1] - start
        kept = degree if fanout < 0 else degree.clamp(max=fanout)
        kept_end = torch.cumsum(kept, 0)
        total, n_kept, zero_in = torch.stack(
            [degree.sum(), kept.sum(), (degree == 0).any()]
        ).tolist()
        row, pos = sample_in_edges(
            g.indptr, dst_nodes, start, degree, kept_end, total, n_kept, fanout, generator
        )
        src = g.indices[pos]
        local = self._local
        local[dst_nodes] = torch.arange(n_dst, device=device)
        # sources not among the destinations, in increasing id order (one read: their count);
        # index_fill_, not `t[i] = scalar`, which copies the scalar to the device synchronously
        flags = self._new
        flags.index_fill_(0, torch.where(local[src] < 0, src, g.num_nodes), True)
        new = torch.nonzero(flags[:-1]).flatten()
        flags.index_fill_(0, new, False)[-1:].fill_(False)
        n_src = n_dst + new.numel()
        local[new] = torch.arange(n_dst, n_src, device=device)
        src_local = local[src]
        local.index_fill_(0, dst_nodes, -1).index_fill_(0, new, -1)
        # rows are grouped already: one sort by (row, source) makes the CSR canonical; distinct
        # CSR positions of one row are distinct sources, so there is nothing more to check
        key, order = torch.sort(row * max(n_src, 1) + src_local)
        weight = None if g.edge_weight is None else g.edge_weight[g.edge_ids[pos]]
        indptr = torch.nn.functional.pad(kept_end, (1, 0))
        block = Graph._from_canonical(
            indptr, src_local[order], (n_src, n_dst), order, weight, bool(zero_in)
        )
        return block, torch.cat([dst_nodes, new])
