"""PyG models with flashgnn's layers: models of PyG's examples (the GCN of Kipf & Welling; with
--models, also GAT and AGNN) trained with ``torch_geometric.nn``, then built with ``from
flashgnn.nn import pyg as gnn`` instead, with test accuracy and time per epoch side by side.
PyG runs in its fastest settings: GCNConv(cached=True) fed the edge_index and fed a
torch.sparse CSR adj_t (aggregation by cuSPARSE); GATConv and AGNNConv, which compute one
message per edge, fed the edge_index. flashgnn's layers are fed the edge_index, in every
--precision.

python examples/pyg_drop_in.py                      # cuda when there is one, else cpu
python examples/pyg_drop_in.py --models gcn,gat,agnn --precision fp32,fp16 --dataset citeseer
python examples/pyg_drop_in.py --results benchmarks/results   # and <gpu>/pyg-drop-in.csv
python examples/pyg_drop_in.py --device cpu --epochs 2 --precision fp16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import flashgnn
from flashgnn.benchmarking import drop_in, table
from flashgnn.benchmarking.environment import environment
from flashgnn.benchmarking.errors import describe_error
from flashgnn.benchmarking.options import comma_list
from flashgnn.benchmarking.results import device_name, result_path
from flashgnn.benchmarking.timing import Timer
from flashgnn.data import load_dataset
from flashgnn.precision_context import PRECISIONS
from flashgnn.pyg_twin import pyg_adjacency


class GCN(torch.nn.Module):
    """dropout -> conv(in, 16) -> relu -> dropout -> conv(16, classes), PyG's example model;
    ``gnn`` is the module the layers come from (torch_geometric.nn or flashgnn.nn.pyg)."""

    def __init__(self, gnn, in_channels: int, classes: int):
        super().__init__()
        self.conv1 = gnn.GCNConv(in_channels, 16, cached=True)
        self.conv2 = gnn.GCNConv(16, classes, cached=True)

    def forward(self, x: torch.Tensor, edge_index) -> torch.Tensor:
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


class GAT(torch.nn.Module):
    """dropout -> 8 heads of 8 -> ELU -> dropout -> 1 head of the classes, attention dropout
    0.6: PyG's GAT example."""

    def __init__(self, gnn, in_channels: int, classes: int):
        super().__init__()
        self.conv1 = gnn.GATConv(in_channels, 8, heads=8, dropout=0.6)
        self.conv2 = gnn.GATConv(8 * 8, classes, heads=1, concat=False, dropout=0.6)

    def forward(self, x: torch.Tensor, edge_index) -> torch.Tensor:
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.6, training=self.training)
        return self.conv2(x, edge_index)


class AGNN(torch.nn.Module):
    """dropout -> Linear(in, 16) -> relu -> AGNNConv (beta fixed) -> AGNNConv -> dropout ->
    Linear(16, classes): PyG's AGNN example."""

    def __init__(self, gnn, in_channels: int, classes: int):
        super().__init__()
        self.lin1 = torch.nn.Linear(in_channels, 16)
        self.prop1 = gnn.AGNNConv(requires_grad=False)
        self.prop2 = gnn.AGNNConv(requires_grad=True)
        self.lin2 = torch.nn.Linear(16, classes)

    def forward(self, x: torch.Tensor, edge_index) -> torch.Tensor:
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.lin1(x))
        x = self.prop2(self.prop1(x, edge_index), edge_index)
        x = F.dropout(x, p=0.5, training=self.training)
        return self.lin2(x)


MODELS = {"gcn": GCN, "gat": GAT, "agnn": AGNN}
LEARNING_RATES = {"gcn": 0.01, "gat": 0.005, "agnn": 0.01}
PYG_INPUTS = {"gcn": ("edge_index", "adj_t"), "gat": ("edge_index",), "agnn": ("edge_index",)}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(name: str, gnn, data, adj, epochs: int, device: torch.device) -> tuple[float, float]:
    """(test accuracy, median seconds of a training epoch after the first) of a fresh model
    ``name`` built from ``gnn`` and fed ``adj`` (an edge_index or an adj_t)."""
    x, y, train_mask, test_mask = data
    torch.manual_seed(0)
    model = MODELS[name](gnn, x.shape[1], int(y.max()) + 1).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATES[name], weight_decay=5e-4)
    times = []
    for _ in range(epochs):
        synchronize(device)
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x, adj)[train_mask], y[train_mask])
        loss.backward()
        optimizer.step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    model.eval()
    with torch.no_grad():
        predicted = model(x, adj).argmax(dim=1)
    accuracy = float((predicted[test_mask] == y[test_mask]).float().mean())
    steady = times[1:] or times  # the first epoch builds formats and compiles kernels
    return accuracy, statistics.median(steady)


def runs(models: list[str], precisions: list[str]) -> list[tuple[str, str, str, str]]:
    """(model, layers, input, precision) of every row: PyG's inputs in fp32, then flashgnn's
    edge_index in each precision."""
    out = []
    for name in models:
        out += [(name, drop_in.PYG, adj, "fp32") for adj in PYG_INPUTS[name]]
        out += [(name, drop_in.FLASHGNN, "edge_index", p) for p in precisions]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--precision", default="fp32", help="comma list of flashgnn's precisions")
    parser.add_argument("--models", default="gcn", help="comma list of gcn, gat, agnn")
    parser.add_argument("--dataset", default="cora", help="a dataset with features and a split")
    parser.add_argument("--root", default=None, help="datasets folder (default: FLASHGNN_DATA)")
    parser.add_argument(
        "--results", default=None, help="also write RESULTS/<gpu>/pyg-drop-in.csv and its stamp"
    )
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    try:
        precisions = comma_list(args.precision, PRECISIONS, "precision")
        models = comma_list(args.models, tuple(MODELS), "models")
    except ValueError as e:
        parser.error(str(e))
    import torch_geometric.nn as pyg_gnn

    from flashgnn.nn import pyg as flashgnn_gnn

    device = torch.device(args.device)
    dataset = load_dataset(args.dataset, args.root, normalize_features=True)
    graph = dataset.graph.to(device)
    inputs = {"edge_index": graph.edge_index, "adj_t": pyg_adjacency(graph, "adj_t")}
    data = tuple(
        t.to(device) for t in (dataset.x.float(), dataset.y, dataset.train_mask, dataset.test_mask)
    )
    gnn = {drop_in.PYG: pyg_gnn, drop_in.FLASHGNN: flashgnn_gnn}
    rows = []
    for name, layers, adj, precision in runs(models, precisions):
        row = drop_in.DropInRow(dataset.name, name.upper(), layers, adj, precision, args.epochs)
        try:
            with flashgnn.precision(precision):
                row.accuracy, seconds = train(
                    name, gnn[layers], data, inputs[adj], args.epochs, device
                )
            row.epoch_ms = 1e3 * seconds
        except Exception as e:  # noqa: BLE001 - a row that fails (out of memory) says why
            row.error = describe_error(e)
        rows.append(row)
    print(f"{dataset.name} on {device}, {args.epochs} epochs")
    print(table.text_table(*drop_in.summary(rows)))
    if args.results is not None:
        path = result_path(args.results, device_name(args.device), drop_in.BENCHMARK)
        table.write_csv(rows, path, environment(Timer(device)), drop_in.DropInRow)
        print(f"wrote {path}")
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
