"""``flashgnn bench report`` on result files in the real formats: a kernel CSV from a CPU run of
``bench kernels``, e2e rows written by the benchmarks' CSV writer, an 8x1 / 16x1 ablation CSV;
the Markdown must hold statistics computed here from those rows, the plots must be PNGs, and
every table must carry its environment."""

import csv
import datetime
import math
import re
import statistics
import subprocess
import sys

import pytest
import torch

from flashgnn.benchmarking import ablation, document, plots, results, table
from flashgnn.benchmarking.ablation import AblationRow
from flashgnn.benchmarking.kernels import environment
from flashgnn.benchmarking.layers import ModelRow
from flashgnn.benchmarking.table import Row
from flashgnn.benchmarking.timing import Timer
from flashgnn.cli import main

GRAPHS = "hetero_texas,hetero_cornell"
ENV = {
    "date": "2026-11-22T10:00:00",
    "torch": "2.11.0+cu130",
    "gpu": "NVIDIA H200",
    "driver": "580.159.04",
}
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
    assert (
        main(
            [
                "bench",
                "kernels",
                "--device",
                "cpu",
                "--graphs",
                GRAPHS,
                "--data",
                str(root),
                "--ops",
                "spmm",
                "--precisions",
                "fp16",
                "--sizes",
                "16",
                "--warmup",
                "1",
                "--iters",
                "1",
                "--csv",
                str(path),
            ]
        )
        == 0
    )
    return path


def _e2e_csv(path):
    rows = []
    for graph, speedup in E2E_SPEEDUPS.items():
        rows.append(ModelRow(graph, "GCN 2x128", "PyG adj_t", "fp32", ms=10.0, speedup=1.0))
        rows.append(
            ModelRow(graph, "GCN 2x128", "flashgnn", "fp16", ms=10.0 / speedup, speedup=speedup)
        )
    rows.append(
        ModelRow(
            "g4", "GCN 2x128", "flashgnn", "fp16", error="OutOfMemoryError: CUDA out of memory"
        )
    )
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
    assert (
        main(
            [
                "bench",
                "report",
                "--kernels",
                str(kernels_csv),
                "--e2e",
                str(tmp_path / "e2e.csv"),
                "--ablation",
                str(tmp_path / "ablation.csv"),
                "--markdown",
                str(md_path),
                "--plots",
                str(plot_dir),
            ]
        )
        == 0
    )
    md = md_path.read_text()

    with open(kernels_csv) as f:
        kernel_rows = [
            r for r in csv.DictReader(f) if r["graph"] in GRAPHS.split(",") and r["impl"] == "fp16"
        ]
    speedups = [float(r["speedup"]) for r in kernel_rows]
    assert len(speedups) == 2
    line = _line(md, "Speedup against fp32 cuSPARSE", "spmm", "fp16", "16", "real graphs", "2")
    assert line[5:8] == [
        f"{geomean(speedups):.2f}x",
        f"{min(speedups):.2f}x",
        f"{statistics.median(speedups):.2f}x",
    ]
    assert f"torch {torch.__version__}" in md  # the kernels' own environment

    line = _line(md, "Speedup against the fastest PyG fp32", "GCN 2x128", "flashgnn", "fp16", "3")
    values = list(E2E_SPEEDUPS.values())
    assert line[4:8] == [
        f"{geomean(values):.2f}x",
        f"{min(values):.2f}x",
        f"{statistics.median(values):.2f}x",
        f"{max(values):.2f}x",
    ]
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
    assert (
        main(
            [
                "bench",
                "report",
                "--e2e",
                str(tmp_path / "e2e.csv"),
                "--markdown",
                str(tmp_path / "r.md"),
                "--plots",
                str(tmp_path / "plots"),
            ]
        )
        == 0
    )
    md = (tmp_path / "r.md").read_text()
    assert "plots skipped" in md and "plots skipped" in capsys.readouterr().err
    assert "| GCN 2x128 | flashgnn | fp16 | 3 |" in md
    assert not (tmp_path / "plots").exists()


