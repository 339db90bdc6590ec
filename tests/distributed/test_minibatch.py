"""Mini-batch training across ranks: the shares of a batch, and one step on 2 and 3 gloo
ranks against the one-process step on the whole batch (loss and every gradient, fp32, for
GCN, AGNN and GAT), then whole runs of 1 and 2 ranks epoch by epoch.

Full fanouts and no dropout make the ranks' blocks hold exactly the neighbourhoods of the
one-process blocks. GCN aggregates by the mean (norm "right"): its symmetric norm takes a
source's out-degree within the block, which depends on the batch, so a share's block
differs from the whole batch's there (as in DGL)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from flashgnn.data import load_dataset
from flashgnn.distributed import launch
from flashgnn.distributed.minibatch import data_parallel, loss_divisor, rank_seeds
from flashgnn.models import build_model
from flashgnn.sampling import NeighborSampler
from flashgnn.training import train
from flashgnn.training.loop import make_optimizer, minibatch_epoch, train_step
from flashgnn.training.precision import grad_scaler
from flashgnn.training.ranks import Ranks
from tests.helpers import rel_err, run_losses

MODELS = {
    "gcn": {"hidden_feats": 8, "dropout": 0.0, "norm": "right"},
    "agnn": {"hidden_feats": 8, "num_layers": 2, "dropout": 0.0},
    "gat": {"hidden_feats": 4, "heads": 2, "feat_drop": 0.0, "attn_drop": 0.0},
}


def test_rank_seeds_partition_the_batch():
    batch = torch.randperm(11)
    for world in (1, 2, 3, 4, 16):
        shares = [rank_seeds(batch, r, world) for r in range(world)]
        assert torch.equal(torch.cat(shares), batch)
        assert max(s.numel() for s in shares) - min(s.numel() for s in shares) <= 1
    assert loss_divisor(12, 3) == 4
    with pytest.raises(ValueError, match="rank"):
        rank_seeds(batch, 2, 2)


def _problem():
    dataset = load_dataset("synthetic", num_nodes=300, avg_degree=6, num_classes=4, num_features=8)
    graph = dataset.graph.add_self_loops()
    batch = dataset.train_mask.nonzero().flatten()[
        torch.randperm(150, generator=torch.Generator().manual_seed(1))[:61]
    ]
    return dataset, graph, dataset.x.float(), batch


def _model(name: str):
    torch.manual_seed(0)
    model = build_model(name, 8, 4, **MODELS[name])
    return model


def one_step_on_ranks(out: str) -> None:
    """Each model: one mini-batch step of this rank's share under DDP; rank 0 saves the
    summed loss and the gradients."""
    dataset, graph, x, batch = _problem()
    ranks = Ranks.of_this_process(torch.device("cpu"))
    results = {}
    for name in MODELS:
        model = _model(name)
        net = data_parallel(model, torch.device("cpu"))
        layers = len(model.layers)
        optimizer = make_optimizer(model.parameters(), 0.01, 0.0, torch.device("cpu"))
        loss = minibatch_epoch(
            net,
            NeighborSampler(graph, [-1] * layers),
            x,
            dataset.y,
            batch,
            batch.numel(),
            optimizer,
            grad_scaler("fp32", torch.device("cpu")),
            "fp32",
            False,
            ranks,
        )
        grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        results[name] = (ranks.sum(loss.reshape(1))[0], grads)
    if dist.get_rank() == 0:
        torch.save(results, out)


@pytest.mark.parametrize("world", [2, 3])
def test_a_step_on_ranks_equals_the_one_process_step(tmp_path, world):
    out = tmp_path / "ranks.pt"
    launch.spawn(one_step_on_ranks, world, (str(out),), device_type="cpu", timeout_s=60)
    results = torch.load(out)
    dataset, graph, x, batch = _problem()
    for name in MODELS:
        model = _model(name)
        sampler = NeighborSampler(graph, [-1] * len(model.layers))
        input_nodes, blocks = sampler.sample(batch)
        optimizer = make_optimizer(model.parameters(), 0.01, 0.0, torch.device("cpu"))
        loss = train_step(
            model,
            blocks,
            x[input_nodes],
            dataset.y[batch],
            None,
            optimizer,
            grad_scaler("fp32", torch.device("cpu")),
            "fp32",
            False,
        )
        ranks_loss, ranks_grads = results[name]
        assert abs(ranks_loss - loss.item()) <= 1e-5 * abs(loss.item()), name
        for key, p in model.named_parameters():
            assert rel_err(ranks_grads[key], p.grad) <= 1e-5, (name, key)


def test_a_run_on_two_ranks_follows_the_one_process_run(tmp_path):
    def config(devices):
        return {
            "dataset": {"name": "synthetic", "num_nodes": 500, "avg_degree": 6, "num_classes": 4},
            "model": {"name": "agnn", "hidden_feats": 8, "num_layers": 2, "dropout": 0.0},
            "train": {
                "epochs": 3,
                "progress": False,
                "batch_size": 64,
                "fanouts": [-1, -1],
                "devices": devices,
                "device": "cpu",
            },
            "output": {"dir": str(tmp_path / str(devices))},
        }

    one, two = train(config(1)), train(config(2))
    a, b = run_losses(tmp_path / "1"), run_losses(tmp_path / "2")
    assert len(a) == len(b) == 3
    assert all(abs(u - v) <= 1e-5 * abs(u) for u, v in zip(a, b)), (a, b)
    assert abs(one["val"] - two["val"]) <= 1e-9 and "distributed" in two
    assert "distributed" not in one
