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

import contextlib
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
import torch.distributed as dist
import torch.nn.functional as F
import yaml
from tqdm import tqdm

from .. import __version__
from ..cuda_graphs import WARMUP_CALLS, CudaGraphStep
from ..data import Dataset, load_dataset
from ..distributed.launch import from_environment
from ..distributed.minibatch import data_parallel, loss_divisor, rank_seeds
from ..graph import Graph
from ..nn import AGNNConv, GATConv, GCNConv
from ..ops.replay import set_replay
from ..pyg_twin import pyg_twin
from ..reorder import Reordering
from ..sampling import NeighborSampler
from . import checkpoint, run_data
from .atomic import write_atomically
from .checkpoint import CheckpointError
from .config import ConfigError, resolve_config
from .early_stopping import EarlyStopping
from .metrics_log import MetricsLog, rows_up_to
from .precision import dense_precision, grad_scaler, precision_scope
from .processes import check_world, rank_device, run_ranks
from .ranks import Ranks
from .run_folder import CONFIG, METRICS, SUMMARY, RunFolder


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


def _copied(model: torch.nn.Module) -> dict:
    """A copy of ``model``'s state, kept until the next checkpoint writes it."""
    state = model.state_dict()
    return {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in state.items()}


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


BACKENDS = ("flashgnn", "pyg")
"""``model.backend``: the library of a model's graph layers; "pyg" trains the PyG twin of the
flashgnn model (``pyg_twin``: torch_geometric's layers, starting from its weights)."""


def model_backend(section: dict) -> str:
    """The model section's ``backend`` ("flashgnn" when absent); ConfigError for another."""
    backend = section.get("backend", "flashgnn")
    if backend not in BACKENDS:
        raise ConfigError(
            f"config section 'model' ({section['name']}): backend must be one of {BACKENDS}, "
            f"got {backend!r}"
        )
    return backend


def build_configured_model(section: dict, in_feats: int, out_feats: int) -> torch.nn.Module:
    """``build_model`` with the config's model section (``backend`` aside, see
    ``model_backend``); a bad keyword or value is a ConfigError."""
    from flashgnn.models import build_model

    model_backend(section)
    kw = {k: v for k, v in section.items() if k not in ("name", "backend")}
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


def _loss(
    logits: torch.Tensor, y: torch.Tensor, multi_label: bool, divisor: float | None = None
) -> torch.Tensor:
    """The mean loss over the rows (multi-label: over rows and classes); with ``divisor``, the
    rows' summed loss (multi-label: each row's mean over classes) divided by it instead, a
    rank's part of a mean over the rows of every rank."""
    logits = logits.float()
    if divisor is None:
        if multi_label:
            return F.binary_cross_entropy_with_logits(logits, y.float())
        return F.cross_entropy(logits, y)
    if multi_label:
        total = F.binary_cross_entropy_with_logits(logits, y.float(), reduction="sum")
        return total / (divisor * logits.shape[1])
    return F.cross_entropy(logits, y, reduction="sum") / divisor


def validation_loss(out: torch.Tensor, data, ranks: Ranks) -> float:
    """The mean loss of the logits ``out`` over the validation rows that every rank scores
    (multi-label: also over the classes), as the training loss is taken."""
    index = data.score_masks[1].nonzero().flatten()
    part = _loss(out.index_select(0, index), data.y.index_select(0, index), data.multi_label, 1.0)
    total, count = ranks.sum([float(part), index.numel()])
    return total / max(count, 1)


def decayed_groups(model: torch.nn.Module, scope: str):
    """``model``'s parameters for the optimizer: all of them ("all"), or two groups, the
    first layer's (``model.first_layer()``) and the rest without weight decay
    ("first_layer")."""
    if scope == "all":
        return model.parameters()
    if not hasattr(model, "first_layer"):
        raise ConfigError(
            f"config key 'train.weight_decay_scope' is {scope!r}, but {type(model).__name__} "
            "has no first_layer()"
        )
    first = {id(p) for p in model.first_layer().parameters()}
    return [
        {"params": [p for p in model.parameters() if id(p) in first]},
        {"params": [p for p in model.parameters() if id(p) not in first], "weight_decay": 0.0},
    ]


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


