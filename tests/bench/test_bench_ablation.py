"""``flashgnn bench ablation`` on the CPU on a tiny real graph, and its MMA / byte counts
(benchmarking/mma_cost.py) against counts made by walking a small matrix window by window."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from flashgnn import MEBCRS
from flashgnn.benchmarking.mma_cost import padding_fraction, sddmm_cost, spmm_cost
from tests.helpers import ONE_CALL, random_csr, run_bench

GRAPH = "hetero_texas"  # 183 nodes, 558 nonzeros


def brute_force(a, size: int) -> dict:
    """(op, vector) -> (mmas, bytes) by the designs' definitions, fp16 operands, float32 values."""
    n_rows = a.shape[0]
    windows = {
        v: [len(set(a[r : r + v].indices.tolist())) for r in range(0, n_rows, v)] for v in (8, 16)
    }
    vectors = sum(windows[8])
    blocks = sum(-(-c // 8) for c in windows[16])
    row_ptr = {8: 8 * (len(windows[8]) + 1), 16: 8 * (len(windows[16]) + 1)}
    return {
        ("spmm", 8): (
            sum(-(-c // 8) for c in windows[8]) * -(-size // 16),
            row_ptr[8] + 4 * vectors + vectors + 4 * 8 * vectors + 2 * size * (vectors + n_rows),
        ),
        ("spmm", 16): (
            blocks * -(-size // 8),
            row_ptr[16] + 4 * 8 * blocks + 4 * 128 * blocks + 2 * size * (8 * blocks + n_rows),
        ),
        ("sddmm", 8): (
            sum(-(-c // 16) for c in windows[8]) * -(-size // 8),
            row_ptr[8] + 5 * vectors + 2 * size * (n_rows + vectors) + 4 * 8 * vectors,
        ),
        ("sddmm", 16): (
            blocks * -(-size // 8),
            row_ptr[16] + 6 * 8 * blocks + 2 * size * (n_rows + 8 * blocks) + 4 * 128 * blocks,
        ),
    }


@pytest.mark.parametrize("size", [1, 7, 32, 33, 128])
def test_counts_match_a_window_by_window_count(size, rng):
    a = random_csr(45, 70, 0.15, rng).tolil()
    a[7] = 0  # an empty row
    a = sp.csr_matrix(a)
    want = brute_force(a, size)
    for vector in (8, 16):
        fmt = MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=70, vector=vector)
        for op, cost in (("spmm", spmm_cost), ("sddmm", sddmm_cost)):
            got = cost(fmt, size)
            assert (got.mmas, got.bytes) == want[(op, vector)], (op, vector)
    fmt16 = MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=70, vector=16)
    windows = [len(set(a[r : r + 16].indices.tolist())) for r in range(0, 45, 16)]
    padded = sum(-(-c // 8) * 8 - c for c in windows)
    assert padding_fraction(fmt16) == pytest.approx(padded / (8 * fmt16.n_blocks))
    assert padding_fraction(MEBCRS.from_csr(a.indptr, a.indices, a.data)) == 0.0


def test_quick_run_on_cpu(tmp_path, data_dir):
    out, md = tmp_path / "ablation.csv", tmp_path / "ablation.md"
    code, rows = run_bench(
        "ablation",
        out,
        *ONE_CALL,
        "--graphs",
        GRAPH,
        "--data",
        str(data_dir),
        "--quick",
        "--check",
        "--markdown",
        str(md),
    )
    assert code == 0
    assert {"graph", "op", "precision", "size", "vector", "ms", "mmas", "bytes"} <= set(rows[0])
    assert [(r["op"], r["size"], r["vector"]) for r in rows] == [
        (op, str(size), str(v))
        for op, size in (("spmm", 32), ("spmm", 128), ("sddmm", 32))
        for v in (8, 16)
    ]
    indptr, indices = (np.load(data_dir / f"{GRAPH}.npz")[k] for k in ("indptr", "indices"))
    for r8, r16 in zip(rows[::2], rows[1::2]):
        assert r8["error"] == r16["error"] == "" and r8["precision"] == "fp16"
        assert float(r16["ratio"]) == pytest.approx(float(r16["ms"]) / float(r8["ms"]))
        assert float(r8["padding"]) == 0 and 0 < float(r16["padding"]) < 1
        assert float(r8["rel_err"]) <= 2e-3 and float(r16["rel_err"]) <= 2e-3
        for r in (r8, r16):
            fmt = MEBCRS.from_csr(indptr, indices, n_cols=183, vector=int(r["vector"]))
            cost = (spmm_cost if r["op"] == "spmm" else sddmm_cost)(fmt, int(r["size"]))
            assert (int(r["mmas"]), int(r["bytes"])) == (cost.mmas, cost.bytes)
        assert int(r16["mmas"]) > int(r8["mmas"])
    assert (tmp_path / "ablation.csv.json").is_file()
    text = md.read_text()
    assert "## Summary" in text and "8x1 faster" in text and GRAPH in text
