"""The layer and training benchmark harnesses (``flashgnn bench layers`` / ``training``), run
on the CPU on tiny graphs: rows, speedups against PyG, output checks, the PyG twins' maths,
and that a failing row or a missing PyG is reported, not hidden."""

import time

import pytest
import torch

from flashgnn.benchmarking import layers as layer_bench
from flashgnn.benchmarking import training as training_bench
from flashgnn.benchmarking.timing import Timer
from flashgnn.cli import main
from flashgnn.data.synthetic import load_synthetic
from flashgnn.training.loop import prepare_graph
from tests.helpers import ONE_CALL, run_bench

pytest.importorskip("torch_geometric")

GRAPH = "hetero_texas"  # 183 nodes, 558 nonzeros (symmetric)
ERROR_BOUND = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}
PYG_GCN = ("PyG adj_t", "PyG adj_t cached", "PyG edge_index")


def _step_ms(row):
    """A CSV row's step time as the speedups count it: the larger of event and wall time."""
    return max(float(row["ms"]), float(row["wall_ms"]))


def _layers(tmp_path, data_dir, *extra):
    return run_bench(
        "layers",
        tmp_path / "layers.csv",
        *ONE_CALL,
        "--graphs",
        GRAPH,
        "--data",
        str(data_dir),
        "--markdown",
        str(tmp_path / "layers.md"),
        *extra,
    )


def test_layer_rows_speedups_and_errors_against_pyg(tmp_path, data_dir, capsys):
    code, rows = _layers(tmp_path, data_dir)
    assert code == 0
    expected = {("GCNConv", impl, p) for impl in PYG_GCN for p in ("fp32", "fp16")}
    expected |= {("AGNNConv", "PyG edge_index", p) for p in ("fp32", "fp16")}
    expected |= {(m, "flashgnn", p) for m in ("GCNConv", "AGNNConv") for p in ERROR_BOUND}
    assert {(r["model"], r["impl"], r["precision"]) for r in rows} == expected
    for model in ("GCNConv", "AGNNConv"):
        mine = [r for r in rows if r["model"] == model]
        base = min(
            _step_ms(r) for r in mine if r["impl"].startswith("PyG") and r["precision"] == "fp32"
        )
        for r in mine:
            assert r["error"] == "" and r["graph"] == GRAPH
            assert float(r["speedup"]) == pytest.approx(base / _step_ms(r))
            if r["impl"] == "flashgnn":  # against PyG fp32, with the same weights
                assert 0 <= float(r["rel_err"]) <= ERROR_BOUND[r["precision"]]
    printed = capsys.readouterr().out
    assert f"bar {GRAPH} GCNConv flashgnn fp16 >= 2x the fastest PyG fp32:" in printed
    assert printed.count(f"bar {GRAPH} ") == 4
    md = (tmp_path / "layers.md").read_text()
    assert "# Layer benchmark" in md and "| x PyG fp32 |" in md


def test_gat_rows_against_pyg(tmp_path, data_dir):
    code, rows = _layers(tmp_path, data_dir, "--models", "GATConv")
    assert code == 0
    assert {(r["model"], r["impl"], r["precision"]) for r in rows} == (
        {("GATConv", "PyG edge_index", p) for p in ("fp32", "fp16")}
        | {("GATConv", "flashgnn", p) for p in ERROR_BOUND}
    )
    for r in rows:
        assert r["error"] == ""
        if r["impl"] == "flashgnn":
            assert 0 <= float(r["rel_err"]) <= ERROR_BOUND[r["precision"]]


def test_graph_speedups_take_the_fastest_pyg_time_of_either_mode():
    row = layer_bench.ModelRow
    rows = [
        row("g", "GCNConv", "PyG adj_t", "fp32", ms=2.0, graph_ms=None),
        row("g", "GCNConv", "PyG edge_index", "fp32", ms=3.0, graph_ms=2.5),
        row("g", "GCNConv", "PyG edge_index", "fp16", ms=1.0, graph_ms=0.5),
        row("g", "GCNConv", "flashgnn", "fp16", ms=1.0, graph_ms=0.25),
    ]
    layer_bench.set_speedups(rows)
    ours = rows[-1]
    assert (ours.speedup, ours.speedup_fp16, ours.graph_speedup) == (2.0, 1.0, 8.0)
    assert rows[1].graph_speedup == 0.8
    lines = layer_bench.bar_lines(rows)
    assert "bar g GCNConv flashgnn fp16 >= 2x the fastest PyG fp32: 2.00x met" in lines
    assert (
        "bar g GCNConv flashgnn fp16 (CUDA graphs) >= 2x the fastest PyG fp32: 8.00x met" in lines
    )
    assert "bar g GCNConv flashgnn fp32 >= 1x the fastest PyG fp32: not measured" in lines


