"""The kernel benchmark harness (``flashgnn bench kernels``), run on the CPU on a tiny real
graph: rows, formulas, --check, and that a failing or wrong kernel is recorded, not hidden."""

import json

import numpy as np
import pytest
import torch

from flashgnn.benchmarking import kernels as kernel_bench
from flashgnn.benchmarking.checks import ERROR_BOUND
from flashgnn.benchmarking.graphs import load_graph
from flashgnn.benchmarking.timing import BackToBackTimer, kernel_timer
from flashgnn.cli import main
from tests.helpers import ONE_CALL, run_bench

GRAPH = "hetero_texas"  # 183 nodes, 558 nonzeros


def _run(tmp_path, data_dir, *extra):
    md = tmp_path / "rows.md"
    code, rows = run_bench(
        "kernels",
        tmp_path / "rows.csv",
        *ONE_CALL,
        "--graphs",
        GRAPH,
        "--data",
        str(data_dir),
        "--sizes",
        "8",
        "--markdown",
        str(md),
        *extra,
    )
    return code, rows, md.read_text()


def _find(rows, op, impl, graph=GRAPH):
    (row,) = [r for r in rows if r["graph"] == graph and r["op"] == op and r["impl"] == impl]
    return row


def test_rows_formulas_and_check(tmp_path, data_dir):
    code, rows, md = _run(tmp_path, data_dir, "--check")
    assert code == 0
    nnz = 558
    assert {(r["op"], r["impl"]) for r in rows if r["graph"] == GRAPH} == {
        ("build", "k8"),
        ("build", "k4"),
        ("spmm", "torch.sparse.mm fp32"),
        ("spmm", "fp16"),
        ("spmm", "bf16"),
        ("spmm", "tf32"),
        ("spmm", "fp32"),
        ("sddmm", "sampled_addmm fp32"),
        ("sddmm", "fp16"),
        ("sddmm", "bf16"),
        ("sddmm", "tf32"),
        ("sddmm", "fp32"),
    }
    for r in rows:
        assert r["error"] == ""
        if r["graph"] != GRAPH or r["op"] == "build":
            continue
        ms = float(r["ms"])
        assert float(r["gflops"]) == pytest.approx(2 * nnz * 8 / ms / 1e6)
        bound = ERROR_BOUND.get(r["impl"], 1e-5)
        assert 0 <= float(r["rel_err"]) <= bound
    for op, base in kernel_bench.BASELINE.items():
        base_ms = float(_find(rows, op, base)["ms"])
        for precision in ("fp16", "bf16", "tf32", "fp32"):
            r = _find(rows, op, precision)
            assert float(r["speedup"]) == pytest.approx(base_ms / float(r["ms"]))
    geo = _find(rows, "spmm", "fp16", graph="geomean real (1 graphs)")
    assert float(geo["speedup"]) == pytest.approx(float(_find(rows, "spmm", "fp16")["speedup"]))
    assert "## Summary" in md and GRAPH in md


def test_effective_bytes_of_spmm(tmp_path, data_dir):
    """GB/s of flashgnn's fp16 SpMM counts row_ptr, col_idx, the format's float32 values (8 per
    vector), fp16 X gathered once per vector and fp16 Y written once."""
    _, rows, _ = _run(tmp_path, data_dir, "--ops", "spmm", "--precisions", "fp16")
    from flashgnn import MEBCRS

    g = load_graph(GRAPH, data_dir)
    fmt = MEBCRS.from_csr(g.indptr, g.indices, n_cols=g.num_nodes)
    n_win, n_vec, n = fmt.n_windows, fmt.n_vectors, 8
    expected = 8 * (n_win + 1) + 4 * n_vec + 4 * 8 * n_vec + 2 * n * n_vec + 2 * n * g.num_nodes
    r = _find(rows, "spmm", "fp16")
    assert float(r["gbps"]) == pytest.approx(expected / float(r["ms"]) / 1e6)


def test_a_failing_kernel_is_recorded_and_the_run_goes_on(tmp_path, data_dir, monkeypatch):
    real_spmm = kernel_bench.spmm

    def spmm_failing_in_bf16(a, x, precision):
        if precision == "bf16":
            raise RuntimeError("launch failed\nsecond line")
        return real_spmm(a, x, precision)

    monkeypatch.setattr(kernel_bench, "spmm", spmm_failing_in_bf16)
    code, rows, _ = _run(tmp_path, data_dir, "--ops", "spmm", "--check")
    assert code == 1
    assert _find(rows, "spmm", "bf16")["error"] == "RuntimeError: launch failed"
    assert _find(rows, "spmm", "bf16")["ms"] == ""
    for precision in ("fp16", "tf32", "fp32"):
        assert _find(rows, "spmm", precision)["error"] == ""


