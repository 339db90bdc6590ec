"""Training from configs: accuracy on cora against the GCN paper and across precisions,
resuming, the run folder's records, the command line, and clear errors for bad input."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from flashgnn import get_precision
from flashgnn.cli import main as cli_main
from flashgnn.data import load_dataset
from flashgnn.training import ConfigError, apply_overrides, load_config, resolve_config, train
from flashgnn.training.loop import AUTO_CUDA_GRAPH_EDGES, use_cuda_graph
from flashgnn.training.precision import RoundedMatmuls, precision_scope
from tests.helpers import needs_gpu, read_metrics

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


pytestmark = pytest.mark.usefixtures("one_thread")


def small_synthetic(tmp_path: Path, **train) -> dict:
    return {
        "dataset": {"name": "synthetic", "num_nodes": 1500, "avg_degree": 8, "num_classes": 4},
        "model": {"name": "gcn", "hidden_feats": 16, "dropout": 0.5},
        "train": {"epochs": 12, "progress": False, **train},
        "output": {"dir": str(tmp_path)},
    }


def straight_and_resumed(tmp_path: Path, epochs: int, **train_keys) -> tuple[dict, dict, dict]:
    """Summaries of ``small_synthetic`` runs: one of ``epochs`` epochs straight through (in
    tmp_path/straight), one stopped after half of them and the same run resumed to the end
    (both in tmp_path/resumed)."""
    straight = train(small_synthetic(tmp_path / "straight", epochs=epochs, **train_keys))
    first = train(small_synthetic(tmp_path / "resumed", epochs=epochs // 2, **train_keys))
    resumed = train(
        small_synthetic(tmp_path / "resumed", epochs=epochs, **train_keys),
        resume=tmp_path / "resumed",
    )
    return straight, first, resumed


# ---------------------------------------------------------------------------- accuracy
@pytest.fixture(scope="module")
def cora_runs(tmp_path_factory, data_dir_module):
    """configs/gcn-cora.yaml (2-layer GCN, Kipf & Welling's settings) in fp32, fp16, bf16."""
    config = load_config(CONFIGS / "gcn-cora.yaml")
    dataset = load_dataset("cora", root=data_dir_module, normalize_features=True)
    runs = {}
    for precision in ("fp32", "fp16", "bf16"):
        cfg = apply_overrides(config, [f"train.precision={precision}", "train.progress=false"])
        cfg["output"] = {"dir": str(tmp_path_factory.mktemp(precision))}
        runs[precision] = train(cfg, dataset=dataset, load_seconds=0.0)
    return runs


@pytest.fixture(scope="module")
def data_dir_module():
    from tests.helpers import data_dir

    path = data_dir()
    if path is None:
        pytest.skip("datasets not found: set FLASHGNN_DATA or provide ../shared/datasets")
    return path


def test_gcn_cora_fp32_reaches_paper_accuracy(cora_runs):
    assert cora_runs["fp32"]["test"] >= 0.79, cora_runs["fp32"]["test"]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gcn_cora_half_precision_close_to_fp32(cora_runs, precision):
    assert abs(cora_runs[precision]["test"] - cora_runs["fp32"]["test"]) <= 0.015
    assert cora_runs[precision]["dense_precision"].startswith(f"{precision} (emulated")


def test_run_folder_records_the_best_epoch(cora_runs):
    summary = cora_runs["fp32"]
    run_dir = Path(summary["run_dir"])
    rows = read_metrics(run_dir)
    assert len(rows) == summary["epochs_run"]
    assert summary["config"]["train"]["early_stopping"] == "loss_window"
    best = len(rows) - 1  # Kipf & Welling's rule tests the last epoch
    assert summary["best_epoch"] == best + 1
    assert summary["test"] == pytest.approx(float(rows[best]["test"]))
    assert json.loads((run_dir / "summary.json").read_text())["test"] == summary["test"]
    assert torch.load(run_dir / "best.pt", weights_only=True)["epoch"] == best + 1
    assert (
        summary["preprocess_s"] > 0
        and summary["epoch_time_s"] > 0
        and summary["peak_gpu_memory_mb"] is None
    )
    assert resolve_config(load_config(run_dir / "config.yaml")) == summary["config"]


def test_gcn_learns_the_synthetic_graph(tmp_path):
    cfg = small_synthetic(tmp_path, epochs=60, patience=None)
    cfg["dataset"].update(num_nodes=3000, num_classes=8)
    summary = train(cfg)
    assert summary["test"] > 0.5  # chance: 1/8; features alone: about 0.3


def test_early_stopping_stops_after_patience(tmp_path):
    summary = train(small_synthetic(tmp_path, epochs=200, patience=3, lr=0.05))
    assert summary["stopped_early"]
    assert summary["epochs_run"] - summary["best_epoch"] == 3


def test_the_score_rule_keeps_the_first_best_validation_epoch(tmp_path):
    summary = train(small_synthetic(tmp_path, patience=None))
    rows = read_metrics(tmp_path)
    vals = [float(r["val"]) for r in rows]
    best = vals.index(max(vals))
    assert summary["best_epoch"] == best + 1
    assert summary["test"] == pytest.approx(float(rows[best]["test"]))


def test_the_loss_window_rule_stops_on_the_validation_loss(tmp_path):
    """A large learning rate overfits the synthetic graph within the epochs: the validation
    loss rises above its mean over the window and the run stops, keeping its last epoch."""
    cfg = small_synthetic(
        tmp_path, epochs=200, patience=5, lr=0.2, early_stopping="loss_window", weight_decay=0
    )
    cfg["model"]["dropout"] = 0.0
    summary = train(cfg)
    assert summary["stopped_early"] and summary["best_epoch"] == summary["epochs_run"] >= 7


# ---------------------------------------------------------------------------- PyG twins
def _twin_pair(tmp_path, model: dict) -> tuple[list[dict], list[dict]]:
    """Metrics of the same synthetic run with flashgnn's layers and with PyG's."""
    runs = []
    for backend in ("flashgnn", "pyg"):
        cfg = small_synthetic(tmp_path / backend, epochs=8, patience=None)
        cfg["model"] = {**model, "backend": backend}
        train(cfg)
        runs.append(read_metrics(tmp_path / backend))
    return runs[0], runs[1]


@pytest.mark.parametrize(
    "model",
    [
        {"name": "gcn", "hidden_feats": 16, "dropout": 0.5, "input_dropout": 0.5},
        {"name": "agnn", "hidden_feats": 8, "num_layers": 3, "first_beta": 0.0},
        {"name": "gat", "hidden_feats": 4, "heads": 3, "feat_drop": 0.0, "attn_drop": 0.0},
    ],
)
def test_the_pyg_twin_trains_as_the_flashgnn_model(tmp_path, model):
    """model.backend: pyg starts from the flashgnn model's weights and draws the same dropout
    masks (GAT's attention dropout, drawn in another layout, is off here): in fp32 both runs
    follow the same losses and scores."""
    ours, pyg = _twin_pair(tmp_path, model)
    assert [float(r["loss"]) for r in pyg] == pytest.approx(
        [float(r["loss"]) for r in ours], rel=1e-4
    )
    assert [r["val"] for r in pyg] == [r["val"] for r in ours]


@needs_gpu
@pytest.mark.parametrize("name", ["gcn", "agnn"])
def test_the_pyg_twin_trains_as_the_flashgnn_model_on_the_gpu(tmp_path, name):
    """On CUDA too: the flashgnn model run eagerly in fp32 (CUDA-core kernels) and its PyG
    twin draw the same dropout masks and follow the same losses; the flashgnn run replayed
    from CUDA graphs (train.cuda_graph auto) learns as well."""
    runs = {}
    for backend, cuda_graph in (("flashgnn", False), ("pyg", False), ("flashgnn", "auto")):
        out = tmp_path / f"{backend}-{cuda_graph}"
        cfg = small_synthetic(out, epochs=30, patience=None, device="cuda", cuda_graph=cuda_graph)
        cfg["model"] = {"name": name, "hidden_feats": 16, "backend": backend}
        runs[backend, cuda_graph] = (train(cfg), read_metrics(out))
    (ours, ours_rows), (pyg, pyg_rows) = runs["flashgnn", False], runs["pyg", False]
    assert [float(r["loss"]) for r in pyg_rows] == pytest.approx(
        [float(r["loss"]) for r in ours_rows], rel=1e-3
    )
    assert not pyg["cuda_graph"] and runs["flashgnn", "auto"][0]["cuda_graph"]
    assert abs(runs["flashgnn", "auto"][0]["test"] - ours["test"]) < 0.05


def test_pyg_twins_train_full_graph_in_one_process(tmp_path):
    cfg = small_synthetic(tmp_path / "run", batch_size=64, fanouts=[5, 5])
    cfg["model"]["backend"] = "pyg"
    with pytest.raises(ConfigError, match="model.backend' is 'pyg'.*full-graph"):
        train(cfg)
    cfg = small_synthetic(tmp_path / "run")
    cfg["model"]["backend"] = "dgl"
    with pytest.raises(ConfigError, match=r"'model' \(gcn\): backend must be one of"):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_weight_decay_on_the_first_layer_only():
    """train.weight_decay_scope first_layer: with zero gradients, Adam's decay moves the first
    layer's parameters alone."""
    from flashgnn.models import build_model
    from flashgnn.training.loop import decayed_groups, make_optimizer

    for name, first in (("gcn", "layers.0."), ("agnn", "encoder."), ("gat", "layers.0.")):
        model = build_model(name, 6, 3)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        groups = decayed_groups(model, "first_layer")
        optimizer = make_optimizer(groups, 0.1, 0.5, torch.device("cpu"))
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        for n, p in model.named_parameters():
            moved = not torch.equal(p, before[n])
            assert moved == (n.startswith(first) and bool(before[n].abs().sum())), (name, n)
    assert list(decayed_groups(model, "all")) == list(model.parameters())


# ---------------------------------------------------------------------------- mini-batch
def test_minibatch_training_learns_the_synthetic_graph(tmp_path):
    """Batches of 256 training nodes on 2-hop blocks of up to 5 in-edges per node: as
    accurate as full-graph steps within a few points."""
    full = small_synthetic(tmp_path / "full", epochs=40, patience=None)
    full["dataset"].update(num_nodes=3000, num_classes=8)
    mini = small_synthetic(
        tmp_path / "mini", epochs=40, patience=None, batch_size=256, fanouts=[5, 5]
    )
    mini["dataset"] = full["dataset"]
    a, b = train(full), train(mini)
    assert b["test"] > 0.5 and b["test"] >= a["test"] - 0.05, (a["test"], b["test"])
    assert b["config"]["train"]["fanouts"] == [5, 5] and not b["cuda_graph"]


def test_minibatch_resume_continues_exactly_where_it_stopped(tmp_path):
    """The batch order and the sampled blocks draw from the saved RNG state."""
    mini = {"batch_size": 200, "fanouts": [4, -1], "patience": None}
    straight, _, resumed = straight_and_resumed(tmp_path, 6, **mini)
    assert [r["loss"] for r in read_metrics(tmp_path / "straight")] == [
        r["loss"] for r in read_metrics(tmp_path / "resumed")
    ]
    assert resumed["test"] == straight["test"]


@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_minibatch_on_the_gpu_learns_and_resumes_exactly(tmp_path, precision):
    """On CUDA the sampler draws in a kernel from a seed of torch's CUDA generator, which the
    checkpoint keeps: a resumed run repeats the straight one's losses."""
    mini = {
        "batch_size": 200,
        "fanouts": [4, 6],
        "patience": None,
        "device": "cuda",
        "precision": precision,
    }
    straight, _, resumed = straight_and_resumed(tmp_path, 30, **mini)
    assert straight["test"] > 0.5 and straight["device"].startswith("cuda")
    assert [r["loss"] for r in read_metrics(tmp_path / "straight")] == [
        r["loss"] for r in read_metrics(tmp_path / "resumed")
    ]
    assert resumed["test"] == straight["test"]


def test_minibatch_needs_one_fanout_per_graph_layer(tmp_path):
    cfg = small_synthetic(tmp_path, batch_size=64, fanouts=[5, 5, 5])  # a 2-layer GCN
    with pytest.raises(
        ConfigError, match=r"train.fanouts.*one fanout per graph layer of the model \(2\)"
    ):
        train(cfg)


# ---------------------------------------------------------------------------- resume
def test_resume_continues_exactly_where_it_stopped(tmp_path):
    straight, first, resumed = straight_and_resumed(tmp_path, 12, patience=None)
    assert first["epochs_run"] == 6
    assert resumed["resumed_from_epoch"] == 6 and resumed["epochs_run"] == 12
    a, b = read_metrics(tmp_path / "straight"), read_metrics(tmp_path / "resumed")
    assert len(b) == 12
    for col in ("loss", "train", "val", "test"):  # dropout draws continue from the saved RNG state
        assert [r[col] for r in a] == [r[col] for r in b], col
    assert resumed["test"] == straight["test"]


def test_resume_needs_a_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="last.pt"):
        train(small_synthetic(tmp_path), resume=tmp_path)