def test_speedups_compare_step_times_the_larger_of_event_and_wall_time():
    """A host-bound row (wall time above its event time) is charged its wall time, a GPU-bound
    one its event time, on PyG's side as on ours."""
    row = layer_bench.ModelRow
    rows = [
        row("g", "AGNNConv", "PyG edge_index", "fp32", ms=3.0, wall_ms=2.5),
        row("g", "AGNNConv", "flashgnn", "fp16", ms=0.6, wall_ms=1.2),
        row("g", "AGNNConv", "flashgnn", "fp32", ms=1.5, wall_ms=None),
    ]
    layer_bench.set_speedups(rows)
    assert [layer_bench.step_ms(r) for r in rows] == [3.0, 1.2, 1.5]
    assert (rows[1].speedup, rows[2].speedup) == (2.5, 2.0)
    assert (
        "bar g AGNNConv flashgnn fp16 >= 3x the fastest PyG fp32: 2.50x NOT met"
        in layer_bench.bar_lines(rows)
    )


def test_a_failing_row_is_recorded_and_the_run_goes_on(tmp_path, data_dir, monkeypatch, capsys):
    real = layer_bench.prepare_graph

    def failing_for_tf32(graph, self_loops, device, k):
        if k == 4:
            raise RuntimeError("format build failed\nsecond line")
        return real(graph, self_loops, device, k)

    monkeypatch.setattr(layer_bench, "prepare_graph", failing_for_tf32)
    code, rows = _layers(tmp_path, data_dir, "--precisions", "fp32,tf32", "--no-pyg")
    assert code == 1
    by = {(r["model"], r["precision"]): r for r in rows}
    assert set(by) == {(m, p) for m in ("GCNConv", "AGNNConv") for p in ("fp32", "tf32")}
    for model in ("GCNConv", "AGNNConv"):
        assert (
            by[model, "tf32"]["error"] == "RuntimeError: format build failed"
            and by[model, "tf32"]["ms"] == ""
        )
        assert by[model, "fp32"]["error"] == "" and float(by[model, "fp32"]["ms"]) > 0
    assert "FAILED hetero_texas GCNConv flashgnn tf32" in capsys.readouterr().out


def test_missing_pyg_skips_its_rows_with_a_message(tmp_path, data_dir, monkeypatch, capsys):
    monkeypatch.setattr(
        layer_bench, "pyg_missing", lambda: "torch_geometric is not usable (x): PyG rows skipped"
    )
    code, rows = _layers(tmp_path, data_dir, "--precisions", "fp16")
    assert code == 0
    assert {(r["impl"], r["precision"]) for r in rows} == {("flashgnn", "fp16")}
    assert all(r["speedup"] == "" for r in rows)
    captured = capsys.readouterr()
    assert "PyG rows skipped" in captured.err
    assert "GCNConv flashgnn fp16 >= 2x the fastest PyG fp32: not measured" in captured.out


def test_training_rows(tmp_path):
    code, rows = run_bench(
        "training",
        tmp_path / "training.csv",
        *ONE_CALL,
        "--num-nodes",
        "300",
        "--precisions",
        "fp32,bf16",
    )
    assert code == 0
    assert {(r["model"], r["impl"], r["precision"]) for r in rows} == {
        *((m, "flashgnn", p) for m in ("GCN 2x128", "AGNN 4x32") for p in ("fp32", "bf16")),
        *(
            ("GCN 2x128", f"PyG {path}", p)
            for path in ("adj_t", "edge_index")
            for p in ("fp32", "fp16")
        ),
        *(("AGNN 4x32", "PyG edge_index", p) for p in ("fp32", "fp16")),
    }
    assert all(
        r["error"] == "" and float(r["ms"]) > 0 and r["graph"] == "synthetic 300 nodes"
        for r in rows
    )


@pytest.mark.parametrize(
    "name, path", [("gcn", "adj_t"), ("gcn", "edge_index"), ("agnn", "edge_index")]
)
def test_pyg_twin_trains_like_the_flashgnn_model(name, path):
    """Same weights, same dropout masks (same seed): the flashgnn model and its PyG twin give
    the same loss over three epochs of the benchmark's training step, which must learn."""
    from flashgnn.models import build_model

    data = load_synthetic(
        num_nodes=300, avg_degree=8, num_classes=4, num_features=16, seed=1, progress=False
    )
    graph = data.graph.add_self_loops()
    torch.manual_seed(0)
    model = build_model(name, 16, 4, hidden_feats=32, num_layers=2)
    twin = layer_bench.pyg_twin(model, layer_bench.pyg_adjacency(graph, path), cached=True)
    assert_trains_like(model, twin, graph, data)


