"""Build GNNs the way DGL users do, `conv(graph, feat)`, with flashgnn layers.

The graph here is a small stand-in for a DGLGraph (flashgnn reads a graph only through
DGL's interface: `adj_tensors('csc')`, `num_src_nodes()`, ...), so a real `dgl.graph(...)`
can be passed in its place. Trains a 2-layer GCN and a 2-layer GAT for a few epochs on cora
from the shared datasets ($FLASHGNN_DATA, default ../shared/datasets), or on a random
graph when it is absent.

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

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_nodes: int):
        self.src, self.dst, self.n = src, dst, num_nodes
        self.device = src.device

    def adj_tensors(self, fmt: str):
        if fmt != "csc":
            raise NotImplementedError(fmt)
        eids = torch.sort(self.dst, stable=True).indices
        indptr = torch.zeros(self.n + 1, dtype=torch.int64)
        indptr[1:] = torch.cumsum(torch.bincount(self.dst, minlength=self.n), 0)
        return indptr, self.src[eids], eids

    def num_src_nodes(self):
        return self.n

    num_dst_nodes = num_src_nodes

    def num_edges(self):
        return self.src.numel()

    def in_degrees(self):
        return torch.bincount(self.dst, minlength=self.n)

    def out_degrees(self):
        return torch.bincount(self.src, minlength=self.n)


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
        return self.conv2(g, self.dropout(self.conv1(g, feat)))


class GAT(nn.Module):
    def __init__(self, in_feats, hidden, classes, heads=2):
        super().__init__()
        self.conv1 = GATConv(in_feats, hidden, heads, feat_drop=0.6, attn_drop=0.6, activation=F.elu)
        self.conv2 = GATConv(hidden * heads, classes, 1, feat_drop=0.6, attn_drop=0.6)

    def forward(self, g, feat):
        h = self.conv1(g, feat).flatten(1)  # concatenate the heads
        return self.conv2(g, h).mean(1)


def load_data():
    root = Path(os.environ.get("FLASHGNN_DATA") or Path(__file__).resolve().parents[2] / "shared" / "datasets")
    path = root / "cora.npz"
    if path.is_file():
        with np.load(path) as d:
            n = int(d["num_nodes"])
            dst = np.repeat(np.arange(n), np.diff(d["indptr"]))  # symmetric: rows serve as dst
            src = d["indices"].astype(np.int64)
            return ("cora", torch.from_numpy(src), torch.from_numpy(dst), n,
                    torch.from_numpy(d["x"].astype(np.float32)), torch.from_numpy(d["y"]),
                    torch.from_numpy(d["train_mask"]), torch.from_numpy(d["test_mask"]))
    gen = torch.Generator().manual_seed(0)
    n, classes = 500, 4
    y = torch.randint(0, classes, (n,), generator=gen)
    src, dst = torch.randint(0, n, (2, 6 * n), generator=gen)
    keep = (y[src] == y[dst]) & (src != dst)
    pairs = torch.unique(torch.cat([torch.stack([src[keep], dst[keep]]), torch.stack([dst[keep], src[keep]])], 1), dim=1)
    x = torch.randn(n, 16, generator=gen) + torch.randn(classes, 16, generator=gen)[y] * 0.5
    train = torch.rand(n, generator=gen) < 0.3
    return "random", pairs[0], pairs[1], n, x, y, train, ~train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--precision", default="fp32", choices=flashgnn.ops.PRECISIONS)
    args = parser.parse_args()
    torch.manual_seed(0)
    name, src, dst, n, x, y, train, test = load_data()
    g = TinyDGLGraph(*add_self_loop(src, dst, n), n)
    classes = int(y.max()) + 1
    print(f"{name}: {n} nodes, {g.num_edges()} edges with self-loops, {x.shape[1]} features, {classes} classes")
    for model in (GCN(x.shape[1], 16, classes), GAT(x.shape[1], 8, classes)):
        opt = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=5e-4)
        start = time.perf_counter()
        with flashgnn.precision(args.precision):  # the sparse ops of every layer
            for _ in range(args.epochs):
                model.train()
                opt.zero_grad()
                loss = F.cross_entropy(model(g, x)[train], y[train])
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                acc = (model(g, x).argmax(1)[test] == y[test]).float().mean().item()
        print(f"{type(model).__name__} ({args.precision}): loss {loss.item():.3f}, test accuracy {acc:.3f} "
              f"after {args.epochs} epochs, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
