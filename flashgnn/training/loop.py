"""Training of one model on one dataset, as a config describes it: full-graph steps, or
mini-batches of training nodes on sampled blocks (``train.batch_size``, ``train.fanouts``);
evaluation is full-graph.

A run writes into its folder: ``config.yaml`` (the resolved config), ``metrics.csv`` (one
row per epoch), ``last.pt`` (resumable state), ``best.pt`` (weights of the best validation
epoch) and ``summary.json`` (scores of the best epoch, preprocessing and epoch times, peak
memory), each file written whole. It checks the config, the data, the model and the
checkpoint it resumes from before it writes anything; ``run_folder`` says what a failure
leaves behind.
"""

from __future__ import annotations

import json
import math
import random
import resource
import statistics
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from tqdm import tqdm

from .. import __version__
from ..cuda_graphs import WARMUP_CALLS, CudaGraphStep
from ..data import Dataset, load_dataset
from ..graph import Graph
from ..nn import AGNNConv, GATConv, GCNConv
from ..ops.replay import set_replay
from ..precision_context import block_width
from ..sampling import NeighborSampler
from . import checkpoint
from .atomic import write_atomically
from .checkpoint import CheckpointError
from .config import ConfigError, resolve_config
from .metrics_log import MetricsLog, rows_up_to
from .precision import dense_precision, grad_scaler, precision_scope
from .run_folder import CONFIG, METRICS, SUMMARY, RunFolder

SPLITS = ("train", "val", "test")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ConfigError(f"config key 'train.device': {e}") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config key 'train.device' is {name!r} but CUDA is not available")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def new_run_dir(cfg: dict) -> Path:
    """``output.dir`` when set, else a new ``<output.root>/<name>-<timestamp>`` folder."""
    if cfg["output"]["dir"] is not None:
        return Path(cfg["output"]["dir"])
    base = Path(cfg["output"]["root"]) / f"{cfg['name']}-{datetime.now():%Y%m%d-%H%M%S}"
    path, i = base, 1
    while path.exists():
        path, i = base.with_name(f"{base.name}-{i}"), i + 1
    return path


def load_configured_dataset(section: dict) -> Dataset:
    """``load_dataset`` with the config's dataset section; a bad keyword is a ConfigError."""
    kw = {k: v for k, v in section.items() if k != "name"}
    try:
        return load_dataset(section["name"], **kw)
    except TypeError as e:
        raise ConfigError(f"config section 'dataset' ({section['name']}): {e}") from e


def build_configured_model(section: dict, in_feats: int, out_feats: int) -> torch.nn.Module:
    """``build_model`` with the config's model section; a bad keyword or value is a
    ConfigError."""
    from flashgnn.models import build_model

    kw = {k: v for k, v in section.items() if k != "name"}
    try:
        return build_model(section["name"], in_feats, out_feats, **kw)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config section 'model' ({section['name']}): {e}") from e


def check_model_section(section: dict) -> None:
    """Build the model of ``section`` on the meta device (no memory, no random draws), so
    that a bad model keyword fails before the data is loaded."""
    with torch.device("meta"):
        build_configured_model(section, 1, 2)


def restore(state: dict, path: Path, model, optimizer, scaler, stopper) -> tuple[int, list]:
    """Load the checkpoint ``state`` (read from ``path``) into the run's objects; returns the
    epoch it was written after and the epoch times so far. A checkpoint of another model
    (a changed model section) is a CheckpointError."""
    try:
        model.load_state_dict(state["model"])
        for saved, group in zip(state["optimizer"]["param_groups"], optimizer.param_groups):
            saved.update(fused=group["fused"], capturable=group["capturable"])  # this run's kernels
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        stopper.load_state_dict(state["early_stopping"])
        checkpoint.set_rng_state(state["rng"])
        return state["epoch"], list(state["epoch_times"])
    except (KeyError, RuntimeError, ValueError, TypeError) as e:
        if isinstance(e, torch.OutOfMemoryError):
            raise
        reason = " ".join(str(e).split())
        raise CheckpointError(
            f"cannot resume from {path}: the checkpoint does not fit the model this config "
            f"builds (was the model section changed?): {type(e).__name__}: {reason[:400]}"
        ) from e


def prepare_graph(graph: Graph, self_loops: bool, device: torch.device, k: int) -> Graph:
    """A new Graph (so no format is cached yet) on ``device``, with self-loops if asked, and
    its ME-BCRS of A and A^T for block width ``k`` built."""
    fresh = (
        graph.add_self_loops()
        if self_loops
        else Graph(
            graph.indptr,
            graph.indices,
            graph.node_counts,
            edge_ids=graph.edge_ids,
            edge_weight=graph.edge_weight,
        )
    )
    fresh = fresh.to(device)
    fresh.adj(k).transpose()
    return fresh