def assert_trains_like(model, twin, graph, data):
    """Three steps of the benchmark's training step on ``data`` (fp32, the same seed for
    each): the flashgnn ``model`` on ``graph`` and its PyG ``twin`` on the same graph give the
    same losses, and they fall."""
    losses = []
    for module, g in ((model, prepare_graph(graph, False, torch.device("cpu"), 8)), (twin, graph)):
        step = training_bench.training_step(module, g, data.x, data.y, data.train_mask, "fp32")
        torch.manual_seed(1)
        losses.append(torch.stack([step() for _ in range(3)]))
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    assert losses[0][2] < losses[0][0]


def test_bad_options_are_clear(capsys):
    assert main(["bench", "layers", "--device", "cpu", "--precisions", "fp8"]) == 2
    assert (
        "--precisions: expected a comma list of fp32, tf32, fp16, bf16, got 'fp8'"
        in capsys.readouterr().err
    )
    assert main(["bench", "training", "--device", "cpu", "--models", "GIN"]) == 2
    assert "--models: expected a comma list of GCN, AGNN, got 'GIN'" in capsys.readouterr().err
    assert main(["bench", "layers", "--device", "cpu", "--models", "GIN"]) == 2
    assert (
        "--models: expected a comma list of GCNConv, AGNNConv, GATConv, got 'GIN'"
        in capsys.readouterr().err
    )


def test_rounds_time_the_rows_in_turns_and_take_the_median_of_all_calls():
    calls = []
    durations = {
        "a": iter([0.04, 0.01, 0.02]),
        "b": iter([0.03, 0.03, 0.09]),
    }  # long enough for a loaded host

    def prepare(name):
        def step():
            calls.append(name)
            time.sleep(next(durations[name]))
            return torch.tensor([len(calls)])

        return lambda: step

    def failing():
        raise RuntimeError("no format\nmore")

    rows = [layer_bench.ModelRow("g", "GCNConv", impl, "fp32") for impl in ("a", "b", "c")]
    timer = Timer(torch.device("cpu"), warmup=0, iters=1)
    results = layer_bench.measure_rounds(
        list(zip(rows, [prepare("a"), prepare("b"), failing])), timer, 3
    )
    assert calls == ["a", "b"] * 3
    assert [r.item() for r in results[:2]] == [5, 6] and results[2] is None
    assert rows[0].ms == pytest.approx(20.0, abs=9) and rows[1].ms == pytest.approx(30.0, abs=9)
    assert rows[2].error == "RuntimeError: no format" and rows[2].ms is None
    with pytest.raises(ValueError, match="rounds >= 1"):
        layer_bench.measure_rounds(rows[:1], timer, 0)


def test_rounds_option_gives_the_same_rows(tmp_path, data_dir):
    code, rows = _layers(
        tmp_path, data_dir, "--precisions", "fp32,fp16", "--models", "GCNConv", "--rounds", "2"
    )
    assert code == 0
    assert {(r["impl"], r["precision"]) for r in rows} == (
        {(impl, p) for impl in PYG_GCN for p in ("fp32", "fp16")}
        | {("flashgnn", p) for p in ("fp32", "fp16")}
    )
    for r in rows:
        assert r["error"] == "" and float(r["ms"]) > 0 and float(r["wall_ms"]) > 0
        if r["impl"] == "flashgnn":
            assert 0 <= float(r["rel_err"]) <= ERROR_BOUND[r["precision"]]


def test_eager_rows_where_a_layer_replays_its_kernels():
    rows = layer_bench.implementations(["edge_index"], ["fp32", "fp16"], True, eager=True)
    assert [r for r in rows if r[0].startswith("flashgnn")] == [
        ("flashgnn", "fp32", None),
        ("flashgnn", "fp16", None),
        (layer_bench.EAGER, "fp32", None),
        (layer_bench.EAGER, "fp16", None),
    ]
    assert all(r[0] != layer_bench.EAGER for r in layer_bench.implementations([], ["fp32"], False))
    from flashgnn.graph import Graph
    from flashgnn.models import GCN
    from flashgnn.nn import GCNConv, set_replay

    model = GCN(4, 8, 3, num_layers=2)
    graph = Graph.from_edge_index(torch.tensor([[0, 1], [1, 0]]), 2)
    x = torch.randn(2, 4)
    assert not layer_bench.replays(model, x, graph)  # a CPU tensor: no CUDA graphs
    convs = [m for m in set_replay(model, False).modules() if isinstance(m, GCNConv)]
    assert len(convs) == 2 and all(c.replay.enabled is False for c in convs)
