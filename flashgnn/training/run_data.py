"""The tensors a rank trains on and scores, on its device: the whole graph (one process, or
every rank of a mini-batch run), or the rank's part of a partitioned graph (full-graph runs
of several processes, ``flashgnn.distributed.FullGraphPartition``).

With ``graph.reorder`` the dataset's nodes are renumbered once (``Dataset.reorder``, the order
computed on the rank's device) before anything else is built: the run computes in the new
order, and a one-process run scores its outputs restored to the dataset's order. A partition
splits the renumbered dataset, whose scores are sums over nodes, the same in either order.

A partition comes from the whole dataset (loaded by every rank, then split) or, for the
datasets that ``data.local_rows`` reads rank by rank under a contiguous partition, from the
rank's own rows only, so that no rank ever holds the whole graph.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..data import Dataset, local_rows
from ..graph import Graph
from ..precision_context import block_width
from ..reorder import Reordering
from .config import ConfigError
from .ranks import Ranks, aggregate_scores

SPLITS = ("train", "val", "test")


@dataclass
class RunData:
    """graph: what the model runs on; x float [rows, F] and y [rows(, C)] its input rows' features
    and labels; masks: bool [rows] of train/val/test among the output rows; score_masks: the
    rows of each split this rank scores (with ``scores``); wrap: the model as the loop calls it
    (a partition's halo-exchanging wrapper, else the model itself)."""

    graph: Graph
    x: torch.Tensor
    y: torch.Tensor
    masks: list
    score_masks: list
    num_features: int
    num_classes: int
    multi_label: bool
    metric: str
    summary: dict
    load_seconds: float | None
    graph_seconds: float
    scores: Callable[[torch.Tensor], dict] = field(repr=False)
    wrap: Callable[[torch.nn.Module], torch.nn.Module] = field(repr=False, default=lambda m: m)
    partition: object | None = None
    reordering: Reordering | None = None
    reorder_seconds: float | None = None


FINITE_CHECK_ELEMENTS = 1 << 26
HALF_TYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _checked_features(
    x: torch.Tensor,
    name: str,
    device: torch.device,
    keep: torch.dtype | None = None,
    on_host: bool = False,
) -> torch.Tensor:
    """``x`` on ``device`` as float32 (as ``keep`` when it is stored as that type), or, with
    ``on_host``, where and as it is, checked finite. By blocks of rows: a whole-size mask,
    the int64 its sum makes, or a cast's temporary would take more memory than the features
    (features in host memory are checked on ``device``, a block at a time)."""
    rows = max(1, FINITE_CHECK_ELEMENTS // max(x[0].numel() if x.shape[0] else 1, 1))
    if not on_host:
        dtype = keep if x.dtype == keep else torch.float32
        if x.device != device or x.dtype != dtype:
            moved = torch.empty(x.shape, dtype=dtype, device=device)
            for first in range(0, x.shape[0], rows):
                moved[first : first + rows] = x[first : first + rows].to(device)
            x = moved
    bad = torch.zeros((), dtype=torch.int64, device=device)
    for first in range(0, x.shape[0], rows):
        block = x[first : first + rows].to(device, non_blocking=True)
        bad += (~torch.isfinite(block)).sum()
    bad = int(bad)
    if bad:
        raise ValueError(f"dataset {name!r}: the features hold {bad} NaN or infinite values")
    return x


def _check_metric(metric: str, name: str) -> None:
    if metric not in ("accuracy", "f1_micro"):
        raise ConfigError(
            f"dataset {name!r} is scored by {metric}, which is not a sum over nodes and is not "
            "aggregated across ranks; train it with train.devices=1"
        )


def _load(cfg: dict, dataset: Dataset | None, load_seconds: float | None):
    if dataset is not None:
        return dataset, load_seconds
    from .loop import load_configured_dataset

    tic = time.perf_counter()
    dataset = load_configured_dataset(cfg["dataset"])
    return dataset, time.perf_counter() - tic


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reordered(cfg: dict, dataset: Dataset, device: torch.device):
    """(the dataset renumbered by ``graph.reorder``, its Reordering or None for "none", the
    seconds it took)."""
    method = cfg["graph"]["reorder"]
    if method == "none":
        return dataset, None, None
    tic = time.perf_counter()
    reordered, reordering = dataset.reorder(method, device)
    _sync(device)
    return reordered, reordering, time.perf_counter() - tic


def whole_graph(
    cfg: dict, ranks: Ranks, dataset: Dataset | None, load_seconds: float | None
) -> RunData:
    """Every node on this rank; with several ranks, each scores its contiguous share of the
    node ids and the scores add up across ranks."""
    from .loop import prepare_graph

    dataset, load_seconds = _load(cfg, dataset, load_seconds)
    device = ranks.device
    tic = time.perf_counter()
    k = block_width(cfg["train"]["precision"])
    reordered, reordering, reorder_seconds = _reordered(cfg, dataset, device)
    graph = prepare_graph(reordered.graph, cfg["self_loops"], device, k)
    # features stored in the run's half type stay in it on CUDA, where autocast and the SpMM
    # round them to it anyway: in float32 they would take twice the memory, and a cast copy
    half = HALF_TYPES.get(cfg["train"]["precision"]) if device.type == "cuda" else None
    x = _checked_features(reordered.x, cfg["dataset"]["name"], device, half)
    y = reordered.y.to(device)
    masks = [getattr(reordered, f"{s}_mask").to(device) for s in SPLITS]
    _sync(device)
    graph_seconds = time.perf_counter() - tic
    if ranks.world == 1 and reordering is not None:
        score_masks = masks
        user_y = dataset.y.to(device)
        user_masks = [getattr(dataset, f"{s}_mask").to(device) for s in SPLITS]

        def scores(out):
            out = reordering.restore(out)
            return {s: dataset.evaluate(out, user_y, m) for s, m in zip(SPLITS, user_masks)}
    elif ranks.world == 1:
        score_masks = masks

        def scores(out):
            return {s: dataset.evaluate(out, y, m) for s, m in zip(SPLITS, masks)}
    else:
        _check_metric(dataset.metric, cfg["dataset"]["name"])
        share = torch.zeros_like(masks[0])
        share[torch.arange(dataset.num_nodes).tensor_split(ranks.world)[ranks.rank]] = True
        score_masks = [m & share for m in masks]

        def scores(out):
            values = aggregate_scores(ranks, dataset.metric, out, y, score_masks)
            return dict(zip(SPLITS, values))

    return RunData(
        graph,
        x,
        y,
        masks,
        score_masks,
        dataset.num_features,
        dataset.num_classes,
        dataset.multi_label,
        dataset.metric,
        dataset.summary(),
        load_seconds,
        graph_seconds,
        scores,
        reordering=reordering,
        reorder_seconds=reorder_seconds,
    )


def _workers(ranks: Ranks) -> int:
    """Threads a rank generates rows with: its share of the host's cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // ranks.world)


def _features_out(cfg: dict, ranks: Ranks):
    """What a generated graph writes its features into: registered host memory where they
    stay on the host (``distributed.features``), else a new array (None)."""
    from ..distributed.full_graph import features_on_host
    from ..distributed.projection import host_buffer

    placement, device = cfg["distributed"]["features"], ranks.device

    def allocate(shape: tuple[int, int]):
        if device.type != "cuda" or not features_on_host(
            placement, 2 * shape[0] * shape[1], device
        ):
            return None
        return host_buffer(shape, torch.float16, device).numpy()

    return allocate


def _generated_partition(cfg: dict, ranks: Ranks, k: int | None, tic: float):
    """(partition, info, load seconds, the clock when the partition's build began) of a
    generated IGB-like graph split by a method other
    than contiguous ranges: every rank generates the whole structure (no features), computes
    the same parts on its device, then generates its own nodes' rows and features."""
    from ..distributed import FullGraphPartition, partition_nodes, renumbering

    section, d = cfg["dataset"], cfg["distributed"]
    if not section["name"].lower().replace("_", "-").startswith("generated-igb-"):
        raise ConfigError(
            f"dataset {section['name']!r} is read rank by rank, which needs "
            f"distributed.partition=contiguous, got {d['partition']!r}"
        )
    workers = _workers(ranks)
    graph, size, indptr, indices = local_rows.generated_igb_structure(section, workers)
    structure = Graph.from_csr(torch.from_numpy(indptr), torch.from_numpy(indices), graph.n)
    del indptr, indices
    part = partition_nodes(structure, ranks.world, d["partition"], device=ranks.device)
    del structure
    new_of_old, old_of_new, part_ptr = renumbering(part, ranks.world)
    lo, hi = int(part_ptr[ranks.rank]), int(part_ptr[ranks.rank + 1])
    rows = local_rows.generated_igb_nodes(
        size, graph, old_of_new[lo:hi].numpy(), workers, _features_out(cfg, ranks)
    )
    built_at = time.perf_counter()
    load_seconds = built_at - tic
    built = FullGraphPartition.from_local_rows(
        rows.indptr,
        new_of_old[rows.indices],
        rows.x,
        rows.y,
        [rows.train_mask, rows.val_mask, rows.test_mask],
        part_ptr,
        self_loops=cfg["self_loops"],
        device=ranks.device,
        k=k,
        new_of_old=new_of_old,
        old_of_new=old_of_new,
        features=d["features"],
        graph_on_host=k is None,
    )
    return built, rows.info, load_seconds, built_at


def partitioned(
    cfg: dict, ranks: Ranks, dataset: Dataset | None, load_seconds: float | None
) -> RunData:
    """This rank's part of the graph, split by ``distributed.partition``: its own nodes'
    rows of A over [own; halo] sources, its nodes' features, labels and masks."""
    from ..distributed import FullGraphPartition

    device, d = ranks.device, cfg["distributed"]
    # GCN builds the matrices it runs on from the local graph itself (distributed.model),
    # which then waits on the host
    k = None if cfg["model"]["name"] == "gcn" else block_width(cfg["train"]["precision"])
    section = cfg["dataset"]
    sliced = dataset is None and local_rows.supports(section["name"])
    if sliced and cfg["graph"]["reorder"] != "none":
        raise ConfigError(
            f"dataset {section['name']!r} is read rank by rank, no rank holding the whole "
            f"graph to reorder: set graph.reorder=none, got {cfg['graph']['reorder']!r}"
        )
    reorder_seconds = None
    tic = time.perf_counter()
    # the partition must not draw from torch's streams: the model is built from them next,
    # as a one-process run builds it
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if sliced and d["partition"] != "contiguous":
            part, info, load_seconds, tic = _generated_partition(cfg, ranks, k, tic)
        elif sliced:
            rows = local_rows.load(
                section, ranks.rank, ranks.world, _workers(ranks), _features_out(cfg, ranks)
            )
            load_seconds = time.perf_counter() - tic
            tic = time.perf_counter()
            n = rows.info.num_nodes
            part_ptr = torch.tensor(
                [local_rows.own_range(n, r, ranks.world)[0] for r in range(ranks.world)] + [n]
            )
            part = FullGraphPartition.from_local_rows(
                rows.indptr,
                rows.indices,
                rows.x,
                rows.y,
                [rows.train_mask, rows.val_mask, rows.test_mask],
                part_ptr,
                self_loops=cfg["self_loops"],
                device=device,
                k=k,
                features=d["features"],
                graph_on_host=k is None,
            )
            rows.x = None  # the partition holds the features now
            info = rows.info
        else:
            dataset, load_seconds = _load(cfg, dataset, load_seconds)
            tic = time.perf_counter()
            dataset, _, reorder_seconds = _reordered(cfg, dataset, device)
            part = FullGraphPartition.build(
                dataset,
                method=d["partition"],
                self_loops=cfg["self_loops"],
                device=device,
                k=k,
                features=d["features"],
                graph_on_host=k is None,
            )
            info = local_rows.DatasetInfo.of(dataset)
    # a partition's features stay in the run's half type on CUDA, where autocast casts them
    # anyway: IGB-large's 1024 features of a quarter of its nodes fill a GPU in float32
    half = HALF_TYPES.get(cfg["train"]["precision"]) if device.type == "cuda" else None
    x = _checked_features(part.x, section["name"], device, half, part.features_on_host)
    part.x = x  # the model knows the features by identity (their halo is exchanged once)
    masks = [m.to(device) for m in part.masks]
    y = part.y.to(device)
    _sync(device)
    graph_seconds = time.perf_counter() - tic
    _check_metric(info.metric, section["name"])

    def scores(out):
        return dict(zip(SPLITS, aggregate_scores(ranks, info.metric, out, y, masks)))

    return RunData(
        part.graph,
        x,
        y,
        masks,
        masks,
        info.num_features,
        info.num_classes,
        info.multi_label,
        info.metric,
        info.summary(),
        load_seconds,
        graph_seconds,
        scores,
        wrap=lambda model: part.wrap(
            model,
            overlap=d["overlap"],
            time_exchanges=d["time_exchanges"],
            exchange_columns=d["exchange_columns"],
        ),
        partition=part,
        reorder_seconds=reorder_seconds,
    )