# ---------------------------------------------------------------------------- precision
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rounded_matmuls_emulate_half_precision_products(dtype):
    a, w = torch.randn(30, 40), torch.randn(40, 20)
    with RoundedMatmuls(dtype):
        out = torch.nn.functional.linear(a, w.t())
        product = a @ w
    want = (a.to(dtype).double() @ w.to(dtype).double()).to(dtype).float()
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    torch.testing.assert_close(product, want, rtol=0, atol=0)
    assert not torch.equal(a @ w, want)  # outside the mode: full fp32


def test_precision_scope_sets_the_sparse_precision():
    with precision_scope("bf16", torch.device("cpu")):
        assert get_precision() == "bf16"
    assert get_precision() == "fp32"


def test_precision_scope_runs_a_cuda_backward_on_the_calling_thread():
    """On CUDA the backward runs on the calling thread inside the scope (the setting is
    thread-local and restored on exit); CPU scopes leave the engine alone."""
    assert torch.autograd.is_multithreading_enabled()
    with precision_scope("fp32", torch.device("cuda")):  # fp32: no autocast, so no GPU needed
        assert not torch.autograd.is_multithreading_enabled()
    assert torch.autograd.is_multithreading_enabled()
    with precision_scope("fp32", torch.device("cpu")):
        assert torch.autograd.is_multithreading_enabled()


