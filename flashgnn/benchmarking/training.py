"""``flashgnn bench training``: epoch time and peak device memory of full-graph training,
flashgnn models against the same models built from PyG layers, on the synthetic dataset at
ogbn-products scale.

Dataset: ``flashgnn.data``'s synthetic graph with configs/*-synthetic-large.yaml's
parameters (2,449,029 nodes, average degree 25: about 61M nonzeros, 100 features,
47 classes, 60/20/20 split), self-loops added. Models (``flashgnn.models.build_model``):
GCN, 2 layers, hidden 128; AGNN, linear -> 4 AGNNConv -> linear, hidden 32; dropout 0.5.
The PyG model is the same model with its GCNConv / AGNNConv layers replaced by PyG's, with
the same initial weights (``flashgnn.pyg_twin``): GCNConv(cached=True, add_self_loops=False),
the setting of PyG's full-graph GCN example, fed the adjacency as a torch.sparse CSR adj_t
("PyG adj_t") or an edge_index ("PyG edge_index"); AGNNConv(add_self_loops=False) fed an
edge_index.
One epoch, as ``flashgnn train`` runs it: zero_grad, forward on the whole graph under the
training code's ``precision_scope``, cross-entropy on the training nodes, backward with
its ``grad_scaler`` (loss scaling for fp16), Adam step (lr 0.01, fused on CUDA); every run starts
from the same
weights. PyG runs under the same scope in fp32 and fp16 (autocast + loss scaling).
ms: median epoch time after warm-up epochs (``timing.Timer``). speedup = the fastest PyG
fp32 epoch of the model / epoch. peak MB: device memory allocated at the peak of the timed
epochs beyond the dataset (features, labels, graph CSR): model, optimizer state, adjacency
or format, activations. prep ms: building the format (flashgnn: ME-BCRS of A and A^T) or
PyG's input tensor. On a graph where the layers replay their kernels from CUDA graphs (up to
4M nonzeros, ``ops.replay``) "flashgnn eager" rows time the same model with that replay off.
With --cuda-graph every epoch is also captured in a CUDA graph and its replay timed (graph
ms; see ``bench layers``). A failing row records its error and the run
goes on.
"""

from __future__ import annotations

import dataclasses

import torch

from ..data import Dataset
from ..data.synthetic import load_synthetic
from ..ops.replay import set_replay
from ..training.loop import make_optimizer, train_step, training_targets
from ..training.precision import grad_scaler
from .layers import (
    EAGER,
    ModelRow,
    add_common_arguments,
    implementations,
    measure,
    module_and_graph,
    pyg_runs,
    replays,
    report,
    set_speedups,
    setup,
    timings,
)
from .options import QUICK_SCALE, comma_list
from .timing import timed_call

SYNTHETIC = dict(
    num_nodes=2_449_029,
    avg_degree=25.0,
    num_classes=47,
    num_features=100,
    homophily=0.7,
    feature_signal=0.1,
)
MODELS = {
    "GCN": (dict(hidden_feats=128, num_layers=2, dropout=0.5), ("adj_t", "edge_index")),
    "AGNN": (dict(hidden_feats=32, num_layers=4, dropout=0.5), ("edge_index",)),
}
LEARNING_RATE = 0.01


def add_arguments(p) -> None:
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    p.add_argument(
        "--num-nodes",
        type=int,
        default=None,
        help=f"nodes of the synthetic graph (default {SYNTHETIC['num_nodes']:,}; quick: divided by "
        f"{QUICK_SCALE})",
    )
    add_common_arguments(p)


def training_step(module, graph, x, y, mask, precision: str, multi_label: bool = False):
    """One epoch of ``module`` (fresh Adam, as ``flashgnn train`` makes it, and loss scaler),
    as a callable returning the loss."""
    optimizer = make_optimizer(module.parameters(), LEARNING_RATE, 0.0, x.device)
    scaler = grad_scaler(precision, x.device)
    module.train()
    index, y_index = training_targets(mask, y)

    def step():
        return train_step(
            module, graph, x, y_index, index, optimizer, scaler, precision, multi_label
        ).detach()

    return step


def on_device(data: Dataset, device: torch.device) -> Dataset:
    """``data`` as the benchmarks train on it: graph with self-loops, float32 features,
    labels and training mask on ``device`` (validation and test masks stay where they are)."""
    return dataclasses.replace(
        data,
        graph=data.graph.to(device).add_self_loops(),
        x=data.x.to(device, torch.float32),
        y=data.y.to(device),
        train_mask=data.train_mask.to(device),
    )


def bench_model(
    label: str,
    described: str,
    model,
    pyg_paths,
    data: Dataset,
    timer,
    precisions: list[str],
    with_pyg: bool,
    cuda_graph: bool = False,
) -> list[ModelRow]:
    """The rows of one model (flashgnn, built) on one dataset (``on_device``): an epoch of
    flashgnn in every precision and of the PyG twin fed each of ``pyg_paths``; where the
    model's layers replay their kernels (``ops.replay``), also flashgnn's epochs with that
    replay off (``EAGER``); with ``cuda_graph`` also each epoch replayed from a CUDA graph."""
    rows = []
    eager = replays(model, data.x, data.graph)
    for impl, precision, path in implementations(pyg_paths, precisions, with_pyg, eager):
        row = ModelRow(label, described, impl, precision)

        def prepare(precision=precision, path=path, impl=impl):
            module, g = module_and_graph(model, data.graph, precision, path, cached=True)
            if impl == EAGER:
                set_replay(module, False)
            return training_step(
                module, g, data.x, data.y, data.train_mask, precision, data.multi_label
            )

        measure(row, timer, prepare, cuda_graph)
        rows.append(row)
        print(f"  {described:18s} {impl:16s} {precision:5s} {timings(row)}", flush=True)
    return rows


def run(args) -> int:
    from flashgnn.models import build_model

    context = setup(args, "training")
    if context is None:
        return 2
    device, timer, precisions, notes = context
    models = comma_list(args.models, list(MODELS), "models")
    params = dict(SYNTHETIC, seed=args.seed)
    if args.num_nodes is not None:
        params["num_nodes"] = args.num_nodes
    elif args.quick:
        params["num_nodes"] //= QUICK_SCALE
    data, generated_s = timed_call(lambda: load_synthetic(**params, progress=False))
    data = on_device(data, device)
    label = f"synthetic {data.num_nodes:,} nodes"
    notes.append(
        f"{label}: {data.graph.num_edges:,} nonzeros with self-loops, {data.num_features} "
        f"features, "
        f"{data.num_classes} classes; generated in {generated_s:.1f} s"
    )
    print(notes[-1], flush=True)

    rows: list[ModelRow] = []
    for name in models:
        kwargs, pyg_paths = MODELS[name]
        torch.manual_seed(args.seed)
        model = build_model(name, data.num_features, data.num_classes, **kwargs).to(device)
        described = f"{name} {kwargs['num_layers']}x{kwargs['hidden_feats']}"
        rows += bench_model(
            label,
            described,
            model,
            pyg_paths,
            data,
            timer,
            precisions,
            pyg_runs(args, notes),
            args.cuda_graph and device.type == "cuda",
        )
        del model
    set_speedups(rows)
    return report(
        rows,
        notes,
        args,
        "Training benchmark (full-graph epochs)",
        __doc__.split("\n\n", 1)[1],
        timer,
    )