def training_targets(
    mask: torch.Tensor, y: torch.Tensor, reordering: Reordering | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 index of the nodes in ``mask``, their labels): what ``train_step`` takes, built
    once (indexing by a boolean mask would synchronise on every step). With the ``reordering``
    the nodes were renumbered by, the index lists the same nodes in the dataset's order (their
    new ids), so that the loss adds them, and mini-batches draw them, as without it."""
    if reordering is None:
        index = mask.nonzero().flatten()
    else:
        index = reordering.new_ids(reordering.restore(mask).nonzero().flatten())
    return index, y.index_select(0, index)


def train_step(
    model,
    graph,
    x,
    y_index,
    index,
    optimizer,
    scaler,
    precision: str,
    multi_label: bool,
    divisor: float | None = None,
    reduce_gradients=None,
) -> torch.Tensor:
    """One step: forward in ``precision``, loss on the output rows ``index`` (int64; None:
    every row, as on a mini-batch's blocks) whose labels are ``y_index``, scaled backward, the
    optimizer step. Returns the loss (a device tensor: reading it synchronises). Nothing in a
    full-graph step synchronises, so a CUDA graph can capture it.

    A rank of a multi-process run passes ``divisor`` (its loss is the rows' summed loss over
    it, see ``_loss``) and, unless DDP reduces them, ``reduce_gradients(model)``, which sums
    the gradients across ranks before the optimizer step."""
    optimizer.zero_grad(set_to_none=True)
    # the labels are on the run's device; a partition's features may stay in host memory
    with precision_scope(precision, y_index.device):
        logits = model(graph, x)
        loss = _loss(
            logits if index is None else logits.index_select(0, index),
            y_index,
            multi_label,
            divisor,
        )
        scaler.scale(loss).backward()
    if reduce_gradients is not None:
        reduce_gradients(model)
    scaler.step(optimizer)
    scaler.update()
    return loss


def epoch_order(train_index: torch.Tensor, seed: int, epoch: int) -> torch.Tensor:
    """The training nodes ``train_index`` in the random order of ``epoch`` (0-based): a
    permutation drawn from its own generator seeded by (``seed``, ``epoch``), so every rank of
    a run, and a resumed run, draws the same batches whatever else used the random streams."""
    state = np.random.SeedSequence([seed, epoch]).generate_state(2, np.uint32)
    generator = torch.Generator(train_index.device)
    generator.manual_seed(int(state[0]) << 32 | int(state[1]))
    perm = torch.randperm(train_index.numel(), generator=generator, device=train_index.device)
    return train_index[perm]


def minibatch_epoch(
    model,
    sampler: NeighborSampler,
    x,
    y,
    order,
    batch_size: int,
    optimizer,
    scaler,
    precision: str,
    multi_label: bool,
    ranks: Ranks | None = None,
) -> torch.Tensor:
    """One epoch of mini-batch steps: the training nodes ``order`` in batches of
    ``batch_size``, each on the blocks ``sampler`` draws for it. Returns the mean loss per node
    (a device tensor). With ``ranks`` of a multi-process run (``model`` in DDP), this rank
    steps on its share of each batch (``minibatch.rank_seeds``) and returns its part of the
    mean, which adds up over the ranks."""
    total = torch.zeros((), device=x.device)
    for batch in order.split(batch_size):
        seeds, divisor = batch, None
        if ranks is not None:
            seeds = rank_seeds(batch, ranks.rank, ranks.world)
            divisor = loss_divisor(batch.numel(), ranks.world)
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
            divisor,
        )
        total += loss.detach() * (seeds.numel() if divisor is None else divisor)
    return total / max(order.numel(), 1)


def check_fanouts(model: torch.nn.Module, fanouts: list[int]) -> None:
    """ConfigError unless ``fanouts`` has one entry per graph layer of ``model``."""
    layers = sum(isinstance(m, (GCNConv, AGNNConv, GATConv)) for m in model.modules())
    if layers != len(fanouts):
        raise ConfigError(
            f"config key 'train.fanouts' must have one fanout per graph layer of the model "
            f"({layers}), got {fanouts}"
        )


def train(
    config: dict,
    *,
    resume: str | Path | None = None,
    overwrite: bool = False,
    dataset: Dataset | None = None,
    load_seconds: float | None = None,
) -> dict | None:
    """Train as ``config`` says (see ``config.py``) and return the run's summary (also written
    to ``summary.json``). ``resume``: a run folder to continue from its ``last.pt``.
    ``overwrite``: replace the run that the new run's folder holds (without it such a folder
    is refused). ``dataset``: an already loaded dataset to use instead of loading
    ``config['dataset']`` (``load_seconds``: what loading it took, for the report).

    Everything is checked before the run folder is touched: the config, the folder, the
    model section, the checkpoint (readable, and fitting the model), the data. A run that
    fails before its first checkpoint leaves the folder as it found it (``run_folder``).

    ``train.devices`` > 1 spawns that many processes (``processes``), and under torchrun this
    process is one rank; each rank trains its share, rank 0 alone writes the folder. The
    summary comes back from the spawning call and on rank 0; other ranks return None."""
    cfg = resolve_config(config)
    place = from_environment()
    spawning = place is None and cfg["train"]["devices"] > 1
    if not dist.is_initialized() and (
        spawning or (place is not None and place.world > 1) or _one_part(cfg)
    ):
        run_dir = Path(resume) if resume is not None else new_run_dir(cfg)
        return run_ranks(
            train,
            cfg,
            place,
            run_dir,
            resume=resume,
            overwrite=overwrite,
            dataset=dataset,
            load_seconds=load_seconds,
        )
    return _train_rank(cfg, resume, overwrite, dataset, load_seconds)


def _one_part(cfg: dict) -> bool:
    """Whether a one-process run trains on a one-part partition (a process group of one)."""
    return (
        cfg["distributed"]["partition_one_process"]
        and cfg["train"]["devices"] == 1
        and cfg["train"]["batch_size"] is None
    )


def _train_rank(cfg: dict, resume, overwrite: bool, dataset, load_seconds) -> dict | None:
    """``train`` in this process: the whole run, or this rank's part of one."""
    started = time.perf_counter()
    t = cfg["train"]
    if dist.is_initialized():
        world = check_world(cfg, from_environment())
        device = rank_device(t["device"], from_environment())
    else:
        world, device = 1, resolve_device(t["device"])
    ranks = Ranks.of_this_process(device)
    if ranks.world != world:
        raise ConfigError(
            f"config key 'train.devices' is {t['devices']} but the process group has "
            f"{ranks.world} ranks"
        )
    if t["cuda_graph"] is True and device.type != "cuda":
        raise ConfigError(
            f"config key 'train.cuda_graph' needs a CUDA device, but the run is on {device}"
        )
    precision = t["precision"]
    if resume is not None:
        run_dir = Path(resume)
    else:  # rank 0 names the folder (a new one is stamped with the time)
        run_dir = Path(ranks.gather(str(new_run_dir(cfg)))[0])
    folder = (
        RunFolder(run_dir, resume=resume is not None, overwrite=overwrite) if ranks.writer else None
    )
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
        kept_rows = rows_up_to(run_dir / METRICS, state["epoch"]) if ranks.writer else []
    seed_everything(t["seed"])

    minibatch = t["batch_size"] is not None
    pyg = model_backend(cfg["model"]) == "pyg"
    if pyg and (minibatch or ranks.world > 1):
        raise ConfigError(
            "config key 'model.backend' is 'pyg': PyG twins train full-graph in one process "
            "(no train.batch_size, train.devices 1)"
        )
    partitioned = not minibatch and (ranks.world > 1 or _one_part(cfg))
    if partitioned:
        data = run_data.partitioned(cfg, ranks, dataset, load_seconds)
    else:
        data = run_data.whole_graph(cfg, ranks, dataset, load_seconds)
    graph, x, y = data.graph, data.x, data.y
    cuda_graph = (
        ranks.world == 1
        and not minibatch
        and not partitioned
        and use_cuda_graph(t["cuda_graph"], device, graph.num_edges)
    )

    model = build_configured_model(cfg["model"], data.num_features, data.num_classes)
    model = model.to(device)
    ranks.broadcast_module(model)
    if pyg:
        # PyG's layers draw their initial weights, then take the model's: the fork keeps
        # those draws out of the run's streams, so dropout draws as in the flashgnn run
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            model = pyg_twin(model, graph.edge_index)
    if minibatch:
        # Layers replay their kernels (ops.replay) from a configuration's second call, keyed by
        # the graph's identity; each mini-batch samples new blocks, so every call would start a
        # configuration that is never replayed yet keeps its blocks alive. Only the loop knows
        # that its graphs are new every step, so it turns the replay off here. (Captured whole
        # steps need nothing: layers run eagerly inside a capture, cuda_graphs.capturing.)
        set_replay(model, False)
        check_fanouts(model, t["fanouts"])
    optimizer = make_optimizer(
        decayed_groups(model, t["weight_decay_scope"]), t["lr"], t["weight_decay"], device
    )
    scaler = grad_scaler(precision, device)
    stopper = EarlyStopping(t["patience"], t["early_stopping"])
    start_epoch, epoch_times = 0, []
    if state is not None:
        start_epoch, epoch_times = restore(
            state, run_dir / checkpoint.LAST, model, optimizer, scaler, stopper
        )
        del state
    if not ranks.writer:  # ranks draw dropout masks and samples from streams of their own
        torch.manual_seed(ranks.rank_seed(t["seed"], start_epoch))
    log = MetricsLog(run_dir / METRICS, kept_rows or [])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    train_index, y_train = training_targets(data.masks[0], y, data.reordering)
    # the model as each step calls it: a partition's wrapper exchanges halo rows between
    # layers; DDP averages a mini-batch step's gradients across ranks
    net = data.wrap(model)

    if minibatch:
        sampler = NeighborSampler(graph, t["fanouts"])
        if ranks.world > 1:
            net = data_parallel(model, device)
        shared = ranks if ranks.world > 1 else None

        def step(epoch: int) -> torch.Tensor:
            return minibatch_epoch(
                net,
                sampler,
                x,
                y,
                epoch_order(train_index, t["seed"], epoch),
                t["batch_size"],
                optimizer,
                scaler,
                precision,
                data.multi_label,
                shared,
            )
    else:
        divisor = reduce = None
        if ranks.world > 1:
            from ..distributed import all_reduce_gradients

            divisor = ranks.sum([train_index.numel()])[0]
            reduce = all_reduce_gradients

        def full_step() -> torch.Tensor:
            return train_step(
                net,
                graph,
                x,
                y_train,
                train_index,
                optimizer,
                scaler,
                precision,
                data.multi_label,
                divisor,
                reduce,
            ).detach()

    def logits() -> torch.Tensor:
        with torch.no_grad(), precision_scope(precision, device):
            return net(graph, x).float()

    if cuda_graph:
        full_step, logits = CudaGraphStep(full_step), CudaGraphStep(logits)
    if not minibatch:

        def step(epoch: int) -> torch.Tensor:
            return full_step()

    with folder.started() if folder is not None else contextlib.nullcontext():
        if ranks.writer:
            config_text = yaml.safe_dump(cfg, sort_keys=False).encode()
            write_atomically(run_dir / CONFIG, config_text, "config")
            log.write()
        bar = tqdm(
            range(start_epoch, t["epochs"]),
            initial=start_epoch,
            total=t["epochs"],
            desc=cfg["name"],
            disable=(None if t["progress"] is None else not t["progress"]) or not ranks.writer,
        )
        epoch = start_epoch - 1
        best, saved_at = None, -math.inf  # the best epoch's state not yet on disk; a save's time
        for epoch in bar:
            tic = time.perf_counter()
            model.train()
            loss = step(epoch)
            _sync(device)
            epoch_times.append(time.perf_counter() - tic)

            row = {
                "epoch": epoch + 1,
                "loss": ranks.sum(loss.reshape(1))[0],
                "epoch_time_s": epoch_times[-1],
            }
            if not math.isfinite(row["loss"]):
                raise FloatingPointError(
                    f"{cfg['name']}: the loss is {row['loss']} at epoch {epoch + 1} in "
                    f"{precision}; the run diverged (try a lower train.lr or another precision)"
                )
            if (epoch + 1) % t["eval_every"] == 0 or epoch + 1 == t["epochs"]:
                tic = time.perf_counter()
                model.eval()
                out = logits()
                scores = data.scores(out)
                val_loss = validation_loss(out, data, ranks) if stopper.needs_loss else None
                row.update(scores, eval_time_s=time.perf_counter() - tic)
                if stopper.update(epoch, scores["val"], val_loss) and ranks.writer:
                    best = {"epoch": epoch + 1, "model": _copied(model), "scores": scores}
                bar.set_postfix(
                    loss=f"{row['loss']:.4f}",
                    val=f"{scores['val']:.4f}",
                    epoch_s=f"{epoch_times[-1]:.4f}",
                )
            stop = stopper.should_stop(epoch)
            if ranks.writer:
                log.append(row)
            due = time.perf_counter() - saved_at >= t["checkpoint_every_s"]
            if ranks.writer and (due or stop or epoch + 1 == t["epochs"]):
                # the best model first: a run killed between the two files resumes from a
                # last checkpoint whose stopping state never names a best epoch not on disk
                if best is not None:
                    checkpoint.save(run_dir / checkpoint.BEST, best)
                    best = None
                log.write()
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
                saved_at = time.perf_counter()
                folder.commit()
            if stop:
                break
        bar.close()
        if ranks.writer:
            folder.commit()

    peak_gpu_mb = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    per_rank = ranks.gather(_rank_report(ranks, data, net, peak_gpu_mb))
    if not ranks.writer:
        return None
    best = checkpoint.load(run_dir / checkpoint.BEST, device)
    model.load_state_dict(best["model"])
    summary = {
        "name": cfg["name"],
        "run_dir": str(run_dir),
        "dataset": data.summary,
        "model": cfg["model"]["name"],
        "precision": precision,
        "dense_precision": dense_precision(precision, device),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "metric": data.metric,
        "epochs_run": epoch + 1,
        "best_epoch": best["epoch"],
        **{split: score for split, score in best["scores"].items()},
        "stopped_early": epoch + 1 < t["epochs"],
        "resumed_from_epoch": start_epoch if resume is not None else None,
        "load_s": data.load_seconds,
        "graph_s": data.graph_seconds,
        "reorder": cfg["graph"]["reorder"],
        "reorder_s": data.reorder_seconds,
        "preprocess_s": (data.load_seconds or 0.0) + data.graph_seconds,
        "cuda_graph": cuda_graph,
        **_time_stats(epoch_times, 1 + (WARMUP_CALLS if cuda_graph else 0)),
        "peak_gpu_memory_mb": peak_gpu_mb,
        "peak_host_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "total_s": time.perf_counter() - started,
        "torch": torch.__version__,
        "flashgnn": __version__,
        "config": cfg,
    }
    if ranks.world > 1 or partitioned:
        summary["distributed"] = _distributed_report(cfg, per_rank, minibatch)
    write_atomically(run_dir / SUMMARY, json.dumps(summary, indent=2).encode(), "summary")
    return summary


