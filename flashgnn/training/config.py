"""Run configurations: YAML files, ``key=value`` overrides and their validation.

A config has five sections and two top-level keys::

    name: gcn-cora            # run name (default: <model>-<dataset>)
    self_loops: true          # add a self-loop to every node before training
    dataset: {name: cora, ...}   # load_dataset's name, root and keyword arguments
    graph: {reorder: none}       # renumber the nodes once for locality (flashgnn.reorder)
    model: {name: gcn, ...}      # build_model's name and keyword arguments
    train: {epochs, lr, weight_decay, weight_decay_scope, patience, early_stopping, precision,
            seed, device, devices, eval_every, checkpoint_every_s, progress, cuda_graph,
            batch_size, fanouts}
    distributed: {partition, overlap, timeout_s, time_exchanges, features, exchange_columns,
                  partition_one_process}  # full-graph runs on a partition
    output: {root: runs, dir: null}  # the run folder: dir, else <root>/<name>-<timestamp>
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import yaml

from ..ops.precision import PRECISIONS
from ..reorder import METHODS as REORDER_METHODS
from .early_stopping import RULES

DEFAULTS = {
    "name": None,
    "self_loops": True,
    "dataset": {"name": "synthetic"},
    # the node order the run computes in: "none" keeps the dataset's; another method of
    # flashgnn.reorder renumbers the graph once, on the run's device, so that rows sharing
    # neighbours share ME-BCRS windows. Features, labels and masks follow; scores are taken in
    # the dataset's order.
    "graph": {"reorder": "none"},
    "model": {"name": "gcn"},
    "train": {
        "epochs": 200,
        "lr": 0.01,
        "weight_decay": 5e-4,
        # which parameters weight_decay applies to: "all", or "first_layer" (the model's
        # first_layer(), as Kipf & Welling's GCN)
        "weight_decay_scope": "all",
        "patience": 100,  # epochs without a better validation score before stopping; null: never
        # the stopping rule and the epoch kept: "score", "score_or_loss" (GAT's) or
        # "loss_window" (GCN's); training.early_stopping says what each does with patience
        "early_stopping": "score",
        "precision": "fp32",
        "seed": 0,
        "device": "auto",  # "auto": cuda when available, else cpu
        # processes (one per GPU on CUDA, rank r on cuda:r): 1 trains in this process; more
        # spawn that many ranks (flashgnn.distributed.launch), or come from torchrun
        "devices": 1,
        "eval_every": 1,
        # seconds between the run's checkpoints (the last epoch's state, the best epoch's model
        # and the metrics), also written after the first and the final epoch; 0: every epoch.
        # Three fsynced files an epoch cost more than a CUDA-graph step on a small graph
        "checkpoint_every_s": 30.0,
        "progress": None,  # the tqdm bar: null shows it on a terminal only
        # after two eager epochs, replay each step and evaluation from CUDA graphs (for graphs where
        # the host bounds an epoch; the graphs keep their own memory pools): true, false, or "auto"
        # (on CUDA for graphs of up to training.loop.AUTO_CUDA_GRAPH_EDGES nonzeros)
        "cuda_graph": "auto",
        # mini-batch training: batches of batch_size training nodes, each on the blocks that
        # NeighborSampler draws with one fanout per graph layer (-1: every in-edge), the layer
        # nearest the input first; null: full-graph steps. Evaluation stays full-graph.
        "batch_size": None,
        "fanouts": None,
    },
    # multi-process runs: how full-graph training splits the nodes into one part per rank
    # ("contiguous" id ranges, "degree"-balanced ranges, or "metis" through pymetis), whether
    # the halo exchange overlaps the local part of each aggregation, and the seconds a
    # collective waits for its peers before the run fails (null: 300 on CUDA, 60 on the CPU).
    # features: where a rank keeps its nodes' features, "device", "host" (registered host
    # memory, streamed through GCN's first projection every step) or "auto" (host where they
    # exceed FEATURES_DEVICE_MEMORY of the GPU); exchange_columns: the columns of one block of
    # a layer's halo exchange (null: as many as fit aggregation.EXCHANGE_MEMORY of the GPU);
    # partition_one_process: train.devices=1 trains on a one-part partition (the multi-process
    # code with no peers, a strong-scaling curve's first point) instead of the whole graph
    "distributed": {
        "partition": "contiguous",
        "overlap": True,
        "timeout_s": None,
        "time_exchanges": False,
        "features": "auto",
        "exchange_columns": None,
        "partition_one_process": False,
    },
    "output": {"root": "runs", "dir": None},
}
PARTITIONS = ("contiguous", "degree", "metis", "label-propagation")
WEIGHT_DECAY_SCOPES = ("all", "first_layer")
_FREE_SECTIONS = ("dataset", "model")  # keyword arguments checked by the loader / model


class ConfigError(ValueError):
    """A config that cannot run; the message names the key."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, except that ``1e-3`` is a float (YAML 1.2), not a string."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _parse(text: str):
    return yaml.load(text, Loader=_Loader)


