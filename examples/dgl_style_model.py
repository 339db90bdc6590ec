"""Build GNNs the way DGL users do, `conv(graph, feat)`, with flashgnn layers.

The graph here is a small stand-in for a DGLGraph (flashgnn reads a graph only through
DGL's interface: `adj_tensors('csc')`, `num_src_nodes()`, ...), so a real `dgl.graph(...)`
can be passed in its place. Trains a 2-layer GCN and a 2-layer GAT for a few epochs on cora
from the shared datasets ($FLASHGNN_DATA, default ../shared/datasets), or on a random
graph when it is absent; then the GCN again on mini-batches of sampled blocks, as DGL's
`NeighborSampler` makes them (a real sampler's blocks can be passed in their place).

    python examples/dgl_style_model.py [--epochs 30] [--precision fp16]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout

import flashgnn  # noqa: E402
from flashgnn.nn import GATConv, GCNConv  # noqa: E402


class TinyDGLGraph:
    """Edges src[i] -> dst[i] with id i, exposed through the part of DGLGraph's API flashgnn
    reads; `adj_tensors('csc')` groups the in-edges of each node and gives their ids."""

    def __init__(
        self, src: torch.Tensor, dst: torch.Tensor, num_nodes: int, num_dst: int | None = None
    ):
        self.src, self.dst = src, dst
        self.n_src, self.n_dst = num_nodes, num_nodes if num_dst is None else num_dst
        self.device = src.device

    def adj_tensors(self, fmt: str):
        if fmt != "csc":
            raise NotImplementedError(fmt)
        dst, eids = torch.sort(self.dst, stable=True)
        indptr = torch.searchsorted(dst, torch.arange(self.n_dst + 1, device=self.device))
        return indptr, self.src[eids], eids

    def num_src_nodes(self):
        return self.n_src

    def num_dst_nodes(self):
        return self.n_dst

    def num_edges(self):
        return self.src.numel()

    def in_degrees(self):
        return torch.bincount(self.dst, minlength=self.n_dst)

    def out_degrees(self):
        return torch.bincount(self.src, minlength=self.n_src)


def sample_blocks(g: TinyDGLGraph, seeds: torch.Tensor, fanouts: list[int]):
    """(input node ids, blocks nearest the input first), as DGL's NeighborSampler returns them:
    each block keeps up to `fanout` random in-edges of its destinations, and its sources are its
    destinations first, then the new neighbours (so `feat[:num_dst]` are the destinations')."""
    blocks = []
    for fanout in reversed(fanouts):
        is_dst = torch.zeros(g.n_dst, dtype=torch.bool)
        is_dst[seeds] = True
        edges = is_dst[g.dst].nonzero()[:, 0]
        edges = edges[
            torch.randperm(edges.numel())
        ]  # keep a random `fanout` of each seed's in-edges
        rank = torch.zeros_like(edges)
        order = torch.sort(g.dst[edges], stable=True)
        starts = torch.searchsorted(order.values, order.values)
        rank[order.indices] = torch.arange(edges.numel()) - starts
        edges = edges[rank < fanout]
        local = torch.full((g.n_src,), -1, dtype=torch.int64)
        local[seeds] = torch.arange(seeds.numel())
        new = torch.unique(g.src[edges][local[g.src[edges]] < 0])
        local[new] = torch.arange(seeds.numel(), seeds.numel() + new.numel())
        blocks.insert(
            0,
            TinyDGLGraph(
                local[g.src[edges]], local[g.dst[edges]], seeds.numel() + new.numel(), seeds.numel()
            ),
        )
        seeds = torch.cat([seeds, new])
    return seeds, blocks


def add_self_loop(src, dst, n):
    """What dgl.add_self_loop does (the datasets here have no loops of their own)."""
    loops = torch.arange(n)
    return torch.cat([src, loops]), torch.cat([dst, loops])


class GCN(nn.Module):
    def __init__(self, in_feats, hidden, classes):
        super().__init__()
        self.conv1 = GCNConv(in_feats, hidden, activation=F.relu)
        self.conv2 = GCNConv(hidden, classes)
        self.dropout = nn.Dropout(0.5)

    def forward(self, g, feat):
        """g: one graph, or a list of two blocks (mini-batch training)."""
        g1, g2 = g if isinstance(g, list) else (g, g)
        return self.conv2(g2, self.dropout(self.conv1(g1, feat)))


class GAT(nn.Module):
    def __init__(self, in_feats, hidden, classes, heads=2):
        super().__init__()
        self.conv1 = GATConv(
            in_feats, hidden, heads, feat_drop=0.6, attn_drop=0.6, activation=F.elu
        )
        self.conv2 = GATConv(hidden * heads, classes, 1, feat_drop=0.6, attn_drop=0.6)

    def forward(self, g, feat):
        h = self.conv1(g, feat).flatten(1)  # concatenate the heads
        return self.conv2(g, h).mean(1)


def load_data():
    root = Path(
        os.environ.get("FLASHGNN_DATA")
        or Path(__file__).resolve().parents[2] / "shared" / "datasets"
    )
    path = root / "cora.npz"
    if path.is_file():
        with np.load(path) as d:
            n = int(d["num_nodes"])
            dst = np.repeat(np.arange(n), np.diff(d["indptr"]))  # symmetric: rows serve as dst
            src = d["indices"].astype(np.int64)
            return (
                "cora",
                torch.from_numpy(src),
                torch.from_numpy(dst),
                n,
                torch.from_numpy(d["x"].astype(np.float32)),
                torch.from_numpy(d["y"]),
                torch.from_numpy(d["train_mask"]),
                torch.from_numpy(d["test_mask"]),
            )
    gen = torch.Generator().manual_seed(0)
    n, classes = 500, 4
    y = torch.randint(0, classes, (n,), generator=gen)
    src, dst = torch.randint(0, n, (2, 6 * n), generator=gen)
    keep = (y[src] == y[dst]) & (src != dst)
    pairs = torch.unique(
        torch.cat([torch.stack([src[keep], dst[keep]]), torch.stack([dst[keep], src[keep]])], 1),
        dim=1,
    )
    x = torch.randn(n, 16, generator=gen) + torch.randn(classes, 16, generator=gen)[y] * 0.5
    train = torch.rand(n, generator=gen) < 0.3
    return "random", pairs[0], pairs[1], n, x, y, train, ~train


def train_step(model, opt, g, feat, rows, labels) -> torch.Tensor:
    """One optimiser step on the cross-entropy of ``model(g, feat)[rows]``; returns the loss."""
    model.train()
    opt.zero_grad()
    loss = F.cross_entropy(model(g, feat)[rows], labels)
    loss.backward()
    opt.step()
    return loss


def accuracy(model, g, x, y, mask) -> float:
    model.eval()
    with torch.no_grad():
        return (model(g, x).argmax(1)[mask] == y[mask]).float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--precision", default="fp32", choices=flashgnn.ops.PRECISIONS)
    args = parser.parse_args()
    torch.manual_seed(0)
    name, src, dst, n, x, y, train, test = load_data()
    g = TinyDGLGraph(*add_self_loop(src, dst, n), n)
    classes = int(y.max()) + 1
    print(
        f"{name}: {n} nodes, {g.num_edges()} edges with self-loops, {x.shape[1]} features, "
        f"{classes} classes"
    )
    for model in (GCN(x.shape[1], 16, classes), GAT(x.shape[1], 8, classes)):
        opt = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=5e-4)
        start = time.perf_counter()
        with flashgnn.precision(args.precision):  # the sparse ops of every layer
            for _ in range(args.epochs):
                loss = train_step(model, opt, g, x, train, y[train])
            acc = accuracy(model, g, x, y, test)
        print(
            f"{type(model).__name__} ({args.precision}): loss {loss.item():.3f}, test accuracy "
            f"{acc:.3f} "
            f"after {args.epochs} epochs, {time.perf_counter() - start:.1f} s"
        )

    # mini-batches: 2-hop blocks of up to 10 then 5 neighbours around 64 training nodes at a time
    model = GCN(x.shape[1], 16, classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=5e-4)
    start = time.perf_counter()
    with flashgnn.precision(args.precision):
        for _ in range(max(args.epochs // 5, 1)):
            for seeds in torch.split(train.nonzero()[:, 0][torch.randperm(int(train.sum()))], 64):
                input_nodes, blocks = sample_blocks(g, seeds, [10, 5])
                loss = train_step(model, opt, blocks, x[input_nodes], slice(None), y[seeds])
        acc = accuracy(model, g, x, y, test)
    print(
        f"GCN on sampled blocks ({args.precision}): loss {loss.item():.3f}, test accuracy "
        f"{acc:.3f} "
        f"(full-graph inference), {time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