# ---------------------------------------------------------------------------- command line
def test_cli_train_then_resume(tmp_path, capsys):
    config = CONFIGS / "gcn-synthetic-small.yaml"
    out = tmp_path / "run"
    assert (
        cli_main(
            [
                "train",
                "--config",
                str(config),
                "--output",
                str(out),
                "train.epochs=3",
                "train.progress=false",
                "dataset.num_nodes=800",
            ]
        )
        == 0
    )
    assert "gcn-synthetic-small: best epoch" in capsys.readouterr().out
    assert cli_main(["train", "--resume", str(out), "train.epochs=5"]) == 0
    assert [int(r["epoch"]) for r in read_metrics(out)] == [1, 2, 3, 4, 5]
    assert load_config(out / "config.yaml")["train"]["epochs"] == 5


def test_cli_compare_writes_tables(tmp_path, capsys):
    out = tmp_path / "compare"
    assert (
        cli_main(
            [
                "compare",
                "--config",
                str(CONFIGS / "gcn-synthetic-small.yaml"),
                "--precisions",
                "fp32,fp16",
                "--seeds",
                "2",
                "--output",
                str(out),
                "train.epochs=4",
                "train.progress=false",
                "dataset.num_nodes=800",
            ]
        )
        == 0
    )
    with open(out / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert [(r["precision"], r["seed"]) for r in runs] == [
        ("fp32", "0"),
        ("fp32", "1"),
        ("fp16", "0"),
        ("fp16", "1"),
    ]
    for r in runs:
        summary = json.loads(
            (out / f"{r['precision']}-seed{r['seed']}" / "summary.json").read_text()
        )
        assert float(r["test"]) == pytest.approx(summary["test"])
    with open(out / "compare.csv", newline="") as f:
        table = {r["precision"]: r for r in csv.DictReader(f)}
    tests = [float(r["test"]) for r in runs if r["precision"] == "fp16"]
    assert float(table["fp16"]["test_mean"]) == pytest.approx(sum(tests) / 2)
    fp32_mean = float(table["fp32"]["test_mean"])
    assert float(table["fp16"]["delta_vs_fp32"]) == pytest.approx(
        float(table["fp16"]["test_mean"]) - fp32_mean
    )
    markdown = (out / "compare.md").read_text()
    assert "| fp16 | 2 |" in markdown and "test accuracy (mean +- std)" in markdown
    if importlib.util.find_spec("matplotlib") is None:
        assert not (out / "compare.png").exists()
        assert "matplotlib is not installed" in capsys.readouterr().out
    else:
        assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_compare_with_the_pyg_reference(tmp_path, capsys):
    """--reference pyg: a row "pyg" first, PyG's layers trained in fp32 from the flashgnn
    model's weights with the same seeds, beside the precisions."""
    out = tmp_path / "compare"
    args = ["--seeds", "2", "--output", str(out), "--reference", "pyg", "--precisions", "fp32"]
    config = ["--config", str(CONFIGS / "agnn-synthetic-small.yaml")]
    overrides = ["train.epochs=3", "train.progress=false", "dataset.num_nodes=600"]
    assert cli_main(["compare", *config, *args, *overrides]) == 0
    with open(out / "runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert [(r["precision"], r["seed"]) for r in runs] == [
        ("pyg", "0"),
        ("pyg", "1"),
        ("fp32", "0"),
        ("fp32", "1"),
    ]
    summary = json.loads((out / "pyg-seed1" / "summary.json").read_text())
    assert summary["config"]["model"]["backend"] == "pyg" and summary["precision"] == "fp32"
    assert summary["config"]["train"]["seed"] == 1 and not summary["cuda_graph"]
    for seed in ("0", "1"):
        pyg, ours = (float(r["test"]) for r in runs if r["seed"] == seed)
        assert pyg == pytest.approx(ours, abs=0.005)  # same weights, dropout masks and maths
    assert "| pyg | 2 |" in (out / "compare.md").read_text()
    with pytest.raises(SystemExit):
        cli_main(["compare", *config, "--reference", "dgl"])
    assert "invalid choice: 'dgl'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "config, message",
    [
        ({"trian": {}}, "unknown config key 'trian'"),
        ({"train": {"lr": -1}}, "train.lr"),
        ({"train": {"lr": float("inf")}}, "'train.lr' must be a finite number > 0, got inf"),
        ({"train": {"lr": float("nan")}}, "'train.lr' must be a finite number > 0, got nan"),
        ({"train": {"weight_decay": float("inf")}}, "'train.weight_decay' must be a finite"),
        ({"train": {"seed": -1}}, r"'train.seed' must be an integer in \[0, 2\*\*32\)"),
        ({"train": {"precision": "fp8"}}, "train.precision"),
        ({"train": {"epochs": 1.5}}, "train.epochs"),
        ({"train": {"learning_rate": 0.1}}, "unknown config key 'train.learning_rate'"),
        ({"model": "gcn"}, "'model' must be a mapping"),
        ({"dataset": {"root": "x"}}, "dataset.name"),
        ({"train": {"cuda_graph": "yes"}}, "train.cuda_graph"),
        ({"train": {"batch_size": 0, "fanouts": [5]}}, "train.batch_size"),
        ({"train": {"batch_size": 64, "fanouts": [0]}}, "train.fanouts"),
        ({"train": {"batch_size": 64, "fanouts": []}}, "train.fanouts"),
        ({"train": {"batch_size": 64}}, "train.fanouts.*set together with train.batch_size"),
        ({"train": {"fanouts": [5, 5]}}, "train.fanouts.*set together with train.batch_size"),
        (
            {"train": {"batch_size": 64, "fanouts": [5], "cuda_graph": True}},
            "train.cuda_graph.*mini-batch",
        ),
        ({"distributed": {"features": "gpu"}}, "distributed.features.*auto, device or host"),
        ({"distributed": {"exchange_columns": 0}}, "distributed.exchange_columns"),
        ({"distributed": {"exchange_columns": 8.0}}, "distributed.exchange_columns"),
        ({"distributed": {"partition_one_process": "yes"}}, "distributed.partition_one_process"),
        ({"train": {"early_stopping": "loss"}}, "'train.early_stopping' must be one of"),
        ({"train": {"weight_decay_scope": "last"}}, "'train.weight_decay_scope' must be one"),
    ],
)
def test_bad_config_names_the_key(config, message):
    with pytest.raises(ConfigError, match=message):
        resolve_config(config)


