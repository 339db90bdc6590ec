"""The launcher: spawned ranks, torchrun's environment, a failing rank stopping the run, the
``flashgnn train ... train.devices=2`` command line, and the checks of ``train.devices``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml

from flashgnn.distributed import launch
from flashgnn.training import ConfigError, resolve_config
from flashgnn.training.processes import check_world, rank_device
from tests.helpers import REPO_ROOT


def sum_of_ranks(out: str) -> None:
    """Every rank adds its rank + 1; rank 0 writes the total."""
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    if dist.get_rank() == 0:
        Path(out).write_text(f"{dist.get_world_size()} {int(t.item())}")


def fail_on_rank_one() -> None:
    """Rank 1 raises; rank 0 waits for it in a collective that never completes."""
    if dist.get_rank() == 1:
        raise ValueError("injected failure on rank 1")
    dist.barrier()


def test_spawned_ranks_form_one_group(tmp_path):
    out = tmp_path / "sum"
    launch.spawn(sum_of_ranks, 2, (str(out),), device_type="cpu", timeout_s=30)
    assert out.read_text() == "2 3"


def test_a_rank_that_raises_stops_the_others_with_its_error(capfd):
    tic = time.perf_counter()
    with pytest.raises(launch.RankFailedError, match="rank 1 of 2.*injected failure") as info:
        launch.spawn(fail_on_rank_one, 2, device_type="cpu", timeout_s=120)
    # the parent stops rank 0 as soon as rank 1 fails, long before the collective's timeout
    assert time.perf_counter() - tic < 60
    assert info.value.rank == 1 and "Traceback" in info.value.details
    assert "injected failure on rank 1" in capfd.readouterr().err


def test_spawn_checks_its_arguments():
    with pytest.raises(ValueError, match="world"):
        launch.spawn(sum_of_ranks, 0, device_type="cpu", timeout_s=1)
    with pytest.raises(ValueError, match="device_type"):
        launch.spawn(sum_of_ranks, 2, device_type="tpu", timeout_s=1)


def test_torchrun_environment_is_read(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launch.from_environment() is None
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert launch.from_environment() == launch.Placement(2, 4, 1)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="RANK=4, WORLD_SIZE=4"):
        launch.from_environment()
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK='two'"):
        launch.from_environment()
    monkeypatch.delenv("RANK")
    with pytest.raises(ValueError, match="RANK is not"):
        launch.from_environment()


def test_backend_follows_the_device():
    assert launch.backend("cuda") == "nccl" and launch.backend("cpu") == "gloo"


@pytest.mark.parametrize("devices", [0, -1, "2", True, 1.5, None])
def test_bad_devices_values_are_config_errors(devices):
    with pytest.raises(ConfigError, match="train.devices"):
        resolve_config({"train": {"devices": devices}})


def test_devices_must_agree_with_torchrun_and_the_device():
    cfg = resolve_config({"train": {"devices": 2, "device": "cpu"}})
    assert check_world(cfg, None) == 2
    assert check_world(cfg, launch.Placement(1, 2, 1)) == 2
    with pytest.raises(ConfigError, match="torchrun started 4"):
        check_world(cfg, launch.Placement(0, 4, 0))
    one = resolve_config({"train": {"device": "cpu"}})
    assert check_world(one, launch.Placement(0, 3, 0)) == 3  # devices 1: torchrun decides
    with pytest.raises(ConfigError, match="'auto', 'cpu' or 'cuda'"):
        rank_device("cuda:1", launch.Placement(0, 2, 0))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            rank_device("cuda", launch.Placement(0, 2, 0))
    with pytest.raises(ConfigError, match="train.cuda_graph"):
        resolve_config({"train": {"devices": 2, "cuda_graph": True}})
    for key, value in (("partition", "random"), ("overlap", "yes"), ("timeout_s", 0)):
        with pytest.raises(ConfigError, match=f"distributed.{key}"):
            resolve_config({"distributed": {key: value}})


def small_minibatch_config(out: Path) -> dict:
    return {
        "dataset": {"name": "synthetic", "num_nodes": 400, "avg_degree": 6, "num_classes": 4},
        "model": {"name": "gcn", "hidden_feats": 8, "dropout": 0.0, "norm": "right"},
        "train": {"epochs": 2, "progress": False, "batch_size": 100, "fanouts": [-1, -1]},
        "output": {"dir": str(out)},
    }


def _flashgnn(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("WORLD_SIZE", None)
    return subprocess.run(
        [sys.executable, "-m", "flashgnn", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env=env,
    )


def test_flashgnn_train_spawns_the_devices(tmp_path):
    """The command line end to end: two gloo ranks, rank 0's run folder and summary."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(small_minibatch_config(tmp_path / "run")))
    done = _flashgnn("train", "--config", str(config), "train.devices=2", "train.device=cpu")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["distributed"]["world"] == 2
    assert [r["rank"] for r in summary["distributed"]["ranks"]] == [0, 1]
    assert summary["epochs_run"] == 2 and "-> " in done.stdout
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "best.pt",
        "config.yaml",
        "last.pt",
        "metrics.csv",
        "summary.json",
    ]


def test_flashgnn_train_reports_a_bad_devices_value(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(small_minibatch_config(tmp_path / "run")))
    done = _flashgnn("train", "--config", str(config), "train.devices=0")
    assert done.returncode == 2 and "train.devices" in done.stderr
    assert not (tmp_path / "run").exists()


def test_torchrun_starts_the_ranks_and_rank_zero_reports(tmp_path):
    config = tmp_path / "run.yaml"
    cfg = small_minibatch_config(tmp_path / "run")
    cfg["train"]["device"] = "cpu"
    config.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        # --standalone: a free port of its own, not 29500, which another run may hold
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + ["-m", "flashgnn", "train", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("-> ") == 1  # rank 0 alone reports
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["distributed"]["world"] == 2
