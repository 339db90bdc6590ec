"""flashgnn bench distributed: its options, the rows it reads from a run's summary, the
efficiency, and a run on one and two CPU processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from flashgnn.benchmarking import distributed as bench
from tests.helpers import read_csv


def test_device_counts_are_sorted_positive_and_checked():
    assert bench.device_counts("4,1,2,2") == [1, 2, 4]
    for bad in ("", "0,2", "two", "-1"):
        with pytest.raises(ValueError, match="--devices"):
            bench.device_counts(bad)


def test_a_row_reads_the_busiest_rank_and_the_efficiency_the_one_process_time():
    ranks = [
        {
            "peak_gpu_memory_mb": 10.0,
            "step_bytes_received": 3e6,
            "step_bytes_lower_bound": 3e6,
            "num_halo": 7,
            "edge_cut": 40,
            "num_edges": 100,
        },
        {
            "peak_gpu_memory_mb": 12.0,
            "step_bytes_received": 5e6,
            "step_bytes_lower_bound": 4e6,
            "exchanges_timed": [
                {"width": 100, "dtype": "float16", "rows_received": 9, "ms": 0.5},
                {"width": 50, "dtype": "float32", "rows_received": 9, "ms": 0.25},
            ],
            "num_halo": 9,
            "edge_cut": 40,
            "num_edges": 100,
        },
    ]
    two = bench.row_from_summary("c", 2, {"epoch_time_s": 0.06, "distributed": {"ranks": ranks}})
    assert (two.step_mb_received, two.step_mb_lower_bound, two.halo_rows) == (5.0, 4.0, 9)
    assert (two.edge_cut, two.num_edges, two.peak_gpu_mb) == (40, 100, 12.0)
    assert two.exchange_ms == pytest.approx(0.75)
    assert two.exchange_gb_per_s == pytest.approx((9 * 100 * 2 + 9 * 50 * 4) / 0.75 / 1e6)
    one = bench.row_from_summary("c", 1, {"epoch_time_s": 0.1, "peak_gpu_memory_mb": 20.0})
    assert one.step_mb_received is None and one.peak_gpu_mb == 20.0
    rows = bench.with_efficiency([one, two])
    assert rows[0].efficiency == pytest.approx(1.0)
    assert rows[1].efficiency == pytest.approx(0.1 / (2 * 0.06))
    other = bench.row_from_summary("d", 2, {"epoch_time_s": 0.06, "epoch_time_median_s": 0.05})
    assert other.epoch_ms == pytest.approx(50.0)  # the median, where the summary has it
    assert bench.with_efficiency([one, other])[1].efficiency is None  # no one-process "d"


def test_runs_one_and_two_cpu_processes(tmp_path):
    out = tmp_path / "scaling.csv"
    cmd = [sys.executable, "-m", "flashgnn", "bench", "distributed"]
    cmd += ["--config", "configs/gcn-synthetic-small.yaml", "--devices", "1,2", "--epochs", "2"]
    # overlapped exchanges are not timed: without overlap, every exchange is
    cmd += ["--device", "cpu", "--set", "distributed.overlap=false", "--csv", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = read_csv(out)
    assert [r["devices"] for r in rows] == ["1", "2"] and not any(r["error"] for r in rows)
    assert float(rows[1]["step_mb_received"]) > 0 and int(rows[1]["halo_rows"]) > 0
    assert float(rows[1]["exchange_ms"]) > 0
    assert float(rows[0]["efficiency"]) == pytest.approx(1.0)
    stamp = json.loads((tmp_path / "scaling.csv.json").read_text())
    assert stamp["config"].endswith("gcn-synthetic-small.yaml") and "cpu" in stamp
    assert [(r["partition"], r["overlap"], r["features"]) for r in rows] == [
        ("", "", ""),
        ("contiguous", "off", "device"),
    ]
    assert float(rows[1]["peak_estimate_mb"]) > 0 and float(rows[1]["load_s"]) >= 0
    # another partition at 2 processes, added to the table: its efficiency is the same
    # config's one-process time over its own
    more = cmd[:-1] + [str(out), "--append"]
    more[more.index("1,2")] = "2"
    more += ["--set", "distributed.partition=degree"]
    done = subprocess.run(more, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = read_csv(out)
    assert [(r["devices"], r["partition"]) for r in rows] == [
        ("1", ""),
        ("2", "contiguous"),
        ("2", "degree"),
    ]
    expected = float(rows[0]["epoch_ms"]) / (2 * float(rows[2]["epoch_ms"]))
    assert float(rows[2]["efficiency"]) == pytest.approx(expected, rel=1e-6)