def test_infinite_lr_from_the_command_line_is_refused():
    with pytest.raises(ConfigError, match="'train.lr' must be a finite number > 0, got inf"):
        resolve_config(apply_overrides({}, ["train.lr=.inf"]))


@pytest.mark.parametrize(
    "model, message",
    [
        ({"name": "gcn", "hidden_feats": 0}, r"hidden_feats must be >= 1 \(an integer\), got 0"),
        ({"name": "gcn", "hidden_feats": -4}, "hidden_feats must be >= 1.*got -4"),
        ({"name": "agnn", "hidden_feats": 2.5}, "hidden_feats must be >= 1.*got 2.5"),
        ({"name": "gat", "heads": 0}, "heads must be >= 1.*got 0"),
        ({"name": "gat", "out_heads": -1}, "out_heads must be >= 1.*got -1"),
        ({"name": "gcn", "num_layers": 0}, "num_layers must be >= 1.*got 0"),
        ({"name": "gcn", "dropout": 1.5}, r"dropout must be a number in \[0, 1\), got 1.5"),
        ({"name": "gat", "attn_drop": -0.1}, "attn_drop must be a number in"),
    ],
)
def test_bad_model_sizes_fail_before_the_data_is_read(tmp_path, model, message):
    cfg = {
        "dataset": {"name": "no-such-graph", "root": str(tmp_path)},  # never read
        "model": model,
        "output": {"dir": str(tmp_path / "run")},
    }
    with pytest.raises(ConfigError, match=f"config section 'model' .*{message}"):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_cuda_graph_needs_a_cuda_device(tmp_path):
    with pytest.raises(ConfigError, match="train.cuda_graph.*CUDA device.*cpu"):
        train(small_synthetic(tmp_path, device="cpu", cuda_graph=True))


