"""``flashgnn bench e2e``: end-to-end full-graph training epochs of GCN, AGNN and GAT, flashgnn
against the same models built from PyG layers, on the shared real graphs and on generated
graphs at ogbn-products and Reddit scale.

Models (``flashgnn.models.build_model``): GCN 2 layers, hidden 128; GCN 5 layers, hidden 128
(dropout 0.5); AGNN, linear -> 4 AGNNConv -> linear, hidden 32 (dropout 0.5); GAT 2 layers,
8 heads of 8 hidden features, 1 output head, dropout 0.6 on features and attention
(configs/gat-cora.yaml).
Graphs, self-loops added: every .npz graph of the datasets folder, with its own features
(as float32), labels and split (the first of ten standard splits) where the file has features
and labels; a graph without either gets seeded random N(0, 1) features of width 128, random
labels of 16 classes and a random 60/20/20 split (an epoch's time does not depend on their
values). Generated, by ``flashgnn.data``'s synthetic SBM as ``bench training`` builds it:
synthetic_products (2,449,029 nodes, average degree 25: about 61M nonzeros, 100 features,
47 classes) and synthetic_reddit (232,965 nodes, 570 edge ends per node drawn: about 115M
nonzeros once repeated pairs are merged, 602 features, 41 classes). --quick divides their
nodes by 16 (same degrees drawn).
Implementations ("impl"): flashgnn in every --precisions (its GCNConv, AGNNConv and GATConv
layers replaying their kernels from CUDA graphs on graphs of up to 4M nonzeros, their
default: ``ops.replay``; on such a graph "flashgnn eager" rows time the same model with that
replay off); the PyG twin (``flashgnn.pyg_twin``:
the model with its GCNConv, AGNNConv, GATConv replaced by PyG's with the same initial weights)
in fp32 and in fp16 (``torch.autocast`` on CUDA, with loss scaling), fed:
  PyG adj_t:       GCN only, the torch.sparse GCN: GCNConv(cached=True) on a torch.sparse CSR
                   adj_t, i.e. aggregation by torch.sparse.mm (cuSPARSE) on the normalised
                   adjacency, normalised once and cached.
  PyG edge_index:  gather / scatter message passing on an edge_index (every model).
One epoch, as ``bench training`` times it: zero_grad, forward on the whole graph under the
training code's precision scope, loss on the training nodes, backward, Adam step.
Columns: ms: median epoch after warm-up epochs (``timing.Timer``). prep ms: building the
implementation's input once per graph (flashgnn: ME-BCRS of A and A^T on the device; PyG:
its adj_t or edge_index); the normalisation both cache happens in the first warm-up epoch.
ms + prep/200: the epoch with the preprocessing amortised over a 200-epoch run. x PyG fp32 /
x PyG fp16: the fastest PyG fp32 / fp16 epoch of the (graph, model) / ms. peak MB: device
memory allocated at the peak of the timed epochs beyond the dataset (model, optimizer state,
adjacency or format, activations). A failing configuration (out of memory on the largest
graphs, say) records its error in its row and the run goes on. With --cuda-graph every epoch
is also captured in a CUDA graph and its replay timed (graph ms, graph x PyG fp32 against the
fastest PyG fp32 epoch, eager or replayed; PyG's adj_t path cannot be captured).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..data import Dataset
from ..data.dataset import graph_from_csr, random_split
from ..data.npz import load_npz
from ..data.synthetic import load_synthetic
from .errors import describe_error
from .graphs import data_dir, load_graph, resolve_names
from .layers import ModelRow, add_common_arguments, pyg_runs, report, set_speedups, setup
from .options import QUICK_SCALE, comma_list
from .timing import free_device_memory, timed_call
from .training import SYNTHETIC, bench_model, on_device

GENERATED = {
    "synthetic_products": SYNTHETIC,
    "synthetic_reddit": dict(
        num_nodes=232_965,
        avg_degree=570.0,
        num_classes=41,
        num_features=602,
        homophily=0.7,
        feature_signal=0.1,
    ),
}
GCN_PATHS, OTHER_PATHS = ("adj_t", "edge_index"), ("edge_index",)
MODELS = {  # name: (build_model's name, its keyword arguments, PyG inputs, label)
    "gcn2": ("gcn", dict(hidden_feats=128, num_layers=2, dropout=0.5), GCN_PATHS, "GCN 2x128"),
    "gcn5": ("gcn", dict(hidden_feats=128, num_layers=5, dropout=0.5), GCN_PATHS, "GCN 5x128"),
    "agnn": ("agnn", dict(hidden_feats=32, num_layers=4, dropout=0.5), OTHER_PATHS, "AGNN 4x32"),
    "gat": (
        "gat",
        dict(hidden_feats=8, heads=8, out_heads=1, num_layers=2, feat_drop=0.6, attn_drop=0.6),
        OTHER_PATHS,
        "GAT 2x8 (8 heads)",
    ),
}
RANDOM_FEATURES, RANDOM_CLASSES = 128, 16
AMORTIZED_EPOCHS = 200


def add_arguments(p) -> None:
    p.add_argument(
        "--graphs",
        default="all",
        help=f"comma list of graph names, or real, generated ({', '.join(GENERATED)}), all "
        f"(default all)",
    )
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    add_common_arguments(p)
    p.add_argument(
        "--data",
        default=None,
        help="datasets folder (default $FLASHGNN_DATA or ../shared/datasets)",
    )


def load_data(name: str, root: Path | None, quick: bool, seed: int) -> tuple[str, Dataset, str]:
    """(label, dataset on the CPU, where its features come from) of graph ``name``."""
    if name in GENERATED:
        params = dict(GENERATED[name], seed=seed)
        if quick:
            params["num_nodes"] //= QUICK_SCALE
        data, seconds = timed_call(lambda: load_synthetic(**params, progress=False))
        label = f"{name}/{QUICK_SCALE}" if quick else name
        return label, data, f"generated in {seconds:.1f} s"
    with np.load(root / f"{name}.npz") as d:
        keys = set(d.files)
    if keys & {"x", "x_indptr"} and keys & {"y", "y_multi"}:
        return name, load_npz(name, root), "its own features and labels"
    return name, random_node_data(name, root, seed), "random features and labels"


def random_node_data(name: str, root: Path, seed: int) -> Dataset:
    """Graph ``name`` with seeded random features float32 [N, 128] ~ N(0, 1), labels int64 [N]
    in [0, 16) and a random 60/20/20 split."""
    g = load_graph(name, root)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(g.num_nodes, RANDOM_FEATURES, generator=gen)
    y = torch.randint(0, RANDOM_CLASSES, (g.num_nodes,), generator=gen)
    masks = random_split(np.arange(g.num_nodes), g.num_nodes, (0.6, 0.2), seed)
    graph = graph_from_csr(g.indptr, g.indices, g.num_nodes)
    return Dataset.single_label(name, graph, x, y, masks, RANDOM_CLASSES)


def run(args) -> int:
    from flashgnn.models import build_model

    context = setup(args, "e2e")
    if context is None:
        return 2
    device, timer, precisions, notes = context
    models = comma_list(args.models, list(MODELS), "models")
    root = data_dir(args.data)
    names = resolve_names(args.graphs, root, generated=tuple(GENERATED))
    with_pyg = pyg_runs(args, notes)
    rows: list[ModelRow] = []
    for name in names:
        try:
            label, data, origin = load_data(name, root, args.quick, args.seed)
            data = on_device(data, device)
        except Exception as e:  # noqa: BLE001 - recorded in the table instead
            rows.append(
                ModelRow(name, "", "flashgnn", "", error=f"loading the graph: {describe_error(e)}")
            )
            free_device_memory(device)
            continue
        notes.append(
            f"{label}: {data.num_nodes:,} nodes, {data.graph.num_edges:,} nonzeros with "
            f"self-loops, "
            f"{data.num_features} features, {data.num_classes} classes ({origin})"
        )
        print(f"== {notes[-1]}", flush=True)
        for key in models:
            arch, kwargs, pyg_paths, described = MODELS[key]
            torch.manual_seed(args.seed)
            model = build_model(arch, data.num_features, data.num_classes, **kwargs).to(device)
            rows += bench_model(
                label,
                described,
                model,
                pyg_paths,
                data,
                timer,
                precisions,
                with_pyg,
                args.cuda_graph and device.type == "cuda",
            )
            del model
        del data
        free_device_memory(device)
    set_speedups(rows)
    for r in rows:
        if r.ms is not None and r.prep_ms is not None:
            r.amortized_ms = r.ms + r.prep_ms / AMORTIZED_EPOCHS
    return report(
        rows,
        notes,
        args,
        "End-to-end training benchmark (full-graph epochs)",
        __doc__.split("\n\n", 1)[1],
        timer,
    )