def _rank_report(ranks: Ranks, data, net, peak_gpu_mb: float | None) -> dict:
    """What one rank adds to the summary of a multi-process run: its peak memory, and, of a
    partition, its sizes and halo exchange (``FullGraphPartition.stats``) with the bytes a
    training step moves: each exchange of the last forward, and its reverse in the backward
    (the halo rows are the lower bound: each needed row crosses once per direction)."""
    report = {
        "rank": ranks.rank,
        "peak_gpu_memory_mb": peak_gpu_mb,
        "peak_host_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    part = data.partition
    if part is not None:
        stats = part.stats()
        report.update(stats)
        row_bytes = [
            e["width"] * e["dtype"].itemsize
            for e in getattr(net, "exchanges", [])
            if not e["cached"]
        ]
        report["step_bytes_received"] = 2 * part.num_halo * sum(row_bytes)
        report["step_bytes_sent"] = 2 * stats["halo_rows_sent"] * sum(row_bytes)
        report["step_bytes_lower_bound"] = report["step_bytes_received"]
        if getattr(net, "time_exchanges", False):
            report["exchanges_timed"] = net.exchange_ms()
        estimate = getattr(net, "memory_estimate", None)
        if callable(estimate) and (bytes_ := estimate()) is not None:
            report["peak_estimate_mb"] = bytes_["peak"] / 2**20
    return report


def _distributed_report(cfg: dict, per_rank: list[dict], minibatch: bool) -> dict:
    peaks = [r["peak_gpu_memory_mb"] for r in per_rank if r["peak_gpu_memory_mb"] is not None]
    return {
        "world": len(per_rank),
        "mode": "mini-batch" if minibatch else "full-graph",
        "partition": None if minibatch else cfg["distributed"]["partition"],
        "overlap": None if minibatch else cfg["distributed"]["overlap"],
        "peak_gpu_memory_mb_max": max(peaks) if peaks else None,
        "ranks": per_rank,
    }


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
