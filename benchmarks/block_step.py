"""What a mini-batch step on DGL-style blocks costs: two GCNConv layers (128 -> 128, fp32) on
the 2-hop blocks of 1024 random seeds of a shared graph (the first ``fanout`` in-edges of each
destination plus its own edge, sources numbered destinations first, as DGL's samplers do),
forward + gradients, each block a new object as a sampler returns it every step.

Rows, median ms over 10 calls (synchronised): Graph.from_dgl on both blocks; that plus the
ME-BCRS of A and A^T; a whole step on new blocks (graph, formats, segments, normalisation and
the layers); a step on blocks already prepared; the same two layers as torch.sparse CSR
matmuls built from the blocks' edges every step. Then the number of host synchronisations in
one step on new blocks (torch.cuda.set_sync_debug_mode), by source line.

    python benchmarks/block_step.py [--graph musae_github] [--fanout 10]
"""

import argparse
import collections
import warnings

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

from examples.dgl_style_model import TinyDGLGraph
from flashgnn import nn as fnn
from flashgnn.benchmarking.graphs import data_dir, load_graph
from flashgnn.benchmarking.timing import wall_median_ms
from flashgnn.graph import Graph


def block_of(indptr, indices, seeds, fanout):
    """(the block of up to ``fanout`` in-edges of each seed plus its own edge, its source ids)."""
    n, device = indptr.numel() - 1, seeds.device
    take = (indptr[seeds + 1] - indptr[seeds]).clamp(max=fanout)
    dst = torch.repeat_interleave(torch.arange(seeds.numel(), device=device), take)
    offset = torch.arange(dst.numel(), device=device) - torch.repeat_interleave(
        torch.cumsum(take, 0) - take, take
    )
    src_global = indices[indptr[seeds][dst] + offset]
    local = torch.full((n,), -1, dtype=torch.int64, device=device)
    local[seeds] = torch.arange(seeds.numel(), device=device)
    new = torch.unique(src_global[local[src_global] < 0])
    local[new] = torch.arange(seeds.numel(), seeds.numel() + new.numel(), device=device)
    own = torch.arange(seeds.numel(), device=device)
    key = torch.unique(
        torch.cat([dst, own]) * n + torch.cat([local[src_global], own])
    )  # no duplicate edge
    return TinyDGLGraph(key % n, key // n, seeds.numel() + new.numel(), seeds.numel()), torch.cat(
        [seeds, new]
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--graph", default="musae_github")
    p.add_argument("--fanout", type=int, default=10)
    args = p.parse_args()
    device = torch.device("cuda")
    g = load_graph(args.graph, data_dir())
    indptr = torch.from_numpy(g.indptr).to(device)
    indices = torch.from_numpy(g.indices).to(device).long()
    seeds = torch.randperm(
        g.num_nodes, device=device, generator=torch.Generator(device).manual_seed(0)
    )[:1024]
    inner, mid = block_of(indptr, indices, seeds, args.fanout)
    outer, _ = block_of(indptr, indices, mid, args.fanout)
    blocks = [outer, inner]
    print(
        f"{args.graph}: blocks {outer.n_src} -> {outer.n_dst} ({outer.num_edges()} edges), "
        f"{inner.n_src} -> {inner.n_dst} ({inner.num_edges()} edges)"
    )
    layers = [fnn.GCNConv(128, 128).to(device) for _ in blocks]
    params = [p for layer in layers for p in layer.parameters()]
    x = torch.randn(outer.n_src, 128, device=device, requires_grad=True)

    def step(graphs):
        h = layers[1](graphs[1], layers[0](graphs[0], x))
        torch.autograd.grad(h.sum(), [x] + params)

    def fresh():  # new objects, as a sampler returns every step
        return [TinyDGLGraph(b.src.clone(), b.dst.clone(), b.n_src, b.n_dst) for b in blocks]

    def torch_sparse_step():
        h = x
        for b, layer in zip(blocks, layers):
            a = torch.sparse_coo_tensor(
                torch.stack([b.dst, b.src]),
                torch.ones(b.num_edges(), device=device),
                (b.n_dst, b.n_src),
            ).to_sparse_csr()
            h = torch.sparse.mm(a, h @ layer.weight) + layer.bias
        torch.autograd.grad(h.sum(), [x] + params)

    for _ in range(3):
        step(fresh())
    prepared = fresh()
    step(prepared)
    rows = [
        ("Graph.from_dgl, 2 blocks", lambda: [Graph.from_dgl(b) for b in fresh()]),
        ("+ ME-BCRS of A and A^T", lambda: [Graph.from_dgl(b).adj(8).transpose() for b in fresh()]),
        ("step on new blocks", lambda: step(fresh())),
        ("step on prepared blocks", lambda: step(prepared)),
        ("torch.sparse step (CSR built per step)", torch_sparse_step),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.sparse's beta warnings
        for name, fn in rows:
            print(f"{name:40s} {wall_median_ms(fn, 10, device):8.2f} ms")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new = fresh()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        step(new)
        torch.cuda.set_sync_debug_mode("default")
    where = collections.Counter(
        f"{w.filename.rsplit('/', 2)[-2]}/{w.filename.rsplit('/', 1)[-1]}:{w.lineno}"
        for w in caught
        if "synchroniz" in str(w.message)
    )
    print(f"host synchronisations in one step on new blocks: {sum(where.values())}")
    for line, count in where.most_common():
        print(f"  {count:3d}  {line}")


if __name__ == "__main__":
    main()
