"""A mini-batch training step on sampled blocks: flashgnn's GCN against the same GCN written
with torch.sparse (cuSPARSE CSR SpMM), on the same NeighborSampler blocks.

Graph: the generated ogbn-products-scale graph (2.4M nodes, 60M nonzeros, self-loops added) or
a shared graph; 3 GCN layers (in 100 -> 256 -> 256 -> 47, norm "both", DGL's block
normalisation), batches of 1024 random seeds, fanouts 10, 10, 10. One step: sample the blocks,
forward, cross-entropy on the seeds, backward, Adam. Rows, median ms over ``--steps`` steps
(synchronised): flashgnn fp32 and fp16 (autocast) on new blocks (every format, segment table
and normalisation built in the step), flashgnn fp16 on blocks sampled and prepared once, and
torch.sparse fp32 (a CSR of the normalised block built every step); the sampling alone.

    python benchmarks/minibatch_step.py [--graph powerlaw_products] [--steps 30]
"""

import argparse
import itertools
import warnings

import common  # noqa: F401  (puts the checkout on sys.path)
import torch
import torch.nn.functional as F

from flashgnn.benchmarking.graphs import DEFAULT_CACHE_DIR, data_dir, load_graph
from flashgnn.benchmarking.timing import wall_median_ms
from flashgnn.graph import Graph
from flashgnn.models import GCN
from flashgnn.sampling import NeighborSampler
from flashgnn.training.loop import make_optimizer
from flashgnn.training.precision import grad_scaler, precision_scope

FEATURES, HIDDEN, CLASSES, FANOUTS, BATCH = 100, 256, 47, [10, 10, 10], 1024


class SparseGCN(torch.nn.Module):
    """The same layers as flashgnn's GCN (weights shared), aggregating with torch.sparse.mm."""

    def __init__(self, gcn: GCN):
        super().__init__()
        self.gcn = gcn

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.gcn.layers, blocks)):
            if i > 0:
                h = self.gcn.dropout(h)
            d_in = block.in_degrees().clamp(min=1).float().rsqrt()
            d_out = block.out_degrees().clamp(min=1).float().rsqrt()
            norm = d_in[block.dst_of_csr()] * d_out[block.indices]
            a = torch.sparse_csr_tensor(
                block.indptr, block.indices, norm, (block.num_dst_nodes, block.num_src_nodes)
            )
            h = torch.sparse.mm(a, h @ layer.weight) + layer.bias
            if layer.activation is not None:
                h = layer.activation(h)
        return h


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--graph", default="powerlaw_products")
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    device = torch.device("cuda")
    g = load_graph(args.graph, data_dir(), 1, DEFAULT_CACHE_DIR)
    graph = Graph(
        torch.from_numpy(g.indptr).to(device), torch.from_numpy(g.indices).to(device), g.num_nodes
    ).add_self_loops()
    del g
    gen = torch.Generator(device).manual_seed(0)
    x = torch.randn(graph.num_nodes, FEATURES, device=device, generator=gen)
    y = torch.randint(0, CLASSES, (graph.num_nodes,), device=device, generator=gen)
    sampler = NeighborSampler(graph, FANOUTS)
    batches = itertools.cycle(
        [
            torch.randperm(graph.num_nodes, device=device, generator=gen)[:BATCH]
            for _ in range(args.steps)
        ]
    )
    gcn = GCN(FEATURES, HIDDEN, CLASSES, num_layers=len(FANOUTS)).to(device)
    optimizer = make_optimizer(gcn.parameters(), 0.01, 0.0, device)

    def step(model, precision, blocks_of):
        scaler = grad_scaler(precision, device)

        def run():
            input_nodes, blocks = blocks_of()
            seeds = input_nodes[: blocks[-1].num_dst_nodes]  # a block's destinations come first
            optimizer.zero_grad(set_to_none=True)
            with precision_scope(precision, device):
                loss = F.cross_entropy(model(blocks, x[input_nodes]).float(), y[seeds])
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        return run

    def new():
        return sampler.sample(next(batches))

    prepared = itertools.cycle([new() for _ in range(5)])
    rows = [
        ("sampling alone", new),
        ("flashgnn fp32, new blocks", step(gcn, "fp32", new)),
        ("flashgnn fp16, new blocks", step(gcn, "fp16", new)),
        ("flashgnn fp16, prepared blocks", step(gcn, "fp16", lambda: next(prepared))),
        ("torch.sparse fp32, new blocks", step(SparseGCN(gcn), "fp32", new)),
    ]
    input_nodes, blocks = new()
    print(
        f"{args.graph}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges; blocks (src -> "
        f"dst, edges): "
        + ", ".join(f"{b.num_src_nodes:,} -> {b.num_dst_nodes:,} ({b.num_edges:,})" for b in blocks)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.sparse's beta warnings
        for name, fn in rows:
            fn()  # warm-up (kernels, cuSPARSE handles)
            print(f"{name:34s} {wall_median_ms(fn, args.steps, device):8.2f} ms", flush=True)


if __name__ == "__main__":
    main()
