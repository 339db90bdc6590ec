"""Training replayed from CUDA graphs (``train.cuda_graph``, ``flashgnn.cuda_graphs``): the
replayed epochs compute what eager epochs compute (same losses and scores, epoch by epoch,
with loss scaling in fp16), so the graph sees the weights each optimizer step writes and
replays evaluation with the current weights; the step object itself warms up, captures once
and replays."""

from __future__ import annotations

import pytest
import torch

from flashgnn.cuda_graphs import WARMUP_CALLS, CudaGraphStep, graphed
from flashgnn.ops import replay
from flashgnn.training import train
from tests.helpers import GPU, read_metrics

pytestmark = GPU


def test_step_warms_up_eagerly_then_replays_its_capture():
    x = torch.arange(4.0, device="cuda")
    calls = []

    def fn():
        calls.append(1)
        return x * 2 + 1

    step = CudaGraphStep(fn)
    for i in range(WARMUP_CALLS):
        assert torch.equal(step(), x * 2 + 1) and not step.captured
    first = step()  # capture (fn runs once more, recording) and replay
    assert step.captured and len(calls) == WARMUP_CALLS + 1
    x.mul_(3)
    again = step()
    assert again is first and torch.equal(again, x * 2 + 1)
    assert len(calls) == WARMUP_CALLS + 1  # replays do not call fn
    assert graphed(fn).captured


def test_a_step_that_synchronises_fails_with_the_reason():
    x = torch.ones(3, device="cuda")
    step = CudaGraphStep(lambda: x * x.sum().item())
    step()
    step()
    with pytest.raises(RuntimeError, match="synchronises with the host"):
        step()


def test_step_needs_a_warm_up():
    with pytest.raises(ValueError, match="warm-up"):
        CudaGraphStep(lambda: None, warmup=0)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(
    "model",
    [
        {"name": "gcn", "hidden_feats": 16, "dropout": 0.0},
        {"name": "agnn", "hidden_feats": 16, "num_layers": 2, "dropout": 0.0},
        {"name": "gat", "hidden_feats": 8, "heads": 2, "feat_drop": 0.0, "attn_drop": 0.0},
    ],
    ids=lambda m: m["name"],
)
def test_replayed_training_matches_eager_training(tmp_path, model, precision):
    def run(cuda_graph: bool, out):
        return train(
            {
                "dataset": {
                    "name": "synthetic",
                    "num_nodes": 2000,
                    "avg_degree": 8,
                    "num_classes": 4,
                },
                "model": model,
                "output": {"dir": str(out)},
                "train": {
                    "epochs": 10,
                    "patience": None,
                    "device": "cuda",
                    "precision": precision,
                    "progress": False,
                    "cuda_graph": cuda_graph,
                },
            }
        )

    eager, replayed = run(False, tmp_path / "eager"), run(True, tmp_path / "graph")
    a, b = read_metrics(tmp_path / "eager"), read_metrics(tmp_path / "graph")
    assert len(a) == len(b) == 10
    losses = [float(r["loss"]) for r in b]
    assert losses[-1] < losses[WARMUP_CALLS]  # the replayed steps train
    for ra, rb in zip(a, b):
        assert float(rb["loss"]) == pytest.approx(float(ra["loss"]), rel=1e-5, abs=1e-6), ra[
            "epoch"
        ]
        for split in ("train", "val", "test"):
            assert float(rb[split]) == pytest.approx(float(ra[split]), abs=1e-3), (
                ra["epoch"],
                split,
            )
    assert replayed["test"] == pytest.approx(eager["test"], abs=1e-3)


@pytest.mark.parametrize(
    "model",
    [
        {"name": "gcn", "hidden_feats": 16, "dropout": 0.5},
        {"name": "gat", "hidden_feats": 8, "heads": 2, "feat_drop": 0.0, "attn_drop": 0.5},
    ],
    ids=lambda m: m["name"],
)
def test_replayed_dropout_draws_new_masks(tmp_path, model):
    """With dropout the replays must not repeat one mask: at a learning rate of 0 every epoch
    has the same weights, so only the dropout draws (GAT: on the attention only) can change
    the loss."""
    train(
        {
            "dataset": {"name": "synthetic", "num_nodes": 2000, "avg_degree": 8, "num_classes": 4},
            "model": model,
            "output": {"dir": str(tmp_path)},
            "train": {
                "epochs": 8,
                "lr": 1e-30,
                "weight_decay": 0.0,
                "patience": None,
                "device": "cuda",
                "progress": False,
                "cuda_graph": True,
            },
        }
    )
    losses = [float(r["loss"]) for r in read_metrics(tmp_path)][WARMUP_CALLS:]
    assert len(set(losses)) == len(losses)


def test_auto_replays_a_small_graph(tmp_path):
    """train.cuda_graph's default, "auto", replays the steps of a small graph on CUDA."""
    summary = train(
        {
            "dataset": {"name": "synthetic", "num_nodes": 2000, "avg_degree": 8, "num_classes": 4},
            "model": {"name": "gcn", "hidden_feats": 16},
            "output": {"dir": str(tmp_path)},
            "train": {"epochs": 6, "patience": None, "device": "cuda", "progress": False},
        }
    )
    assert summary["cuda_graph"] is True
    losses = [float(r["loss"]) for r in read_metrics(tmp_path)]
    assert len(losses) == 6 and losses[-1] < losses[WARMUP_CALLS]


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_gat_layers_replaying_their_kernels_train_as_eager_layers(tmp_path, monkeypatch, precision):
    """Epochs of a GAT whose layers replay their kernels (``ops.replay``: steps not captured
    whole, train.cuda_graph false) follow the epochs of the same run with the layers' replay
    off, loss for loss and score for score, attention and feature dropout on: the replayed
    dropout masks are the eager ones."""

    def run(out):
        train(
            {
                "dataset": {
                    "name": "synthetic",
                    "num_nodes": 2000,
                    "avg_degree": 8,
                    "num_classes": 4,
                },
                "model": {
                    "name": "gat",
                    "hidden_feats": 8,
                    "heads": 4,
                    "feat_drop": 0.3,
                    "attn_drop": 0.3,
                },
                "output": {"dir": str(out)},
                "train": {
                    "epochs": 8,
                    "patience": None,
                    "device": "cuda",
                    "precision": precision,
                    "progress": False,
                    "cuda_graph": False,
                },
            }
        )
        return read_metrics(out)

    with monkeypatch.context() as m:
        m.setattr(replay.NodeReplay, "applies", lambda self, x, nnz: False)
        eager = run(tmp_path / "eager")
    replays = []
    replay_backward = replay.Slot.replay_backward

    def counted(slot):
        replays.append(slot)
        return replay_backward(slot)

    monkeypatch.setattr(replay.Slot, "replay_backward", counted)
    replayed = run(tmp_path / "replayed")
    assert len(replays) > 0  # the layers' backward passes replayed
    assert len(eager) == len(replayed) == 8
    for a, b in zip(eager, replayed):
        for column in ("loss", "train", "val", "test"):
            assert float(b[column]) == float(a[column]), (a["epoch"], column)
    losses = [float(r["loss"]) for r in replayed]
    assert losses[-1] < losses[0]