# train.cuda_graph "auto" replays steps from CUDA graphs on graphs of up to this many nonzeros
# (self-loops included), where the host's launches bound an epoch (docs/TUNING.md); larger
# graphs keep eager steps, which share one memory pool with evaluation.
AUTO_CUDA_GRAPH_EDGES = 5_000_000


def use_cuda_graph(setting: bool | str, device: torch.device, num_edges: int) -> bool:
    """Whether a run replays its steps from CUDA graphs: ``train.cuda_graph`` with "auto"
    resolved."""
    if setting == "auto":
        return device.type == "cuda" and num_edges <= AUTO_CUDA_GRAPH_EDGES
    return setting


def _loss(logits: torch.Tensor, y: torch.Tensor, multi_label: bool) -> torch.Tensor:
    logits = logits.float()
    if multi_label:
        return F.binary_cross_entropy_with_logits(logits, y.float())
    return F.cross_entropy(logits, y)


def make_optimizer(
    parameters, lr: float, weight_decay: float, device: torch.device
) -> torch.optim.Adam:
    """Adam; on CUDA the fused kernel (one launch per step, loss scaling without a host
    synchronisation), which a CUDA graph can capture (for it ``capturable`` only allows the
    capture; the kernel is the same)."""
    cuda = device.type == "cuda"
    return torch.optim.Adam(
        parameters, lr=lr, weight_decay=weight_decay, fused=cuda, capturable=cuda
    )


