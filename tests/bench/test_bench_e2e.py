"""The end-to-end training benchmark (``flashgnn bench e2e``) on the CPU on cora: a row per model
and implementation, the derived columns (amortised epoch, speedups) consistent with the timed
ones, the CSV and its environment file; real and random node data; the PyG GAT twin."""

import json

import pytest
import torch

from flashgnn.benchmarking import end_to_end as e2e_bench
from flashgnn.benchmarking import layers as layer_bench
from flashgnn.cli import main
from flashgnn.data.synthetic import load_synthetic
from tests.bench.test_bench_layers import assert_trains_like
from tests.helpers import ONE_CALL, run_bench

pytest.importorskip("torch_geometric")

MODELS = {
    "GCN 2x128": ("PyG adj_t", "PyG edge_index"),
    "GCN 5x128": ("PyG adj_t", "PyG edge_index"),
    "AGNN 4x32": ("PyG edge_index",),
    "GAT 2x8 (8 heads)": ("PyG edge_index",),
}


def _e2e(tmp_path, data_dir, *extra):
    return run_bench(
        "e2e",
        tmp_path / "e2e.csv",
        *ONE_CALL,
        "--quick",
        "--graphs",
        "cora",
        "--data",
        str(data_dir),
        "--markdown",
        str(tmp_path / "e2e.md"),
        *extra,
    )


def test_every_model_and_implementation_on_cora(tmp_path, data_dir):
    code, rows = _e2e(tmp_path, data_dir, "--precisions", "fp32,fp16")
    assert code == 0
    assert {(r["model"], r["impl"], r["precision"]) for r in rows} == {
        (model, impl, p)
        for model, pyg in MODELS.items()
        for impl in (*pyg, "flashgnn")
        for p in ("fp32", "fp16")
    }
    for r in rows:
        ms, prep = float(r["ms"]), float(r["prep_ms"])
        assert r["graph"] == "cora" and r["error"] == "" and ms > 0 and prep > 0
        assert float(r["amortized_ms"]) == pytest.approx(ms + prep / 200)
    for model in MODELS:
        mine = [r for r in rows if r["model"] == model]
        for precision, column in (("fp32", "speedup"), ("fp16", "speedup_fp16")):
            base = min(
                float(r["ms"])
                for r in mine
                if r["impl"] != "flashgnn" and r["precision"] == precision
            )
            for r in mine:
                assert float(r[column]) == pytest.approx(base / float(r["ms"]))
    env = json.loads((tmp_path / "e2e.csv.json").read_text())
    assert env["torch"] == torch.__version__ and env["date"][:2] == "20"
    md = (tmp_path / "e2e.md").read_text()
    assert "| ms + prep/200 |" in md and "| x PyG fp16 |" in md
    assert "cora: 2,708 nodes" in md and "(its own features and labels)" in md


def test_a_failing_row_is_recorded_and_the_run_goes_on(tmp_path, data_dir, monkeypatch):
    real = layer_bench.prepare_graph

    def out_of_memory_for_tf32(graph, self_loops, device, k):
        if k == 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return real(graph, self_loops, device, k)

    monkeypatch.setattr(layer_bench, "prepare_graph", out_of_memory_for_tf32)
    code, rows = _e2e(
        tmp_path, data_dir, "--models", "gcn2", "--precisions", "fp32,tf32", "--no-pyg"
    )
    assert code == 1
    by = {r["precision"]: r for r in rows}
    assert set(by) == {"fp32", "tf32"}
    assert by["tf32"]["error"].startswith("OutOfMemoryError: CUDA out of memory")
    assert by["tf32"]["ms"] == by["tf32"]["amortized_ms"] == ""
    assert (
        by["fp32"]["error"] == ""
        and float(by["fp32"]["amortized_ms"]) > float(by["fp32"]["ms"]) > 0
    )


def test_node_data_own_or_random(data_dir):
    label, data, origin = e2e_bench.load_data("cora", data_dir, quick=True, seed=0)
    assert (label, origin, data.num_features, data.num_classes) == (
        "cora",
        "its own features and labels",
        1433,
        7,
    )
    label, data, origin = e2e_bench.load_data(
        "gemsec_fb_tvshow", data_dir, quick=True, seed=3
    )  # structure only
    assert origin == "random features and labels" and data.num_nodes == 3892
    assert data.x.dtype == torch.float32 and data.x.shape == (3892, 128)
    assert 0 <= int(data.y.min()) and int(data.y.max()) < data.num_classes == 16
    again = e2e_bench.load_data("gemsec_fb_tvshow", data_dir, quick=True, seed=3)[1]
    assert torch.equal(again.x, data.x) and torch.equal(again.y, data.y)
    assert not torch.equal(
        e2e_bench.load_data("gemsec_fb_tvshow", data_dir, quick=True, seed=4)[1].y, data.y
    )


def test_pyg_gat_twin_trains_like_the_flashgnn_gat():
    """Same weights, no dropout: the flashgnn GAT and its PyG twin give the same losses over
    three epochs of the benchmark's training step, and they fall."""
    from flashgnn.models import build_model

    data = load_synthetic(
        num_nodes=300, avg_degree=8, num_classes=4, num_features=16, seed=1, progress=False
    )
    graph = data.graph.add_self_loops()
    torch.manual_seed(0)
    model = build_model(
        "gat", 16, 4, hidden_feats=8, heads=4, num_layers=2, feat_drop=0.0, attn_drop=0.0
    )
    twin = layer_bench.pyg_twin(model, layer_bench.pyg_adjacency(graph, "edge_index"))
    assert_trains_like(model, twin, graph, data)


def test_bad_options_are_clear(capsys):
    assert main(["bench", "e2e", "--device", "cpu", "--models", "gin"]) == 2
    assert (
        "--models: expected a comma list of gcn2, gcn5, agnn, gat, got 'gin'"
        in capsys.readouterr().err
    )