def test_wrong_results_are_flagged(tmp_path, data_dir, monkeypatch):
    real_sddmm = kernel_bench.sddmm

    def sddmm_writing_padding(a, x, y, precision):
        out = real_sddmm(a, x, y, precision)
        padding = torch.ones(out.numel(), dtype=torch.bool)
        padding[a.perm] = False
        out[padding] = 1.0
        if precision == "fp16":
            out[a.perm[:5]] += 100.0
        return out

    monkeypatch.setattr(kernel_bench, "sddmm", sddmm_writing_padding)
    code, rows, _ = _run(tmp_path, data_dir, "--ops", "sddmm", "--check")
    assert code == 1
    fp16 = _find(rows, "sddmm", "fp16")
    assert fp16["error"].startswith("check failed: ") and float(fp16["rel_err"]) > 1e-2
    bf16 = _find(rows, "sddmm", "bf16")
    assert bf16["error"].endswith("padding slots are not 0") and float(bf16["rel_err"]) < 1e-2


def test_back_to_back_timer_times_runs_of_calls(tmp_path, data_dir):
    """--timer back-to-back: the same rows and checks, timed per call over runs of calls; the
    format builds keep the cold timer; the environment names the timer."""
    code, rows, md = _run(
        tmp_path, data_dir, "--check", "--timer", "back-to-back", "--ops", "sddmm"
    )
    assert code == 0
    for r in rows:
        assert r["error"] == "" and (r["graph"] != GRAPH or float(r["ms"]) > 0)
    base_ms = float(_find(rows, "sddmm", "sampled_addmm fp32")["ms"])
    fp16 = _find(rows, "sddmm", "fp16")
    assert float(fp16["speedup"]) == pytest.approx(base_ms / float(fp16["ms"]))
    assert "timer: back-to-back" in md
    env = json.loads((tmp_path / "rows.csv.json").read_text())
    assert env["timer"].startswith("back-to-back")


def test_back_to_back_timer_counts_its_calls():
    calls = []
    timer = BackToBackTimer("cpu", warmup=2, iters=4, sample_ms=1e-9, max_calls=5)
    m = timer(lambda: calls.append(None) or len(calls))
    # 2 warm-up calls, a probe of 3 samples of one call, then 4 samples of `calls` calls each
    assert m.calls == 1 and len(m.samples) == 4 and len(calls) == 2 + 3 + 4 and m.result == 9
    slow = BackToBackTimer("cpu", warmup=0, iters=2, sample_ms=1e3, max_calls=5)
    m = slow(lambda: 0)
    assert m.calls == 5 and len(m.samples) == 2
    with pytest.raises(ValueError, match="max_calls"):
        BackToBackTimer("cpu", max_calls=0)
    assert isinstance(kernel_timer("back-to-back", "cpu", 0, 1), BackToBackTimer)
    with pytest.raises(ValueError, match="timer must be one of cold, back-to-back"):
        kernel_timer("warm", "cpu", 0, 1)


def test_bad_options_are_clear(data_dir, capsys):
    assert main(["bench", "kernels", "--device", "cpu", "--ops", "spmv"]) == 2
    assert main(["bench", "kernels", "--device", "cpu", "--sizes", "0"]) == 2
    with pytest.raises(SystemExit):
        main(["bench", "kernels", "--device", "cpu", "--timer", "warm"])
    assert (
        main(["bench", "kernels", "--device", "cpu", "--graphs", "nope", "--data", str(data_dir)])
        == 2
    )
    err = capsys.readouterr().err
    assert "--ops" in err and "--sizes" in err and "unknown graph 'nope'" in err


def test_generated_graph_is_cached(tmp_path):
    first = load_graph("powerlaw_products", None, scale_divisor=1000, cache_dir=tmp_path)
    assert first.name == "powerlaw_products/1000" and first.generated
    assert first.num_nodes == 2449 and first.nnz == 60000
    (cached,) = tmp_path.glob("*.npz")
    again = load_graph("powerlaw_products", None, scale_divisor=1000, cache_dir=tmp_path)
    assert np.array_equal(first.indptr, again.indptr) and np.array_equal(
        first.indices, again.indices
    )
    with np.load(cached) as d:
        assert np.array_equal(d["indices"], first.indices)


@pytest.mark.parametrize(
    "command, hint",
    [
        ("kernels", "use --device cpu for a (slow) CPU run"),
        ("ablation", "use --device cpu for a (slow) CPU run"),
        ("reorder", "use --device cpu for the vectors and the reordering time alone"),
        ("seeds", "use --device cpu"),
        ("sparse-linear", "use --device cpu"),
    ],
)
def test_a_cuda_run_without_a_gpu_is_refused(command, hint, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", command, "--device", "cuda"]) == 2
    assert capsys.readouterr().err == f"flashgnn bench {command}: no CUDA device; {hint}\n"
