"""examples/pyg_drop_in.py trains each model with PyG's layers and flashgnn's on cora (two
epochs, CPU), reports every row and writes the result CSV that the benchmark document renders."""

import importlib.util

import pytest

from flashgnn.benchmarking import document, drop_in, table
from tests.helpers import REPO_ROOT, data_dir


def _example():
    spec = importlib.util.spec_from_file_location(
        "pyg_drop_in", REPO_ROOT / "examples" / "pyg_drop_in.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@pytest.fixture()
def root():
    root = data_dir()
    if root is None or not (root / "cora.npz").is_file():
        pytest.skip("cora not found: set FLASHGNN_DATA or provide ../shared/datasets")
    return root


def test_pyg_drop_in_example_runs(root, capsys):
    assert _example().main(["--device", "cpu", "--epochs", "2", "--root", str(root)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "cora on cpu, 2 epochs"
    rows = [line.split() for line in lines[2:]]
    assert [r[:5] for r in rows] == [
        ["cora", "GCN", "torch_geometric.nn", "edge_index", "fp32"],
        ["cora", "GCN", "torch_geometric.nn", "adj_t", "fp32"],
        ["cora", "GCN", "flashgnn.nn.pyg", "edge_index", "fp32"],
    ]
    for r in rows:
        assert 0 <= float(r[5]) <= 100 and float(r[6]) > 0
    assert rows[2][7].endswith("x")  # against PyG's fastest input


def test_pyg_drop_in_example_writes_the_result_the_document_renders(root, tmp_path):
    args = ["--device", "cpu", "--epochs", "2", "--root", str(root), "--models", "agnn,gat"]
    args += ["--precision", "fp32,bf16", "--dataset", "citeseer", "--results", str(tmp_path)]
    assert _example().main(args) == 0
    path = tmp_path / "cpu" / f"{drop_in.BENCHMARK}.csv"
    rows = table.read_csv(path, drop_in.DropInRow)
    assert [(r.model, r.layers, r.input, r.precision) for r in rows] == [
        (m, layers, "edge_index", p)
        for m in ("AGNN", "GAT")
        for layers, p in (
            (drop_in.PYG, "fp32"),
            (drop_in.FLASHGNN, "fp32"),
            (drop_in.FLASHGNN, "bf16"),
        )
    ]
    assert all(r.dataset == "citeseer" and r.epochs == 2 and r.epoch_ms > 0 for r in rows)
    assert table.read_environment(path)["cpu"]
    md = document.build(tmp_path, tmp_path)
    section = md.split("## PyG drop-in layers", 1)[1]
    pyg = rows[3].epoch_ms
    line = next(
        x
        for x in section.splitlines()
        if x.startswith("| citeseer | GAT | flashgnn.nn.pyg | edge_index | bf16 |")
    )
    assert line.rstrip(" |").endswith(f"{pyg / rows[5].epoch_ms:.2f}x (edge_index)")


def test_bad_options_are_refused(capsys):
    with pytest.raises(SystemExit):
        _example().main(["--models", "gcn,sage"])
    assert "--models: expected a comma list of gcn, gat, agnn" in capsys.readouterr().err
