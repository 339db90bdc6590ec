"""``flashgnn bench seeds``: its options, the DLMC expansion against a hand-made case, the
format-name table, the generated patterns, the summary's answers on synthetic rows, the
document's section, a CPU run end to end and a GPU smoke run."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from flashgnn.benchmarking import document, format_specs, seeds
from flashgnn.benchmarking.seeds import SeedRow
from flashgnn.data.dlmc import expand_rows, load_dlmc
from flashgnn.formats import HBELL
from tests.helpers import GPU, read_csv


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    seeds.add_arguments(p)
    return p.parse_args(list(argv))


def test_options_and_their_defaults():
    args = parse()
    assert args.precision == "fp16" and args.sizes == "64,128,256" and args.vectors == "2,4,8"
    assert args.inputs == "dlmc,graphs,patterns" and args.backends.split(",") == list(
        format_specs.SPECS
    )
    args = parse("--sample", "5", "--precision", "bf16", "--sizes", "8")
    assert (args.sample, args.precision) == (5, "bf16")
    assert seeds.positive_list("64, 128", "sizes") == [64, 128]
    for bad in ("0", "x", ""):
        with pytest.raises(ValueError, match="--sizes: expected a comma list of positive"):
            seeds.positive_list(bad, "sizes")
    with pytest.raises(SystemExit):
        parse("--precision", "fp8")


def test_sample_positions_spread_over_the_collection():
    assert seeds.sample_positions(10, 0) == list(range(10))
    assert seeds.sample_positions(10, 20) == list(range(10))
    assert seeds.sample_positions(320, 4) == [0, 106, 213, 319]
    with pytest.raises(ValueError, match="--sample must be >= 0"):
        seeds.sample_positions(10, -1)


def test_dlmc_expansion_on_a_hand_made_case():
    # [[0 a 0 b], [0 0 0 0], [c 0 0 0]] with V = 3: each nonzero a 3 x 1 vector
    indptr, indices = expand_rows(np.array([0, 2, 2, 3]), np.array([1, 3, 0]), 3)
    assert indptr.tolist() == [0, 2, 4, 6, 6, 6, 6, 7, 8, 9]
    assert indices.tolist() == [1, 3, 1, 3, 1, 3, 0, 0, 0]
    assert indptr.dtype == np.int64 and indices.dtype == np.int32
    same, cols = expand_rows(np.array([0, 2, 2, 3]), np.array([1, 3, 0]), 1)
    assert same.tolist() == [0, 2, 2, 3] and cols.tolist() == [1, 3, 0]
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="vector must be a positive integer"):
            expand_rows(np.array([0]), np.array([], np.int32), bad)


def test_dlmc_reader(data_dir):
    (m,) = load_dlmc(data_dir, [319])
    assert m.sparsity == 0.98 and m.indptr.size == m.n_rows + 1 and m.indptr[-1] == m.nnz
    with pytest.raises(IndexError, match="the collection holds 320"):
        load_dlmc(data_dir, [320])
    with pytest.raises(FileNotFoundError, match="dlmc_rn50_magnitude_pruning.npz"):
        load_dlmc(data_dir / "absent")
    inputs = seeds.dlmc_inputs(data_dir, 2, [2, 8])
    assert [(i.name.split("/")[0], i.vector) for i in inputs] == [
        ("0.5", 2),
        ("0.5", 8),
        ("0.98", 2),
        ("0.98", 8),
    ]
    (first,) = load_dlmc(data_dir, [0])
    assert (inputs[1].rows, inputs[1].cols) == (8 * first.n_rows, first.n_cols)
    assert inputs[1].nnz == 8 * first.nnz and inputs[1].sparsity == 0.5


def test_format_name_table():
    specs = format_specs.SPECS
    assert list(specs) == [
        "mebcrs",
        "cvse2",
        "cvse4",
        "cvse8",
        "tca",
        "gcoo",
        "hbell",
        "blocked",
    ]
    assert specs["cvse4"].cls == "CVSE" and specs["cvse4"].kwargs == {"vector": 4}
    assert specs["tca"].cls == "TCACSR" and specs["gcoo"].cls == "GCOO"
    assert specs["gcoo"].spmm_precision("fp16") == "fp32"
    assert specs["hbell"].spmm_precision("bf16") == "bf16"
    a = np.ones((16, 16), np.float32)
    ip, ix = np.arange(0, 257, 16), np.tile(np.arange(16), 16)
    blocked = specs["blocked"].build(ip, ix, a.flatten(), 16, "cpu", "fp16")
    assert isinstance(blocked, HBELL) and bool(blocked.dense.all())
    assert specs["mebcrs"].build(ip, ix, None, 16, "cpu", "tf32").k == 4
    assert [s.name for s in format_specs.parse_formats("hbell, cvse2,hbell")] == ["hbell", "cvse2"]
    with pytest.raises(ValueError, match="--formats: unknown format 'csr'"):
        format_specs.parse_formats("hbell,csr")
    with pytest.raises(ValueError, match="--backends: expected a comma list"):
        format_specs.parse_formats(" , ", "backends")


def test_a_format_the_library_lacks_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(
        format_specs.SPECS, "absent", format_specs.FormatSpec("absent", "NoSuchFormat", "none")
    )
    with pytest.raises(ValueError, match="absent needs flashgnn.formats.NoSuchFormat"):
        format_specs.parse_formats("hbell,absent")


def test_patterns_have_equal_nonzeros_and_differ_in_clustering():
    inputs = {i.name: i for i in seeds.pattern_inputs(256, seed=0)}
    assert list(inputs) == ["clustered", "mixed", "scattered"]
    nnz = {i.nnz for i in inputs.values()}
    assert len(nnz) == 1
    for i in inputs.values():
        assert np.all(np.diff(i.indptr) >= 0) and i.indptr[-1] == i.nnz
        rows = np.repeat(np.arange(256), np.diff(i.indptr))
        assert np.unique(rows * 256 + i.indices).size == i.nnz  # no duplicates
    dense = {
        name: HBELL.from_csr(i.indptr, i.indices, n_cols=256).n_dense_blocks
        for name, i in inputs.items()
    }
    assert dense["clustered"] > dense["mixed"] > dense["scattered"] == 0


def _row(matrix, kind, sparsity, vector, size, backend, ms, *, cublas=None, build=None, **kw):
    r = SeedRow(matrix, kind, sparsity, vector, 64, 64, 100, size, backend, "fp16")
    r.kernel_ms, r.build_ms = ms, build
    if cublas is not None:
        r.speedup_cublas = cublas
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_crossover():
    assert seeds.crossover([(0.5, 0.5), (0.7, 0.9), (0.9, 1.2), (0.98, 3.0)]) == "from 0.9"
    # a level above the crossing that falls back below 1x moves it up
    assert seeds.crossover([(0.5, 0.5), (0.7, 1.2), (0.9, 0.9), (0.98, 3.0)]) == "from 0.98"
    assert seeds.crossover([(0.5, 0.5), (0.98, 0.9)]) == "never (up to 0.98)"
    assert seeds.crossover([(0.5, 1.5), (0.98, 2)]) == "at every level (from 0.5)"
    assert seeds.crossover([(0.9, 0.8), (0.9, 1.5)]) == "at every level (from 0.9)"  # geomean 1.1
    assert seeds.crossover([]) == ""


def test_answers_on_synthetic_rows():
    rows = [
        _row("w1", "dlmc", 0.5, 4, 64, "cvse4", 2.0, cublas=0.5),
        _row("w2", "dlmc", 0.9, 4, 64, "cvse4", 1.0, cublas=2.0),
        _row("w2", "dlmc", 0.9, 2, 64, "cvse4", 1.0, cublas=0.1),  # other V: not counted
        _row("g", "graph", 0.99, 1, 64, "tca", 3.0, build=1.0),
        _row("g", "graph", 0.99, 1, 64, "mebcrs", 1.0, build=3.0),
        _row("g", "graph", 0.99, 1, 64, "gcoo", 1.0, speedup_cusparse=2.0),
        _row("clustered", "pattern", 0.99, 1, 64, "hbell", 1.0),
        _row("clustered", "pattern", 0.99, 1, 64, "mebcrs", 2.0),
        _row("clustered", "pattern", 0.99, 1, 64, "blocked", 1.5),
        _row("scattered", "pattern", 0.99, 1, 64, "hbell", 1.0),
        _row("scattered", "pattern", 0.99, 1, 64, "mebcrs", 0.5, error="check failed"),
    ]
    lines = seeds.answers(rows)
    assert lines[0].startswith("CVSE crosses cuBLAS V=4: from 0.9 (paper:")
    assert "TCA / 8x1 time: 3.00x kernel only, 1.00x with one build each" in lines[1]
    assert "GCOO x cuSPARSE fp32 on the graphs: 2.00x geomean, >= 1x in 1 of 1" in lines[2]
    assert "clustered: 8x1 2.00x, blocked 1.50x" in lines[3]
    assert "scattered" not in lines[3]  # its 8x1 row failed: no pair to compare

    header, body = seeds.backend_table(rows)
    assert header[4] == "crosses cuBLAS (DLMC, N = 64)"
    by = {line[0]: line for line in body}
    assert by["cvse4"][1] == "0.46x" and by["cvse4"][4] == "from 0.9"  # geomean of 0.5, 2, 0.1
    assert by["tca"][5] == "1" and by["mebcrs"][6] == "1"


def test_storage_table_takes_medians_per_kind():
    rows = [
        _row("w", "dlmc", 0.9, 2, 64, "hbell", 1.0, zero_fill=0.5, stored_mb=2.0),
        _row("w", "dlmc", 0.9, 2, 128, "hbell", 1.0, zero_fill=0.5, stored_mb=2.0),
        _row("v", "dlmc", 0.9, 2, 64, "hbell", 1.0, zero_fill=0.3, stored_mb=1.0),
        _row("w", "dlmc", 0.9, 2, None, seeds.BLOCKED_ELL, None, zero_fill=0.9, stored_mb=4.0),
    ]
    header, body = seeds.storage_table(rows)
    assert header[1] == "hbell fill / MB" and body == [["dlmc", "0.40 / 1.5", "", "", "0.90 / 4"]]


def test_the_document_renders_a_seeds_run(tmp_path):
    rows = [
        _row("w", "dlmc", 0.9, 4, 64, "cvse4", 1.0, cublas=2.0),
        _row("w", "dlmc", 0.9, 4, 64, "cuBLAS fp16", 2.0),
    ]
    gpu = tmp_path / "h200"
    seeds.table.write_csv(rows, gpu / "seeds.csv", {"gpu": "NVIDIA H200"}, SeedRow)
    text = document.build(tmp_path, tmp_path)
    assert "## Seed backends" in text and "CVSE crosses cuBLAS V=4: at every level" in text
    assert "| cvse4 | 2.00x |" in text


def test_a_cpu_run_end_to_end(tmp_path, data_dir):
    out = tmp_path / "seeds.csv"
    args = parse(
        "--device",
        "cpu",
        "--inputs",
        "patterns,graphs,dlmc",
        "--graphs",
        "hetero_texas",
        "--sample",
        "2",
        "--vectors",
        "2",
        "--pattern-size",
        "64",
        "--backends",
        "mebcrs,hbell,blocked,cvse2",
        "--precision",
        "fp32",
        "--sizes",
        "8",
        "--warmup",
        "0",
        "--iters",
        "1",
        "--data",
        str(data_dir),
        "--csv",
        str(out),
        "--markdown",
        str(tmp_path / "seeds.md"),
    )
    assert seeds.run(args) == 0
    rows = read_csv(out)
    inputs = {(r["matrix"], r["vector"]) for r in rows}
    assert len(inputs) == 3 + 1 + 2 and ("hetero_texas", "1") in inputs
    timed = [r for r in rows if r["size"]]
    assert {r["backend"] for r in timed} == {
        "mebcrs",
        "hbell",
        "blocked",
        "cvse2",
        "cuBLAS fp32",
        "cuSPARSE fp32",
    }
    for r in timed:
        assert r["error"] == "" and float(r["rel_err"]) <= 1e-5 and float(r["kernel_ms"]) > 0
        assert float(r["wall_ms"]) > 0
        if r["backend"] in format_specs.SPECS:
            assert float(r["build_ms"]) > 0 and float(r["speedup_cublas"]) > 0
    layout = [r for r in rows if r["backend"] == seeds.BLOCKED_ELL]
    assert len(layout) == 6 and all(0 <= float(r["zero_fill"]) < 1 for r in layout)
    assert "HB-ELL's time saved" in (tmp_path / "seeds.md").read_text()


@pytest.mark.gpu
@pytest.mark.parametrize("_", [pytest.param(0, marks=GPU)])
def test_gpu_smoke_run(tmp_path, data_dir, _):
    """Every backend the library has, fp16, on two DLMC weights at V = 4, one graph and the
    patterns: no failed row."""
    available = [s.name for s in format_specs.SPECS.values() if s.available()]
    args = parse(
        "--graphs",
        "cora",
        "--sample",
        "2",
        "--vectors",
        "4",
        "--pattern-size",
        "1024",
        "--backends",
        ",".join(available),
        "--sizes",
        "64",
        "--iters",
        "3",
        "--data",
        str(data_dir),
        "--csv",
        str(tmp_path / "seeds.csv"),
    )
    assert seeds.run(args) == 0
