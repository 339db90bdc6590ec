"""Training runs of several processes: full-graph runs against the one-process run, rank 0's
checkpoint resumed on 1 and on 2 ranks, a rank failing mid-run, rank 0's run folder.

The full-graph tests but the stand-in's need ``flashgnn.distributed.FullGraphPartition`` and
``all_reduce_gradients``."""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from flashgnn.distributed import launch
from flashgnn.training import loop, resolve_config, train


def losses(run_dir: Path) -> list[float]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


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
    assert close(losses(tmp_path / "one"), losses(tmp_path / "two"))
    assert abs(one["test"] - two["test"]) <= 1e-9
    report = two["distributed"]
    assert report["mode"] == "full-graph" and report["partition"] == "contiguous"
    assert sum(r["num_own"] for r in report["ranks"]) == 500


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
        assert close(losses(run), losses(tmp_path / "straight")), devices
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


class ReplicatedStandIn:
    """A stand-in for FullGraphPartition's interface, for the loop's side alone: every rank
    holds the whole graph and computes every row, and keeps its contiguous share of the
    output rows, labels and masks (no halo; the loss scaling, gradient sums, scores and
    records are the loop's)."""

    def __init__(self, dataset, *, self_loops, device, k):
        from flashgnn.training.loop import prepare_graph

        rank, world = dist.get_rank(), dist.get_world_size()
        self.own = torch.arange(dataset.num_nodes).tensor_split(world)[rank]
        self.graph = prepare_graph(dataset.graph, self_loops, device, k)
        self.x = dataset.x
        self.y = dataset.y[self.own]
        self.masks = [getattr(dataset, f"{s}_mask")[self.own] for s in ("train", "val", "test")]
        self.num_own, self.num_halo = self.own.numel(), 0

    @classmethod
    def build(cls, dataset, *, method, self_loops, device, k):
        return cls(dataset, self_loops=self_loops, device=device, k=k)

    def wrap(self, model, overlap):
        own = self.own

        class Rows(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, graph, x):
                return self.model(graph, x).index_select(0, own)

        return Rows()

    def stats(self):
        return {"halo_rows": 0}


def sum_gradients(model, group=None):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)


def train_with_stand_in(cfg: dict) -> None:
    import flashgnn.distributed as package

    package.FullGraphPartition = ReplicatedStandIn
    package.all_reduce_gradients = sum_gradients
    train(cfg)


def test_full_graph_loop_with_a_replicated_stand_in(tmp_path):
    """The loop's full-graph side (loss over the global training count, gradients summed,
    scores summed, rank 0's records) against the one-process run, without the partition."""
    model = {"name": "gat", "hidden_feats": 4, "heads": 2, "feat_drop": 0.0, "attn_drop": 0.0}
    one = train(config(tmp_path / "one", 1, 4, model))
    cfg = resolve_config(config(tmp_path / "two", 2, 4, model))
    launch.spawn(train_with_stand_in, 2, (cfg,), device_type="cpu", timeout_s=60)
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert close(losses(tmp_path / "one"), losses(tmp_path / "two"))
    assert abs(one["test"] - two["test"]) <= 1e-9 and abs(one["val"] - two["val"]) <= 1e-9
    assert [r["num_own"] for r in two["distributed"]["ranks"]] == [250, 250]