def test_cuda_graph_auto_is_the_default_and_runs_eagerly_on_the_cpu(tmp_path):
    assert resolve_config({})["train"]["cuda_graph"] == "auto"
    summary = train(small_synthetic(tmp_path, device="cpu"))
    assert summary["cuda_graph"] is False


def test_cuda_graph_auto_replays_small_graphs_on_cuda_only():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert use_cuda_graph("auto", cuda, AUTO_CUDA_GRAPH_EDGES) is True
    assert use_cuda_graph("auto", cuda, AUTO_CUDA_GRAPH_EDGES + 1) is False
    assert use_cuda_graph("auto", cpu, 10) is False
    assert use_cuda_graph(True, cuda, AUTO_CUDA_GRAPH_EDGES + 1) is True
    assert use_cuda_graph(False, cuda, 10) is False


def test_bad_model_or_dataset_keyword_is_a_config_error(tmp_path):
    cfg = small_synthetic(tmp_path)
    with pytest.raises(ConfigError, match="section 'model'.*layers"):
        train({**cfg, "model": {"name": "gcn", "layers": 2}})
    with pytest.raises(ConfigError, match="section 'dataset'.*nodes"):
        train({**cfg, "dataset": {"name": "synthetic", "nodes": 10}})


def test_missing_dataset_names_the_expected_files(tmp_path):
    cfg = {
        "dataset": {"name": "igb-small", "root": str(tmp_path)},
        "train": {"progress": False},
        "output": {"dir": str(tmp_path / "run")},
    }
    with pytest.raises(FileNotFoundError, match=r"small/processed[\s\S]*node_feat\.npy"):
        train(cfg)