def load_config(path) -> dict:
    """The mapping in YAML file ``path`` (not yet merged with the defaults)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    try:
        config = _parse(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(config, dict):
        raise ConfigError(f"{path} must hold a mapping of config keys, got {type(config).__name__}")
    return config


def apply_overrides(config: dict, overrides) -> dict:
    """A copy of ``config`` with every ``"dotted.key=value"`` of ``overrides`` set; values are
    read as YAML (``train.lr=1e-3`` is a float, ``train.patience=null`` None)."""
    config = copy.deepcopy(config)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        try:
            value = _parse(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: the value is not valid YAML: {e}") from e
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
            node = child
        node[leaf] = value
    return config


def _merge(defaults: dict, given: dict, where: str) -> dict:
    merged = copy.deepcopy(defaults)
    for key, value in given.items():
        if key not in defaults:
            raise ConfigError(f"unknown config key '{where}{key}'; valid keys: {sorted(defaults)}")
        if isinstance(defaults[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"config key '{where}{key}' must be a mapping, got {value!r}")
            # a given dataset or model section replaces the default one whole
            merged[key] = (
                dict(value)
                if key in _FREE_SECTIONS
                else _merge(defaults[key], value, f"{where}{key}.")
            )
        else:
            merged[key] = value
    return merged


def _require(ok: bool, key: str, need: str, value) -> None:
    if not ok:
        raise ConfigError(f"config key {key!r} must be {need}, got {value!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite(v) -> bool:
    return _is_number(v) and math.isfinite(v)


def resolve_config(config: dict) -> dict:
    """``config`` merged over DEFAULTS and checked: unknown keys and bad values raise
    ConfigError naming the key."""
    if not isinstance(config, dict):
        raise ConfigError(f"a config must be a mapping, got {type(config).__name__}")
    cfg = _merge(DEFAULTS, config, "")
    for section in _FREE_SECTIONS:
        name = cfg[section].get("name")
        _require(
            isinstance(name, str) and bool(name), f"{section}.name", "a non-empty string", name
        )
    t = cfg["train"]
    _require(
        _is_int(t["epochs"]) and t["epochs"] >= 1, "train.epochs", "an integer >= 1", t["epochs"]
    )
    _require(_is_finite(t["lr"]) and t["lr"] > 0, "train.lr", "a finite number > 0", t["lr"])
    _require(
        _is_finite(t["weight_decay"]) and t["weight_decay"] >= 0,
        "train.weight_decay",
        "a finite number >= 0",
        t["weight_decay"],
    )
    _require(
        t["patience"] is None or (_is_int(t["patience"]) and t["patience"] >= 1),
        "train.patience",
        "an integer >= 1 or null",
        t["patience"],
    )
    _require(
        t["early_stopping"] in RULES,
        "train.early_stopping",
        f"one of {RULES}",
        t["early_stopping"],
    )
    _require(
        t["weight_decay_scope"] in WEIGHT_DECAY_SCOPES,
        "train.weight_decay_scope",
        f"one of {WEIGHT_DECAY_SCOPES}",
        t["weight_decay_scope"],
    )
    _require(
        t["precision"] in PRECISIONS, "train.precision", f"one of {PRECISIONS}", t["precision"]
    )
    _require(
        _is_int(t["seed"]) and 0 <= t["seed"] < 2**32,
        "train.seed",
        "an integer in [0, 2**32)",
        t["seed"],
    )
    _require(
        isinstance(t["device"], str),
        "train.device",
        "a device string ('auto', 'cpu', 'cuda:0')",
        t["device"],
    )
    _require(
        _is_int(t["eval_every"]) and t["eval_every"] >= 1,
        "train.eval_every",
        "an integer >= 1",
        t["eval_every"],
    )
    _require(
        _is_finite(t["checkpoint_every_s"]) and t["checkpoint_every_s"] >= 0,
        "train.checkpoint_every_s",
        "a number of seconds >= 0",
        t["checkpoint_every_s"],
    )
    _require(
        isinstance(t["cuda_graph"], bool) or t["cuda_graph"] == "auto",
        "train.cuda_graph",
        "true, false or auto",
        t["cuda_graph"],
    )
    _require(
        t["progress"] in (None, True, False), "train.progress", "true, false or null", t["progress"]
    )
    _require(
        t["batch_size"] is None or (_is_int(t["batch_size"]) and t["batch_size"] >= 1),
        "train.batch_size",
        "an integer >= 1 or null",
        t["batch_size"],
    )
    fanouts = t["fanouts"]
    _require(
        fanouts is None
        or (
            isinstance(fanouts, list)
            and bool(fanouts)
            and all(_is_int(f) and (f >= 1 or f == -1) for f in fanouts)
        ),
        "train.fanouts",
        "a non-empty list of integers >= 1 or -1 (every in-edge), or null",
        fanouts,
    )
    _require(
        (fanouts is None) == (t["batch_size"] is None),
        "train.fanouts",
        "set together with train.batch_size (mini-batch training) or not at all",
        fanouts,
    )
    _require(
        t["batch_size"] is None or t["cuda_graph"] is not True,
        "train.cuda_graph",
        "false or auto with train.batch_size (mini-batch steps are not replayed)",
        t["cuda_graph"],
    )
    _require(
        _is_int(t["devices"]) and t["devices"] >= 1,
        "train.devices",
        "an integer >= 1 (the number of processes, one per GPU on CUDA)",
        t["devices"],
    )
    _require(
        t["devices"] == 1 or t["cuda_graph"] is not True,
        "train.cuda_graph",
        "false or auto with train.devices > 1 (steps with collectives are not replayed)",
        t["cuda_graph"],
    )
    _require(
        cfg["graph"]["reorder"] in REORDER_METHODS,
        "graph.reorder",
        f"one of {REORDER_METHODS}",
        cfg["graph"]["reorder"],
    )
    d = cfg["distributed"]
    _require(
        d["partition"] in PARTITIONS,
        "distributed.partition",
        f"one of {PARTITIONS}",
        d["partition"],
    )
    _require(isinstance(d["overlap"], bool), "distributed.overlap", "true or false", d["overlap"])
    _require(
        isinstance(d["time_exchanges"], bool),
        "distributed.time_exchanges",
        "true or false",
        d["time_exchanges"],
    )
    _require(
        d["features"] in ("auto", "device", "host"),
        "distributed.features",
        "auto, device or host",
        d["features"],
    )
    _require(
        d["exchange_columns"] is None
        or (_is_int(d["exchange_columns"]) and d["exchange_columns"] >= 1),
        "distributed.exchange_columns",
        "an integer >= 1, or null",
        d["exchange_columns"],
    )
    _require(
        isinstance(d["partition_one_process"], bool),
        "distributed.partition_one_process",
        "true or false",
        d["partition_one_process"],
    )
    _require(
        d["timeout_s"] is None or (_is_finite(d["timeout_s"]) and d["timeout_s"] > 0),
        "distributed.timeout_s",
        "a number of seconds > 0, or null",
        d["timeout_s"],
    )
    _require(isinstance(cfg["self_loops"], bool), "self_loops", "true or false", cfg["self_loops"])
    if cfg["name"] is None:
        cfg["name"] = f"{cfg['model']['name']}-{cfg['dataset']['name']}"
    _require(
        isinstance(cfg["name"], str) and "/" not in cfg["name"],
        "name",
        "a string without '/'",
        cfg["name"],
    )
    return cfg
