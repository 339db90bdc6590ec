"""``flashgnn bench reorder`` on the CPU: vector counts against a window-by-window count of the
renumbered graph, its CSV and Markdown, its section of the benchmark document, bad options;
on a GPU, the timed run with its check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashgnn import Graph
from flashgnn.benchmarking import document, results
from flashgnn.benchmarking.reordering import ReorderRow, default_methods, summary
from flashgnn.cli import main
from tests.helpers import needs_gpu, read_csv, run_bench

GRAPHS = ("hetero_texas", "cora")


def window_columns(indptr: np.ndarray, indices: np.ndarray, perm: np.ndarray) -> int:
    """Distinct (new row // 8, new column) pairs of the CSR renumbered by ``perm``."""
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(len(perm))
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return len(set(zip((inverse[rows] // 8).tolist(), inverse[indices].tolist())))


def run(tmp_path, data_dir, *extra) -> tuple[int, list[dict]]:
    return run_bench(
        "reorder",
        tmp_path / "reorder.csv",
        "--graphs",
        ",".join(GRAPHS),
        "--data",
        str(data_dir),
        "--markdown",
        str(tmp_path / "reorder.md"),
        *extra,
    )


def test_cpu_run_counts_the_vectors_of_each_order(tmp_path, data_dir):
    code, rows = run(tmp_path, data_dir, "--methods", "rcm,community,degree")
    assert code == 0
    assert [(r["graph"], r["method"]) for r in rows] == [
        (g, m) for g in GRAPHS for m in ("rcm", "community", "degree")
    ]
    for r in rows:
        with np.load(data_dir / f"{r['graph']}.npz") as d:
            indptr, indices = d["indptr"].astype(np.int64), d["indices"].astype(np.int64)
        n = len(indptr) - 1
        _, reordering = Graph(torch.from_numpy(indptr), torch.from_numpy(indices), n).reorder(
            r["method"]
        )
        assert int(r["vectors_before"]) == window_columns(indptr, indices, np.arange(n))
        assert int(r["vectors_after"]) == window_columns(indptr, indices, reordering.perm.numpy())
        assert float(r["vpn_after"]) == pytest.approx(int(r["vectors_after"]) / len(indices))
        # the bytes follow the vectors: a row of N = 128 fp16 values per vector
        change = float(r["mb_before"]) - float(r["mb_after"])
        vectors = int(r["vectors_before"]) - int(r["vectors_after"])
        assert change * 1e6 == pytest.approx(vectors * (128 * 2 + 4 + 1 + 8 * 4))
        assert float(r["reorder_s"]) > 0 and r["ms_before"] == r["ms_after"] == ""
        assert r["error"] == ""
    cora = {r["method"]: r for r in rows if r["graph"] == "cora"}
    assert float(cora["community"]["vpn_after"]) < 0.8 * float(cora["community"]["vpn_before"])
    text = (tmp_path / "reorder.md").read_text()
    assert "vectors/nnz after" in text and "| cora | community |" in text


def test_the_document_renders_the_run(tmp_path, data_dir):
    root = tmp_path / "results"
    main(
        [
            "bench",
            "reorder",
            "--device",
            "cpu",
            "--graphs",
            "hetero_texas",
            "--methods",
            "rcm",
            "--data",
            str(data_dir),
            "--results",
            str(root),
        ]
    )
    assert (root / "cpu" / "reorder.csv").is_file()
    md = document.build(root, tmp_path)
    assert "## Locality reordering: vectors per nonzero and SpMM time" in md
    assert "| graph | nnz | vectors/nnz | SpMM ms | rcm vectors/nnz | rcm speedup | rcm s |" in md
    assert "| hetero_texas | 558 | " in md and "| geomean (" not in md  # no kernel times on the CPU
    assert [name for _, name, _ in results.find(root)] == ["reorder"]


def test_the_summary_puts_methods_side_by_side():
    def row(graph, method, speedup, err):
        return ReorderRow(
            graph,
            100,
            method,
            vpn_before=1.0,
            vpn_after=0.5,
            ms_before=2.0,
            speedup=speedup,
            reorder_s=0.1,
            rel_err=err,
        )

    rows = [row("a", "rcm", 2.0, 1e-4), row("a", "degree", 0.5, 3e-4), row("b", "rcm", 8.0, 2e-4)]
    rows.append(ReorderRow("c", None, "load", error="no such file"))
    lines = summary(rows).splitlines()
    assert lines[0].startswith("| graph | nnz | vectors/nnz | SpMM ms | rcm vectors/nnz |")
    assert "| degree vectors/nnz | degree speedup | degree s | max rel err |" in lines[0]
    assert (
        lines[2] == "| a | 100 | 1.000 | 2 | 0.500 | 2.00x | 0.1 | 0.500 | 0.50x | 0.1 | 3.0e-04 |"
    )
    assert lines[3] == "| b | 100 | 1.000 | 2 | 0.500 | 8.00x | 0.1 |  |  |  | 2.0e-04 |"
    assert lines[4] == "| geomean (2 graphs) |  |  |  |  | 4.000x |  |  | 0.500x |  |  |"
    assert len(lines) == 5  # the failed row stays in the CSV


def test_bad_options_are_clear(tmp_path, data_dir, capsys):
    base = ["bench", "reorder", "--device", "cpu", "--data", str(data_dir), "--graphs", "cora"]
    assert main([*base, "--methods", "rcm,bfs"]) == 2
    assert "--methods: expected a comma list of none, rcm" in capsys.readouterr().err
    assert main([*base, "--size", "0"]) == 2
    assert "--size must be >= 1" in capsys.readouterr().err


def test_metis_is_a_default_method_only_with_pymetis(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "pymetis" else real(name)
    )
    assert default_methods() == ["rcm", "degree", "community"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert default_methods() == ["rcm", "degree", "community", "metis"]
    assert {"speedup", "share_200", "payback_epochs"} <= set(ReorderRow.__dataclass_fields__)


@needs_gpu
def test_gpu_run_times_and_checks_every_method(tmp_path, data_dir):
    out = tmp_path / "reorder.csv"
    code = main(
        [
            "bench",
            "reorder",
            "--device",
            "cuda",
            "--graphs",
            "cora,musae_github",
            "--methods",
            "rcm,community,degree",
            "--data",
            str(data_dir),
            "--check",
            "--quick",
            "--csv",
            str(out),
        ]
    )
    assert code == 0
    rows = read_csv(out)
    assert len(rows) == 6
    for r in rows:
        assert r["error"] == "" and float(r["rel_err"]) <= 2e-3
        assert float(r["ms_before"]) > 0 and float(r["ms_after"]) > 0
        assert float(r["speedup"]) == pytest.approx(float(r["ms_before"]) / float(r["ms_after"]))
        share = float(r["reorder_s"]) * 1e3 / (200 * 3 * float(r["ms_before"]))
        assert float(r["share_200"]) == pytest.approx(share)
