"""Training with graph.reorder: the key's validation, runs that follow the run without it (the
same losses and scores, the same model: its outputs on the original graph), scores taken in
the dataset's order, mini-batches of the same nodes, and a partitioned run of two processes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from flashgnn.data import load_dataset
from flashgnn.reorder import METHODS
from flashgnn.training import ConfigError, resolve_config, train
from flashgnn.training import run_data as run_data_module
from flashgnn.training.loop import build_configured_model, training_targets
from flashgnn.training.ranks import Ranks
from tests.helpers import needs_gpu, read_metrics

DATASET = {"name": "synthetic", "num_nodes": 1200, "avg_degree": 8, "num_classes": 4}
MODEL = {"name": "gcn", "hidden_feats": 16, "dropout": 0.0}  # no random masks: runs compare


pytestmark = pytest.mark.usefixtures("one_thread")


def config(out: Path, reorder: str, **train_keys) -> dict:
    return {
        "dataset": DATASET,
        "model": MODEL,
        "graph": {"reorder": reorder},
        "train": {"epochs": 10, "progress": False, "patience": None, **train_keys},
        "output": {"dir": str(out)},
    }


def outputs_on_the_original_graph(run_dir: Path) -> torch.Tensor:
    """The last checkpoint's model applied to the dataset in its own order."""
    dataset = load_dataset(DATASET["name"], **{k: v for k, v in DATASET.items() if k != "name"})
    model = build_configured_model(MODEL, dataset.num_features, dataset.num_classes)
    model.load_state_dict(torch.load(run_dir / "last.pt", weights_only=False)["model"])
    model.eval()
    with torch.no_grad():
        return model(dataset.graph.add_self_loops(), dataset.x.float())


def test_the_key_defaults_to_none_and_takes_every_method():
    assert resolve_config({})["graph"] == {"reorder": "none"}
    for method in METHODS:
        assert resolve_config({"graph": {"reorder": method}})["graph"]["reorder"] == method


@pytest.mark.parametrize("value", ["bfs", "RCM", None, False, 1])
def test_an_unknown_method_names_the_key(value):
    with pytest.raises(ConfigError, match=r"'graph.reorder' must be one of \('none', 'rcm'"):
        resolve_config({"graph": {"reorder": value}})
    with pytest.raises(ConfigError, match="unknown config key 'graph.order'"):
        resolve_config({"graph": {"order": "rcm"}})


@pytest.mark.parametrize("method", ["rcm", "community"])
def test_a_reordered_run_follows_the_run_without(tmp_path, method):
    plain = train(config(tmp_path / "none", "none"))
    reordered = train(config(tmp_path / method, method))
    assert plain["reorder"] == "none" and plain["reorder_s"] is None
    assert reordered["reorder"] == method and reordered["reorder_s"] > 0
    rows, new_rows = read_metrics(tmp_path / "none"), read_metrics(tmp_path / method)
    assert len(rows) == len(new_rows) == 10
    for a, b in zip(rows, new_rows):
        assert float(b["loss"]) == pytest.approx(float(a["loss"]), rel=1e-5)
        for split in ("train", "val", "test"):  # the same predictions, up to a near tie
            assert abs(float(b[split]) - float(a[split])) <= 1 / DATASET["num_nodes"]
    want = outputs_on_the_original_graph(tmp_path / "none")
    got = outputs_on_the_original_graph(tmp_path / method)
    assert float((got - want).abs().max()) <= 1e-4 * float(want.abs().max())


def test_run_data_scores_outputs_in_the_dataset_order():
    cfg = resolve_config({"dataset": DATASET, "graph": {"reorder": "rcm"}})
    dataset = load_dataset(DATASET["name"], **{k: v for k, v in DATASET.items() if k != "name"})
    data = run_data_module.whole_graph(cfg, Ranks(0, 1, torch.device("cpu")), dataset, 0.0)
    r = data.reordering
    assert r is not None and r.method == "rcm"
    assert torch.equal(data.x, r.apply_to_nodes(dataset.x.float()))
    assert torch.equal(data.y, r.apply_to_nodes(dataset.y))
    assert torch.equal(data.masks[1], r.apply_to_nodes(dataset.val_mask))
    n = dataset.num_nodes
    src, dst = r.inverse[dataset.graph.add_self_loops().edge_index]
    assert torch.equal(
        torch.sort(data.graph.indices + n * data.graph.dst_of_csr()).values,
        torch.sort(src + n * dst).values,
    )
    logits = torch.randn(dataset.num_nodes, dataset.num_classes)  # in the dataset's order
    splits = ("train", "val", "test")
    want = {s: dataset.evaluate(logits, mask=getattr(dataset, f"{s}_mask")) for s in splits}
    scores = data.scores(r.apply_to_nodes(logits))
    assert scores == want
    assert len(set(scores.values())) > 1  # the splits differ: a mix-up of masks would show
    # the training nodes in the dataset's order, by their new ids
    index, labels = training_targets(data.masks[0], data.y, r)
    assert torch.equal(r.perm[index], dataset.train_mask.nonzero().flatten())
    assert torch.equal(labels, dataset.y[dataset.train_mask])


def test_a_mini_batch_run_draws_the_same_nodes(tmp_path):
    keys = {"batch_size": 200, "fanouts": [-1, -1]}  # every in-edge: no sampling draws
    train(config(tmp_path / "none", "none", **keys))
    train(config(tmp_path / "rcm", "rcm", **keys))
    for a, b in zip(read_metrics(tmp_path / "none"), read_metrics(tmp_path / "rcm")):
        assert float(b["loss"]) == pytest.approx(float(a["loss"]), rel=1e-5)


def test_a_dataset_read_rank_by_rank_cannot_be_reordered():
    cfg = resolve_config(
        {"dataset": {"name": "generated-igb-medium"}, "graph": {"reorder": "community"}}
    )
    ranks = SimpleNamespace(rank=0, world=2, device=torch.device("cpu"))
    with pytest.raises(ConfigError, match="read rank by rank.*graph.reorder=none"):
        run_data_module.partitioned(cfg, ranks, None, None)


def test_two_ranks_on_the_reordered_graph_follow_the_one_process_run(tmp_path):
    cfg = config(tmp_path / "one", "none", device="cpu", epochs=3)
    one = train(cfg)
    two = train(config(tmp_path / "two", "rcm", device="cpu", epochs=3, devices=2))
    for a, b in zip(read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")):
        assert float(b["loss"]) == pytest.approx(float(a["loss"]), rel=1e-5)
    assert abs(one["test"] - two["test"]) <= 1e-9
    assert two["reorder"] == "rcm"


@needs_gpu
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_a_reordered_run_on_the_gpu_follows_the_run_without(tmp_path, cuda_graph):
    keys = {"device": "cuda", "cuda_graph": cuda_graph}
    plain = train(config(tmp_path / "none", "none", **keys))
    reordered = train(config(tmp_path / "rcm", "rcm", **keys))
    for a, b in zip(read_metrics(tmp_path / "none"), read_metrics(tmp_path / "rcm")):
        assert float(b["loss"]) == pytest.approx(float(a["loss"]), rel=1e-4)
    assert abs(plain["test"] - reordered["test"]) <= 0.01