def training_targets(mask: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 index of the nodes in ``mask``, their labels): what ``train_step`` takes, built
    once (indexing by a boolean mask would synchronise on every step)."""
    index = mask.nonzero().flatten()
    return index, y.index_select(0, index)


def train_step(
    model, graph, x, y_index, index, optimizer, scaler, precision: str, multi_label: bool
) -> torch.Tensor:
    """One step: forward in ``precision``, loss on the output rows ``index`` (int64; None:
    every row, as on a mini-batch's blocks) whose labels are ``y_index``, scaled backward, the
    optimizer step. Returns the loss (a device tensor: reading it synchronises). Nothing in a
    full-graph step synchronises, so a CUDA graph can capture it."""
    optimizer.zero_grad(set_to_none=True)
    with precision_scope(precision, x.device):
        logits = model(graph, x)
        loss = _loss(
            logits if index is None else logits.index_select(0, index), y_index, multi_label
        )
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def minibatch_epoch(
    model,
    sampler: NeighborSampler,
    x,
    y,
    train_index,
    batch_size: int,
    optimizer,
    scaler,
    precision: str,
    multi_label: bool,
) -> torch.Tensor:
    """One epoch of mini-batch steps: the training nodes ``train_index`` in a random order, in
    batches of ``batch_size``, each on the blocks ``sampler`` draws for it. Returns the mean
    loss per node (a device tensor)."""
    order = train_index[torch.randperm(train_index.numel(), device=x.device)]
    total = torch.zeros((), device=x.device)
    for seeds in order.split(batch_size):
        input_nodes, blocks = sampler.sample(seeds)
        loss = train_step(
            model,
            blocks,
            x.index_select(0, input_nodes),
            y.index_select(0, seeds),
            None,
            optimizer,
            scaler,
            precision,
            multi_label,
        )
        total += loss.detach() * seeds.numel()
    return total / max(order.numel(), 1)


def check_fanouts(model: torch.nn.Module, fanouts: list[int]) -> None:
    """ConfigError unless ``fanouts`` has one entry per graph layer of ``model``."""
    layers = sum(isinstance(m, (GCNConv, AGNNConv, GATConv)) for m in model.modules())
    if layers != len(fanouts):
        raise ConfigError(
            f"config key 'train.fanouts' must have one fanout per graph layer of the model "
            f"({layers}), got {fanouts}"
        )


class EarlyStopping:
    """Remembers the best validation score; stops after ``patience`` epochs without a better
    one (never when patience is None)."""

    def __init__(self, patience: int | None):
        self.patience = patience
        self.best_score = -float("inf")
        self.best_epoch = -1

    def update(self, score: float, epoch: int) -> bool:
        """Record the score of ``epoch``; True when it is the best so far."""
        if score > self.best_score:
            self.best_score, self.best_epoch = score, epoch
            return True
        return False

    def should_stop(self, epoch: int) -> bool:
        return self.patience is not None and epoch - self.best_epoch >= self.patience

    def state_dict(self) -> dict:
        return {"best_score": self.best_score, "best_epoch": self.best_epoch}

    def load_state_dict(self, state: dict) -> None:
        self.best_score, self.best_epoch = state["best_score"], state["best_epoch"]


def train(
    config: dict,
    *,
    resume: str | Path | None = None,
    overwrite: bool = False,
    dataset: Dataset | None = None,
    load_seconds: float | None = None,
) -> dict:
    """Train as ``config`` says (see ``config.py``) and return the run's summary (also written
    to ``summary.json``). ``resume``: a run folder to continue from its ``last.pt``.
    ``overwrite``: replace the run that the new run's folder holds (without it such a folder
    is refused). ``dataset``: an already loaded dataset to use instead of loading
    ``config['dataset']`` (``load_seconds``: what loading it took, for the report).

    Everything is checked before the run folder is touched: the config, the folder, the
    model section, the checkpoint (readable, and fitting the model), the data. A run that
    fails before its first checkpoint leaves the folder as it found it (``run_folder``)."""
    started = time.perf_counter()
    cfg = resolve_config(config)
    t = cfg["train"]
    device = resolve_device(t["device"])
    if t["cuda_graph"] is True and device.type != "cuda":
        raise ConfigError(
            f"config key 'train.cuda_graph' needs a CUDA device, but the run is on {device}"
        )
    precision = t["precision"]
    run_dir = Path(resume) if resume is not None else new_run_dir(cfg)
    folder = RunFolder(run_dir, resume=resume is not None, overwrite=overwrite)
    check_model_section(cfg["model"])
    state = kept_rows = None
    if resume is not None:
        state = checkpoint.load(run_dir / checkpoint.LAST, device)
        if not isinstance(state, dict) or not isinstance(state.get("epoch"), int):
            raise CheckpointError(f"{run_dir / checkpoint.LAST} is not a checkpoint of a run")
        if t["epochs"] < state["epoch"]:
            raise ConfigError(
                f"config key 'train.epochs' is {t['epochs']}, but the run in {run_dir} has "
                f"trained {state['epoch']} epochs already; set it to more to train longer"
            )
        kept_rows = rows_up_to(run_dir / METRICS, state["epoch"])
    seed_everything(t["seed"])

    if dataset is None:
        tic = time.perf_counter()
        dataset = load_configured_dataset(cfg["dataset"])
        load_seconds = time.perf_counter() - tic
    tic = time.perf_counter()
    graph = prepare_graph(dataset.graph, cfg["self_loops"], device, block_width(precision))
    x = dataset.x.to(device=device, dtype=torch.float32)
    bad = int((~torch.isfinite(x)).sum())
    if bad:
        raise ValueError(
            f"dataset {cfg['dataset']['name']!r}: the features hold {bad} NaN or infinite values"
        )
    y = dataset.y.to(device)
    masks = [getattr(dataset, f"{s}_mask").to(device) for s in SPLITS]
    _sync(device)
    graph_seconds = time.perf_counter() - tic
    minibatch = t["batch_size"] is not None
    cuda_graph = not minibatch and use_cuda_graph(t["cuda_graph"], device, graph.num_edges)

    model = build_configured_model(cfg["model"], dataset.num_features, dataset.num_classes)
    model = model.to(device)
    if minibatch:
        # Layers replay their kernels (ops.replay) from a configuration's second call, keyed by
        # the graph's identity; each mini-batch samples new blocks, so every call would start a
        # configuration that is never replayed yet keeps its blocks alive. Only the loop knows
        # that its graphs are new every step, so it turns the replay off here. (Captured whole
        # steps need nothing: layers run eagerly inside a capture, cuda_graphs.capturing.)
        set_replay(model, False)
        check_fanouts(model, t["fanouts"])
    optimizer = make_optimizer(model.parameters(), t["lr"], t["weight_decay"], device)
    scaler = grad_scaler(precision, device)
    stopper = EarlyStopping(t["patience"])
    start_epoch, epoch_times = 0, []
    if state is not None:
        start_epoch, epoch_times = restore(
            state, run_dir / checkpoint.LAST, model, optimizer, scaler, stopper
        )
        del state
    log = MetricsLog(run_dir / METRICS, kept_rows or [])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    train_index, y_train = training_targets(masks[0], y)

    if minibatch:
        sampler = NeighborSampler(graph, t["fanouts"])

        def step() -> torch.Tensor:
            return minibatch_epoch(
                model,
                sampler,
                x,
                y,
                train_index,
                t["batch_size"],
                optimizer,
                scaler,
                precision,
                dataset.multi_label,
            )
    else:

        def step() -> torch.Tensor:
            return train_step(
                model,
                graph,
                x,
                y_train,
                train_index,
                optimizer,
                scaler,
                precision,
                dataset.multi_label,
            ).detach()

    def logits() -> torch.Tensor:
        with torch.no_grad(), precision_scope(precision, device):
            return model(graph, x).float()

    if cuda_graph:
        step, logits = CudaGraphStep(step), CudaGraphStep(logits)

    with folder.started():
        write_atomically(run_dir / CONFIG, yaml.safe_dump(cfg, sort_keys=False).encode(), "config")
        log.write()
        bar = tqdm(
            range(start_epoch, t["epochs"]),
            initial=start_epoch,
            total=t["epochs"],
            desc=cfg["name"],
            disable=None if t["progress"] is None else not t["progress"],
        )
        epoch = start_epoch - 1
        for epoch in bar:
            tic = time.perf_counter()
            model.train()
            loss = step()
            _sync(device)
            epoch_times.append(time.perf_counter() - tic)

            row = {"epoch": epoch + 1, "loss": loss.item(), "epoch_time_s": epoch_times[-1]}
            if not math.isfinite(row["loss"]):
                raise FloatingPointError(
                    f"{cfg['name']}: the loss is {row['loss']} at epoch {epoch + 1} in "
                    f"{precision}; the run diverged (try a lower train.lr or another precision)"
                )
            if (epoch + 1) % t["eval_every"] == 0 or epoch + 1 == t["epochs"]:
                tic = time.perf_counter()
                model.eval()
                out = logits()
                scores = {
                    split: dataset.evaluate(out, y, mask) for split, mask in zip(SPLITS, masks)
                }
                row.update(scores, eval_time_s=time.perf_counter() - tic)
                if stopper.update(scores["val"], epoch):
                    checkpoint.save(
                        run_dir / checkpoint.BEST,
                        {"epoch": epoch + 1, "model": model.state_dict(), "scores": scores},
                    )
                bar.set_postfix(
                    loss=f"{row['loss']:.4f}",
                    val=f"{scores['val']:.4f}",
                    epoch_s=f"{epoch_times[-1]:.4f}",
                )
            log.append(row)
            checkpoint.save(
                run_dir / checkpoint.LAST,
                {
                    "epoch": epoch + 1,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(),
                    "early_stopping": stopper.state_dict(),
                    "rng": checkpoint.rng_state(),
                    "epoch_times": epoch_times,
                },
            )
            folder.commit()
            if stopper.should_stop(epoch):
                break
        bar.close()
        folder.commit()

    best = checkpoint.load(run_dir / checkpoint.BEST, device)
    model.load_state_dict(best["model"])
    summary = {
        "name": cfg["name"],
        "run_dir": str(run_dir),
        "dataset": dataset.summary(),
        "model": cfg["model"]["name"],
        "precision": precision,
        "dense_precision": dense_precision(precision, device),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "metric": dataset.metric,
        "epochs_run": epoch + 1,
        "best_epoch": best["epoch"],
        **{split: score for split, score in best["scores"].items()},
        "stopped_early": epoch + 1 < t["epochs"],
        "resumed_from_epoch": start_epoch if resume is not None else None,
        "load_s": load_seconds,
        "graph_s": graph_seconds,
        "preprocess_s": (load_seconds or 0.0) + graph_seconds,
        "cuda_graph": cuda_graph,
        **_time_stats(epoch_times, 1 + (WARMUP_CALLS if cuda_graph else 0)),
        "peak_gpu_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20
        if device.type == "cuda"
        else None,
        "peak_host_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "total_s": time.perf_counter() - started,
        "torch": torch.__version__,
        "flashgnn": __version__,
        "config": cfg,
    }
    write_atomically(run_dir / SUMMARY, json.dumps(summary, indent=2).encode(), "summary")
    return summary


def _time_stats(epoch_times: list[float], warm: int) -> dict:
    """Mean and median epoch time without the first ``warm`` epochs (the first builds lazily
    cached tables and compiles kernels; with train.cuda_graph the eager warm-up epochs and the
    capture come before the replays), and the first epoch alone."""
    steady = epoch_times[warm:] or epoch_times
    return {
        "epoch_time_s": statistics.fmean(steady),
        "epoch_time_median_s": statistics.median(steady),
        "first_epoch_s": epoch_times[0],
    }
