"""Training runs of several processes: full-graph runs against the one-process run, rank 0's
checkpoint resumed on 1 and on 2 ranks, a rank failing mid-run, rank 0's run folder."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from flashgnn.distributed import launch
from flashgnn.training import loop, train
from tests.helpers import run_losses


def config(out: Path, devices: int, epochs: int, model: dict | None = None, **train_keys) -> dict:
    return {
        "dataset": {"name": "synthetic", "num_nodes": 500, "avg_degree": 6, "num_classes": 4},
        "model": model or {"name": "gcn", "hidden_feats": 8, "dropout": 0.0},
        "train": {
            "epochs": epochs,
            "progress": False,
            "devices": devices,
            "device": "cpu",
            "patience": None,
            **train_keys,
        },
        "output": {"dir": str(out)},
    }


def close(a: list[float], b: list[float], tol: float = 1e-5) -> bool:
    return len(a) == len(b) and all(abs(u - v) <= tol * abs(u) for u, v in zip(a, b))


MODELS = [
    {"name": "gcn", "hidden_feats": 8, "dropout": 0.0},
    {"name": "agnn", "hidden_feats": 8, "num_layers": 2, "dropout": 0.0},
    {"name": "gat", "hidden_feats": 4, "heads": 2, "feat_drop": 0.0, "attn_drop": 0.0},
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m["name"])
def test_full_graph_on_two_ranks_follows_the_one_process_run(tmp_path, model):
    one = train(config(tmp_path / "one", 1, 4, model))
    two = train(config(tmp_path / "two", 2, 4, model))
    assert close(run_losses(tmp_path / "one"), run_losses(tmp_path / "two"))
    assert abs(one["test"] - two["test"]) <= 1e-9
    report = two["distributed"]
    assert report["mode"] == "full-graph" and report["partition"] == "contiguous"
    assert sum(r["num_own"] for r in report["ranks"]) == 500
    assert all(r["peak_estimate_mb"] > 0 for r in report["ranks"])  # every model's estimate


@pytest.mark.parametrize("partition", ["contiguous", "label-propagation"])
def test_a_generated_graph_read_rank_by_rank_follows_the_one_process_run(tmp_path, partition):
    """The generated IGB-like graph, each rank generating its own rows: in ranges, or (another
    partition) after every rank has generated the structure and computed the same parts."""
    dataset = {"name": "generated-igb-medium", "num_nodes": 2000, "num_edges": 16000}
    dataset |= {"num_features": 16}
    runs = {}
    for devices in (1, 2):
        cfg = config(tmp_path / str(devices), devices, 3)
        cfg["dataset"] = dataset
        cfg["distributed"] = {"partition": partition}
        runs[devices] = train(cfg)
    assert close(run_losses(tmp_path / "1"), run_losses(tmp_path / "2"))
    assert abs(runs[1]["test"] - runs[2]["test"]) <= 1e-9
    ranks = runs[2]["distributed"]["ranks"]
    assert sum(r["num_own"] for r in ranks) == 2000
    if partition == "label-propagation":  # the parts follow the graph's classes, not id ranges
        assert ranks[0]["edge_cut"] < 0.5 * ranks[0]["num_edges"]


def test_a_one_part_partition_follows_the_whole_graph_run(tmp_path):
    """distributed.partition_one_process: one process (a group of one) trains on a one-part
    partition, with the features on the device or streamed from host memory, as the
    single-process trainer trains on the whole graph."""
    whole = train(config(tmp_path / "whole", 1, 4))
    for features in ("device", "host"):
        cfg = config(tmp_path / features, 1, 4)
        cfg["distributed"] = {"partition_one_process": True, "features": features}
        run = train(cfg)
        assert close(run_losses(tmp_path / "whole"), run_losses(tmp_path / features)), features
        assert abs(run["test"] - whole["test"]) <= 1e-9
        (rank,) = run["distributed"]["ranks"]
        assert rank["num_own"] == 500 and rank["num_halo"] == 0
    assert "distributed" not in whole
    # the generated graph, read by the one rank as a partition
    dataset = {"name": "generated-igb-medium", "num_nodes": 1500, "num_edges": 12000}
    dataset |= {"num_features": 32}
    for name, one in (("generated-whole", False), ("generated-part", True)):
        cfg = config(tmp_path / name, 1, 3)
        cfg["dataset"] = dataset
        cfg["distributed"] = {"partition_one_process": one}
        train(cfg)
    assert close(run_losses(tmp_path / "generated-whole"), run_losses(tmp_path / "generated-part"))


@pytest.mark.parametrize(
    "keys",
    [{}, {"batch_size": 100, "fanouts": [-1, -1]}],
    ids=["full-graph", "mini-batch"],
)
def test_rank_zero_checkpoint_resumes_on_one_and_on_two_ranks(tmp_path, keys):
    model = {"name": "gcn", "hidden_feats": 8, "dropout": 0.0, "norm": "right"}
    train(config(tmp_path / "straight", 1, 4, model, **keys))
    train(config(tmp_path / "first", 2, 2, model, **keys))
    for devices in (1, 2):
        run = tmp_path / f"resumed-on-{devices}"
        shutil.copytree(tmp_path / "first", run)
        train(config(run, devices, 4, model, **keys), resume=run)
        assert close(run_losses(run), run_losses(tmp_path / "straight")), devices
        assert json.loads((run / "summary.json").read_text())["resumed_from_epoch"] == 2


def train_failing_on_rank_one(cfg: dict) -> None:
    """``train``, but rank 1's third step raises (rank 0 then waits in a collective)."""
    if dist.get_rank() == 1:
        step, calls = loop.train_step, []

        def failing(*args, **kw):
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("injected step failure")
            return step(*args, **kw)

        loop.train_step = failing
    train(cfg)


def test_a_rank_failing_mid_run_ends_the_run_with_its_error(tmp_path):
    cfg = config(tmp_path / "run", 2, 5, batch_size=100, fanouts=[-1, -1])
    tic = time.perf_counter()
    with pytest.raises(launch.RankFailedError, match="rank 1 of 2.*injected step failure"):
        launch.spawn(train_failing_on_rank_one, 2, (cfg,), device_type="cpu", timeout_s=60)
    assert time.perf_counter() - tic < 60