def test_bad_config_files_and_overrides(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("train: {epochs: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yaml")
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides({}, ["train.epochs"])
    assert apply_overrides({"train": {"lr": 1}}, ["train.lr=1e-3", "train.patience=null"]) == {
        "train": {"lr": 1e-3, "patience": None}
    }


def test_every_shipped_config_is_valid():
    from flashgnn.models import build_model

    names = sorted(p.name for p in CONFIGS.glob("*.yaml"))
    assert len(names) >= 27
    for name in names:
        cfg = resolve_config(load_config(CONFIGS / name))
        assert cfg["name"] == name[: -len(".yaml")]
        model = {k: v for k, v in cfg["model"].items() if k != "name"}
        build_model(cfg["model"]["name"], 8, 3, **model)  # every model keyword exists


def test_command_line_reports_bad_input_without_a_traceback(tmp_path, capsys):
    assert cli_main(["train", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert (
        cli_main(["train", "--config", str(CONFIGS / "gcn-synthetic-small.yaml"), "bogus=1"]) == 2
    )
    err = capsys.readouterr().err
    assert "flashgnn train: error: config file not found" in err and "nope.yaml" in err
    assert "unknown config key 'bogus'" in err and "Traceback" not in err


def test_non_finite_features_stop_the_run_before_training(tmp_path):
    cfg = small_synthetic(tmp_path)
    dataset = load_dataset("synthetic", num_nodes=1500, avg_degree=8, num_classes=4)
    dataset.x[3, 1] = float("nan")
    dataset.x[7, 0] = float("inf")
    with pytest.raises(ValueError, match="features hold 2 NaN or infinite values"):
        train(cfg, dataset=dataset)
    assert not (tmp_path / "metrics.csv").exists()
