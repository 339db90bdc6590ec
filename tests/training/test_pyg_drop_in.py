"""examples/pyg_drop_in.py runs both models on cora (two epochs, CPU) and reports each."""

import importlib.util

import pytest

from tests.helpers import REPO_ROOT, data_dir


def test_pyg_drop_in_example_runs(capsys):
    root = data_dir()
    if root is None or not (root / "cora.npz").is_file():
        pytest.skip("cora not found: set FLASHGNN_DATA or provide ../shared/datasets")
    spec = importlib.util.spec_from_file_location(
        "pyg_drop_in", REPO_ROOT / "examples" / "pyg_drop_in.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main(["--device", "cpu", "--epochs", "2", "--root", str(root)]) == 0
    rows = capsys.readouterr().out.strip().splitlines()[-2:]
    for row, name in zip(rows, ("torch_geometric.nn", "flashgnn.nn.pyg")):
        layers, accuracy, ms = row.split()
        assert layers == name
        assert 0 <= float(accuracy) <= 1 and float(ms) > 0
