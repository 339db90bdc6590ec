"""A PyG model with flashgnn's layers: the two-layer GCN of Kipf & Welling on cora, trained
with ``torch_geometric.nn``, then the same model built with ``from flashgnn.nn import pyg as
gnn`` instead, with test accuracy and time per epoch side by side.

python examples/pyg_drop_in.py                      # cuda when there is one, else cpu
python examples/pyg_drop_in.py --device cpu --epochs 2 --precision fp16
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F

import flashgnn
from flashgnn.data import load_dataset
from flashgnn.precision_context import PRECISIONS


class GCN(torch.nn.Module):
    """conv(in, hidden) -> relu -> dropout -> conv(hidden, classes), PyG's tutorial model;
    ``gnn`` is the module the layers come from (torch_geometric.nn or flashgnn.nn.pyg)."""

    def __init__(self, gnn, in_channels: int, hidden: int, classes: int):
        super().__init__()
        self.conv1 = gnn.GCNConv(in_channels, hidden, cached=True)
        self.conv2 = gnn.GCNConv(hidden, classes, cached=True)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(gnn, data, epochs: int, device: torch.device) -> tuple[float, float]:
    """(test accuracy, mean seconds per training epoch after the first) of a fresh model."""
    x, edge_index, y, train_mask, test_mask = data
    torch.manual_seed(0)
    model = GCN(gnn, x.shape[1], 16, int(y.max()) + 1).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    times = []
    for _ in range(epochs):
        synchronize(device)
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x, edge_index)[train_mask], y[train_mask])
        loss.backward()
        optimizer.step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    model.eval()
    with torch.no_grad():
        predicted = model(x, edge_index).argmax(dim=1)
    accuracy = float((predicted[test_mask] == y[test_mask]).float().mean())
    steady = times[1:] or times  # the first epoch builds formats and compiles kernels
    return accuracy, sum(steady) / len(steady)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--root", default=None, help="datasets folder (default: FLASHGNN_DATA)")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    import torch_geometric.nn as pyg_gnn

    from flashgnn.nn import pyg as flashgnn_gnn

    device = torch.device(args.device)
    dataset = load_dataset("cora", args.root, normalize_features=True)
    data = (
        dataset.x.to(device),
        dataset.graph.edge_index.to(device),
        dataset.y.to(device),
        dataset.train_mask.to(device),
        dataset.test_mask.to(device),
    )
    print(f"cora on {device}, {args.epochs} epochs")
    print(f"{'layers':<22} {'test accuracy':>13} {'ms / epoch':>10}")
    for name, gnn in (("torch_geometric.nn", pyg_gnn), ("flashgnn.nn.pyg", flashgnn_gnn)):
        with flashgnn.precision(args.precision):
            accuracy, seconds = train(gnn, data, args.epochs, device)
        print(f"{name:<22} {accuracy:>13.3f} {seconds * 1e3:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
