"""The sparse linear benchmark (``flashgnn bench sparse-linear``) on the CPU on a tiny shape:
its rows, the CSV and stamp, and the crossover interpolation."""

import argparse
import json

import pytest

from flashgnn.benchmarking import sparse_linear as bench
from tests.helpers import read_csv


def _args(tmp_path, *extra):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(
        [
            "--device",
            "cpu",
            "--in-features",
            "24",
            "--out-features",
            "20",
            "--tokens",
            "16",
            "--vectors",
            "4,8",
            "--sparsities",
            "0.5,0.9",
            "--warmup",
            "0",
            "--iters",
            "1",
            "--csv",
            str(tmp_path / "sl.csv"),
            *extra,
        ]
    )


def test_rows_and_stamp(tmp_path):
    assert bench.run(_args(tmp_path)) == 0
    rows = read_csv(tmp_path / "sl.csv")
    keys = {(r["impl"], r["vector"], r["sparsity"], r["step"]) for r in rows}
    assert ("dense", "", "", "forward") in keys and ("dense", "", "", "forward+backward") in keys
    for v in ("4", "8"):
        for s in ("0.5", "0.9"):
            assert ("cusparse-csr", v, s, "forward") in keys
            assert ("sparse-linear", v, s, "forward") in keys
            assert ("sparse-linear", v, s, "forward+backward") in keys
    for r in rows:
        assert r["error"] == "" and float(r["wall_ms"]) > 0 and r["kernel_ms"] == ""
        if r["impl"] == "sparse-linear":
            expected = float(_dense(rows, r["step"])) / float(r["wall_ms"])
            assert float(r["speedup_dense"]) == pytest.approx(expected)
    stamp = json.loads((tmp_path / "sl.csv.json").read_text())
    assert "cpu" in stamp and stamp["shape"].startswith("W ") and stamp["commit"]


def _dense(rows, p):
    (row,) = [r for r in rows if r["impl"] == "dense" and r["step"] == p]
    return row["wall_ms"]


def test_crossover_interpolates():
    rows = [
        bench.Row("sparse-linear", 8, 0.8, "forward", speedup_dense=0.5),
        bench.Row("sparse-linear", 8, 0.9, "forward", speedup_dense=1.5),
        bench.Row("sparse-linear", 4, 0.5, "forward", speedup_dense=1.2),
        bench.Row("sparse-linear", 2, 0.9, "forward", speedup_dense=0.9),
        bench.Row("sparse-linear", 2, 0.9, "forward+backward", speedup_dense=3.0),
    ]
    assert bench.crossovers(rows) == {2: None, 4: 0.5, 8: pytest.approx(0.85)}


@pytest.mark.parametrize(
    "extra", [("--vectors", "3"), ("--sparsities", "1.0"), ("--passes", "backward")]
)
def test_bad_options(tmp_path, extra):
    with pytest.raises(ValueError):
        bench.run(_args(tmp_path, *extra))
