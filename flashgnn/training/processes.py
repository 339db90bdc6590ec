"""How many processes a run takes, and starting them: ``train.devices`` > 1 spawns that many
ranks (``distributed.launch.spawn``); under torchrun the ranks exist already and each joins
the process group. Every rank then runs the training loop itself; rank 0 writes the run
folder, and the spawning process returns the summary it wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from ..distributed.launch import DEFAULT_TIMEOUT_S, Placement, join_group, spawn
from .config import ConfigError
from .run_folder import SUMMARY, RunFolder


def rank_device(name: str, place: Placement) -> torch.device:
    """The device of rank ``place`` for ``train.device`` ``name`` ("auto", "cpu" or "cuda";
    a rank on CUDA takes ``cuda:<local_rank>``)."""
    if name not in ("auto", "cpu", "cuda"):
        raise ConfigError(
            f"config key 'train.device' must be 'auto', 'cpu' or 'cuda' with several processes "
            f"(rank r takes cuda:r), got {name!r}"
        )
    cuda = name == "cuda" or (name == "auto" and torch.cuda.is_available())
    if not cuda:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("config key 'train.device' is 'cuda' but CUDA is not available")
    return torch.device("cuda", place.local_rank)


def check_world(cfg: dict, place: Placement | None) -> int:
    """The number of ranks of the run: ``train.devices``, or torchrun's WORLD_SIZE, which
    ``train.devices`` (when not 1) must match; on CUDA no more than the GPUs."""
    devices = cfg["train"]["devices"]
    if place is not None and devices not in (1, place.world):
        raise ConfigError(
            f"config key 'train.devices' is {devices} but torchrun started {place.world} "
            "processes; leave it at 1 under torchrun or make them agree"
        )
    world = devices if place is None else place.world
    device = rank_device(cfg["train"]["device"], place or Placement(0, world, 0))
    if device.type == "cuda" and place is None and world > torch.cuda.device_count():
        raise ConfigError(
            f"config key 'train.devices' is {world} but only {torch.cuda.device_count()} GPUs "
            "are visible (one process per GPU)"
        )
    return world


def timeout_s(cfg: dict, device_type: str) -> float:
    return cfg["distributed"]["timeout_s"] or DEFAULT_TIMEOUT_S[device_type]


def _spawned(train_fn, cfg, resume, overwrite, dataset, load_seconds) -> None:
    train_fn(cfg, resume=resume, overwrite=overwrite, dataset=dataset, load_seconds=load_seconds)


def run_ranks(train_fn, cfg: dict, place: Placement | None, run_dir: Path, **kw) -> dict | None:
    """Run ``train_fn(cfg, **kw)`` on every rank: in ``train.devices`` spawned processes
    (``place`` None; returns the summary rank 0 wrote in ``run_dir``), or in this torchrun
    rank (returns what ``train_fn`` returns here: the summary on rank 0, None elsewhere)."""
    world = check_world(cfg, place)
    device_type = rank_device(cfg["train"]["device"], place or Placement(0, world, 0)).type
    if place is not None:
        join_group(place, device_type, timeout_s(cfg, device_type))
        try:
            return train_fn(cfg, **kw)
        finally:
            dist.destroy_process_group()
    # the checks rank 0 makes, before any process starts
    RunFolder(run_dir, resume=kw["resume"] is not None, overwrite=kw["overwrite"])
    cfg = {**cfg, "output": {**cfg["output"], "dir": str(run_dir)}}
    args = (train_fn, cfg, kw["resume"], kw["overwrite"], kw["dataset"], kw["load_seconds"])
    spawn(_spawned, world, args, device_type=device_type, timeout_s=timeout_s(cfg, device_type))
    return json.loads((run_dir / SUMMARY).read_text())