def test_bad_inputs_are_clear(tmp_path, capsys):
    assert main(["bench", "report", "--markdown", str(tmp_path / "r.md")]) == 2
    assert "give at least one of --kernels" in capsys.readouterr().err
    assert (
        main(
            [
                "bench",
                "report",
                "--e2e",
                str(tmp_path / "none.csv"),
                "--markdown",
                str(tmp_path / "r.md"),
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err


# ---------------------------------------------------------------------- the benchmark document
REPO = results.REPO_ROOT  # the checkout whose flashgnn is imported
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
STAMP = {
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "date": "2026-11-27T12:00:00+00:00",
    "torch": "2.11.0+cu130",
    "driver": "580.159.04",
    "cuda": "13.0",
}
KERNEL_SPEEDUPS = {"cora": 2.0, "citeseer": 8.0, "powerlaw_products": 3.0}  # fp16 SpMM, N = 32
SECTIONS = [
    "How to read",
    "How we measure",
    "How to reproduce",
    "Kernels: SpMM and SDDMM against cuSPARSE",
    "Format build: CSR to ME-BCRS on the GPU",
    "Layers: one GCN, AGNN (and GAT) layer against PyG",
    "Training epochs at ogbn-products scale",
    "End-to-end training epochs",
    "Ablation: 8x1 vectors against 16x1 blocks",
]


def _stamp(gpu, command):
    return {**STAMP, "gpu": gpu, "command": command}


def _kernel_rows(speedups):
    rows = []
    for graph, x in speedups.items():
        rows.append(Row(graph, 100, "build", "k8", ms=0.5))
        rows.append(Row(graph, 100, "spmm", "torch.sparse.mm fp32", 32, ms=1.0, rel_err=1e-8))
        rows.append(
            Row(graph, 100, "spmm", "fp16", 32, ms=1.0 / x, gbps=100.0, speedup=x, rel_err=1e-4)
        )
    return rows


def _layer_rows():
    def row(impl, precision, ms=None, wall_ms=None, speedup=None, error=""):
        return ModelRow(
            "musae_github",
            "GCNConv",
            impl,
            precision,
            ms=ms,
            wall_ms=wall_ms,
            speedup=speedup,
            error=error,
        )

    return [
        row("PyG adj_t cached", "fp32", 1.0, 1.2, 1.0),
        row("PyG edge_index", "fp32", 2.0, 2.1, 0.57),
        row("flashgnn", "fp16", 0.2, 0.3, 4.0),
        row("PyG edge_index", "fp16", error="OutOfMemoryError: no"),
    ]


def _results(root):
    """A results folder as the benchmarks write it: kernels on two GPUs, and one run of the
    layers, training, e2e and ablation benchmarks."""
    for gpu in (H100, H200):
        table.write_csv(
            _kernel_rows(KERNEL_SPEEDUPS),
            results.result_path(root, gpu, "kernels"),
            _stamp(gpu, "flashgnn bench kernels --timer back-to-back --check"),
            Row,
        )
    table.write_csv(
        _layer_rows(),
        results.result_path(root, H200, "layers"),
        _stamp(H200, "flashgnn bench layers"),
        ModelRow,
    )
    for name in ("training", "e2e"):
        _e2e_csv(results.result_path(root, H200, name))
    rows = []
    for graph, (ms8, ms16) in ABLATION.items():
        rows.append(AblationRow(graph, 10, "spmm", "fp16", 128, 8, ms=ms8, mmas=100, bytes=1000))
        rows.append(
            AblationRow(
                graph, 10, "spmm", "fp16", 128, 16, ms=ms16, mmas=50, bytes=1500, ratio=ms16 / ms8
            )
        )
    table.write_csv(
        rows,
        results.result_path(root, H100, "ablation"),
        _stamp(H100, "flashgnn bench ablation"),
        AblationRow,
    )


def _section(md, title):
    return md.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_document_has_every_section_and_a_stamped_table_per_gpu(tmp_path):
    root = tmp_path / "results"
    _results(root)
    md_path = tmp_path / "BENCHMARKS.md"
    assert main(["bench", "report", "--results", str(root), "--markdown", str(md_path)]) == 0
    md = md_path.read_text()
    command = "flashgnn bench report --results benchmarks/results --markdown BENCHMARKS.md"
    assert md.startswith(f"<!-- Generated from benchmarks/results/ by `{command}`: do not edit")
    assert [line[3:] for line in md.splitlines() if line.startswith("## ")] == SECTIONS

    kernels = _section(md, SECTIONS[3])
    assert kernels.count(f"### {H100}") == kernels.count(f"### {H200}") == 1
    link = "results/h200/kernels.csv"
    assert (
        f"Commit `0123456`, {H200} (driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130), "
        f"2026-11-27 12:00 UTC; every row: [`{link}`]({link})."
    ) in kernels
    assert "Command: `flashgnn bench kernels --timer back-to-back --check`" in kernels
    real = [KERNEL_SPEEDUPS["cora"], KERNEL_SPEEDUPS["citeseer"]]
    line = _line(md, H100, "spmm", "fp16", "32")
    assert line[3:6] == [f"{geomean(real):.2f}x", f"{min(real):.2f}x", "3.00x, 100 GB/s"]
    assert "6 of 6 results checked against float64" in kernels
    assert "| 2 real: median | 100 | 0.5 | 0.00G |" in _section(md, SECTIONS[4])

    layers = _section(md, SECTIONS[5])
    row = "| musae_github | GCNConv | flashgnn | fp16 | 0.2 | 0.3 | 4.00x | 1.2 ms (adj_t cached) |"
    assert row in layers
    assert (
        "PyG rows with an error (the CSV has it): musae_github GCNConv PyG edge_index fp16 "
        "(OutOfMemoryError)."
    ) in layers
    assert "| GCN 2x128 | flashgnn | fp16 |" in _section(md, SECTIONS[6])
    assert "| spmm | 128 | 2/2 | 100% | met |" in _section(md, SECTIONS[8])
    assert "session" not in md.lower()


def test_the_document_shows_a_replaced_run_beside_the_new_one(tmp_path):
    root = tmp_path / "results"
    _results(root)
    before = results.before_path(results.result_path(root, H100, "kernels"))
    table.write_csv(
        _kernel_rows({g: x / 2 for g, x in KERNEL_SPEEDUPS.items()}),
        before,
        _stamp(H100, "flashgnn bench kernels --timer back-to-back"),
        Row,
    )
    assert [name for _, name, _ in results.find(root)].count("kernels") == 2  # no .before
    md = document.build(root, tmp_path)
    old = [KERNEL_SPEEDUPS["cora"] / 2, KERNEL_SPEEDUPS["citeseer"] / 2]
    new = [KERNEL_SPEEDUPS["cora"], KERNEL_SPEEDUPS["citeseer"]]
    assert f"Against the run before it (commit `0123456`, {H100}" in md
    change = f"{geomean(old):.2f}x -> {geomean(new):.2f}x"
    assert f"| spmm | fp16 | 32 | {change} | 1.50x -> 3.00x |" in md


def test_a_result_no_section_renders_is_an_error(tmp_path, capsys):
    root = tmp_path / "results"
    _e2e_csv(results.result_path(root, H200, "sweep"))
    out = str(tmp_path / "B.md")
    assert main(["bench", "report", "--results", str(root), "--markdown", out]) == 2
    assert "no section of the report renders h200/sweep.csv" in capsys.readouterr().err
    single = ["--e2e", str(root / "h200" / "sweep.csv")]
    assert main(["bench", "report", "--results", str(root), *single, "--markdown", out]) == 2
    assert "--results takes no single files" in capsys.readouterr().err


def test_the_stamp_records_commit_date_and_command(tmp_path, monkeypatch):
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    argv = ["/repo/flashgnn/__main__.py", "bench", "e2e", "--graphs", "a b"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv("FLASHGNN_COMMIT", raising=False)
    path = tmp_path / "h200" / "e2e.csv"
    rows = [ModelRow("g", "GCN", "flashgnn", "fp16", ms=1.0)]
    table.write_csv(rows, path, {"gpu": H200}, ModelRow)
    env = table.read_environment(path)
    assert env["gpu"] == H200
    assert env["commit"] in (head, f"{head}-dirty")
    assert env["command"] == "flashgnn bench e2e --graphs 'a b'"
    assert datetime.datetime.fromisoformat(env["date"]).utcoffset() == datetime.timedelta(0)
    env = environment(Timer(torch.device("cpu")))  # the benchmarks' own: the same three keys
    assert env["commit"] in (head, f"{head}-dirty")
    assert env["command"] == "flashgnn bench e2e --graphs 'a b'"
    monkeypatch.setenv("FLASHGNN_COMMIT", "0123abc")  # a copy of the tree without .git
    assert results.provenance()["commit"] == "0123abc"


def test_results_sends_a_benchmark_csv_into_the_layout(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(ablation, "run", lambda args: seen.setdefault("csv", args.csv) and 0)
    assert main(["bench", "ablation", "--device", "cpu", "--results", str(tmp_path)]) == 0
    assert seen["csv"] == tmp_path / "cpu" / "ablation.csv"
    assert results.gpu_slug(H100) == "h100-80gb-hbm3" and results.gpu_slug(H200) == "h200"
    both = ["--results", str(tmp_path), "--csv", str(tmp_path / "a.csv")]
    assert main(["bench", "ablation", *both]) == 2


def test_benchmarks_md_is_the_report_of_the_committed_results():
    """BENCHMARKS.md is generated: a hand edit, or a result changed without regenerating it,
    fails here. Regenerate it from the repository's root with
    ``flashgnn bench report --results benchmarks/results --markdown BENCHMARKS.md``."""
    committed = (REPO / "BENCHMARKS.md").read_text()
    assert document.build(REPO / "benchmarks" / "results", REPO) == committed
    assert len(committed.splitlines()) < 420  # current tables only: history lives in git
    files = [p for p in (REPO / "benchmarks" / "results").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1 << 20
    for path in files:
        assert path.name.split(".")[0] in document.SECTIONS, path
        text = f"{path.name}\n{path.read_text()}".lower()
        assert re.search(r"session|-s\d", text) is None, path
