"""``flashgnn bench report`` on result files in the real formats: a kernel CSV from a CPU run of
``bench kernels``, e2e rows written by the benchmarks' CSV writer, an 8x1 / 16x1 ablation CSV;
the Markdown must hold statistics computed here from those rows, the plots must be PNGs, and
every table must carry its environment."""
import csv
import math
import statistics

import pytest
import torch

from flashgnn.benchmarking import plots, table
from flashgnn.benchmarking.ablation import AblationRow
from flashgnn.benchmarking.layers import ModelRow
from flashgnn.cli import main

GRAPHS = "hetero_texas,hetero_cornell"
ENV = {"date": "2026-11-22T10:00:00", "torch": "2.11.0+cu130", "gpu": "NVIDIA H200", "driver": "580.159.04"}
E2E_SPEEDUPS = {"g1": 1.5, "g2": 2.0, "g3": 3.0}  # flashgnn fp16 of one model on three graphs
ABLATION = {"g1": (1.0, 1.5), "g2": (2.0, 2.4)}  # ms of 8x1 and 16x1 vectors


def geomean(values):
    return math.prod(values) ** (1 / len(values))


@pytest.fixture(scope="module")
def kernels_csv(tmp_path_factory):
    from tests.helpers import NO_DATA, data_dir

    root = data_dir()
    if root is None:
        pytest.skip(NO_DATA)
    path = tmp_path_factory.mktemp("kernels") / "kernels.csv"
    assert main(["bench", "kernels", "--device", "cpu", "--graphs", GRAPHS, "--data", str(root), "--ops", "spmm",
                 "--precisions", "fp16", "--sizes", "16", "--warmup", "1", "--iters", "1", "--csv", str(path)]) == 0
    return path


def _e2e_csv(path):
    rows = []
    for graph, speedup in E2E_SPEEDUPS.items():
        rows.append(ModelRow(graph, "GCN 2x128", "PyG adj_t", "fp32", ms=10.0, speedup=1.0))
        rows.append(ModelRow(graph, "GCN 2x128", "flashgnn", "fp16", ms=10.0 / speedup, speedup=speedup))
    rows.append(ModelRow("g4", "GCN 2x128", "flashgnn", "fp16", error="OutOfMemoryError: CUDA out of memory"))
    table.write_csv(rows, path, ENV, ModelRow)


def _ablation_csv(path):
    """Rows as ``bench ablation`` writes them, a failed one included, and no environment file
    (as for results kept from before the benchmarks wrote one)."""
    rows = [AblationRow("g3", 10, "spmm", "fp16", 128, 16, error="RuntimeError: launch failed")]
    for graph, (ms8, ms16) in ABLATION.items():
        rows.append(AblationRow(graph, 10, "spmm", "fp16", 128, 8, ms=ms8, mmas=100, bytes=1000))
        rows.append(AblationRow(graph, 10, "spmm", "fp16", 128, 16, ms=ms16, mmas=50, bytes=1500))
    rows.append(AblationRow("g3", 10, "spmm", "fp16", 128, 8, ms=1.0, mmas=100, bytes=1000))
    table.write_csv(rows, path, ENV, AblationRow)
    table.environment_path(path).unlink()


def _line(md, section, *cells):
    """The cells of the line that starts with ``cells`` in the table under ``### section``."""
    text = md.split(f"### {section}", 1)[1].split("###", 1)[0]
    start = "| " + " | ".join(cells) + " |"
    (line,) = [x for x in text.splitlines() if x.startswith(start)]
    return [c.strip() for c in line.strip("| ").split("|")]


def test_tables_and_plots(tmp_path, kernels_csv):
    _e2e_csv(tmp_path / "e2e.csv")
    _ablation_csv(tmp_path / "ablation.csv")
    md_path, plot_dir = tmp_path / "report.md", tmp_path / "plots"
    assert main(["bench", "report", "--kernels", str(kernels_csv), "--e2e", str(tmp_path / "e2e.csv"),
                 "--ablation", str(tmp_path / "ablation.csv"), "--markdown", str(md_path),
                 "--plots", str(plot_dir)]) == 0
    md = md_path.read_text()

    with open(kernels_csv) as f:
        kernel_rows = [r for r in csv.DictReader(f) if r["graph"] in GRAPHS.split(",") and r["impl"] == "fp16"]
    speedups = [float(r["speedup"]) for r in kernel_rows]
    assert len(speedups) == 2
    line = _line(md, "Speedup against fp32 cuSPARSE", "spmm", "fp16", "16", "real graphs", "2")
    assert line[5:8] == [f"{geomean(speedups):.2f}x", f"{min(speedups):.2f}x", f"{statistics.median(speedups):.2f}x"]
    assert f"torch {torch.__version__}" in md  # the kernels' own environment

    line = _line(md, "Speedup against the fastest PyG fp32", "GCN 2x128", "flashgnn", "fp16", "3")
    values = list(E2E_SPEEDUPS.values())
    assert line[4:8] == [f"{geomean(values):.2f}x", f"{min(values):.2f}x", f"{statistics.median(values):.2f}x",
                         f"{max(values):.2f}x"]
    assert "NVIDIA H200, driver 580.159.04, torch 2.11.0+cu130, 2026-11-22T10:00:00" in md
    assert "g4 GCN 2x128 flashgnn fp16: OutOfMemoryError" in md

    ratios = [ms16 / ms8 for ms8, ms16 in ABLATION.values()]
    line = _line(md, "Time 16x1 / 8x1", "spmm", "fp16", "128", "2")
    assert line[4] == f"{geomean(ratios):.2f}x" and line[8:10] == ["0.50", "1.50"]
    assert "ablation.csv: environment not recorded" in md

    expected = {"kernels_speedup.png", "kernels_throughput.png", "e2e_speedup.png", "vectors.png"}
    assert {p.name for p in plot_dir.iterdir()} == expected
    for name in expected:
        data = (plot_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_without_matplotlib_tables_are_written_and_plots_skipped(tmp_path, monkeypatch, capsys):
    _e2e_csv(tmp_path / "e2e.csv")
    monkeypatch.setattr(plots, "missing", lambda: "matplotlib is not installed: plots skipped")
    assert main(["bench", "report", "--e2e", str(tmp_path / "e2e.csv"), "--markdown", str(tmp_path / "r.md"),
                 "--plots", str(tmp_path / "plots")]) == 0
    md = (tmp_path / "r.md").read_text()
    assert "plots skipped" in md and "plots skipped" in capsys.readouterr().err
    assert "| GCN 2x128 | flashgnn | fp16 | 3 |" in md
    assert not (tmp_path / "plots").exists()


def test_bad_inputs_are_clear(tmp_path, capsys):
    assert main(["bench", "report", "--markdown", str(tmp_path / "r.md")]) == 2
    assert "give at least one of --kernels" in capsys.readouterr().err
    assert main(["bench", "report", "--e2e", str(tmp_path / "none.csv"), "--markdown", str(tmp_path / "r.md")]) == 2
    assert "no such file" in capsys.readouterr().err
