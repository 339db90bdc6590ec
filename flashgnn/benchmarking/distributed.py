"""``flashgnn bench distributed``: strong scaling of one training config over 1, 2, 4, ...
processes. Each point is a ``flashgnn train`` run of its own (a subprocess, so that one that
runs out of memory or time becomes a row with its error), full-graph or mini-batch as the
config says, evaluation held to the end (``train.eval_every`` past the epochs).

Per point: the median epoch time after the first (the loop's ``epoch_time_median_s``: one
training step, host clock), the efficiency against the one-process point of the same config
(t1 / (P tP)), and for a partitioned run, from the ranks' reports in ``summary.json``: the
partition, whether exchanges overlap, where the features stay, the bytes a training step
receives on the busiest rank (forward exchanges and their reverse in the backward) and their
lower bound (every halo row once each way), the time of the forward's exchanges that the
layers wait for on that rank (``distributed.time_exchanges``; with ``distributed.overlap``
on, GCN's overlapped exchanges are left out) and their rate, the halo rows, the edge cut, the
largest peak GPU memory of a rank beside its estimate (``distributed.memory``), and the
seconds spent loading or generating the data. ``--append`` adds the points to the CSV's
rows (another config, partition or setting in one table).

    flashgnn bench distributed --config configs/gcn-igb-medium-4gpu.yaml --devices 1,2,4 \\
        --results benchmarks/results
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from . import table
from .environment import environment
from .timing import Timer


@dataclass
class ScalingRow:
    config: str
    devices: int
    partition: str = ""
    overlap: str = ""
    features: str = ""
    epoch_ms: float | None = None
    efficiency: float | None = None
    step_mb_received: float | None = None
    step_mb_lower_bound: float | None = None
    exchange_ms: float | None = None
    exchange_gb_per_s: float | None = None
    halo_rows: int | None = None
    edge_cut: int | None = None
    num_edges: int | None = None
    peak_gpu_mb: float | None = None
    peak_estimate_mb: float | None = None
    load_s: float | None = None
    preprocess_s: float | None = None
    error: str = ""


def add_arguments(p) -> None:
    p.add_argument("--config", type=Path, default=Path("configs/gcn-igb-medium-4gpu.yaml"))
    p.add_argument("--devices", default="1,2,4", help="comma list of process counts")
    p.add_argument("--epochs", type=int, default=8, help="epochs of each run (default 8)")
    p.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cuda (one GPU a process) or cpu (gloo)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override given to every run (repeatable)",
    )
    p.add_argument("--csv", type=Path, help="write the rows here (and a .json stamp)")
    p.add_argument(
        "--append",
        action="store_true",
        help="add the rows to those the CSV holds already (else they replace them)",
    )


def device_counts(text: str) -> list[int]:
    """The process counts of ``--devices``: positive integers, ascending, no repeats."""
    try:
        counts = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        raise ValueError(f"--devices: expected a comma list of positive integers, got {text!r}")
    return counts


def row_from_summary(config: str, devices: int, summary: dict) -> ScalingRow:
    """One point from a run's ``summary.json``."""
    seconds = summary.get("epoch_time_median_s", summary["epoch_time_s"])
    row = ScalingRow(config, devices, epoch_ms=1e3 * seconds)
    row.preprocess_s = summary.get("preprocess_s")
    row.load_s = summary.get("load_s")
    report = summary.get("distributed") or {}
    ranks = report.get("ranks", [])
    if report.get("mode") == "full-graph":
        row.partition = report.get("partition") or ""
        row.overlap = "on" if report.get("overlap") else "off"
        row.features = "host" if any(r.get("features_on_host") for r in ranks) else "device"
    peaks = [r["peak_gpu_memory_mb"] for r in ranks if r.get("peak_gpu_memory_mb") is not None]
    row.peak_gpu_mb = max(peaks) if peaks else summary.get("peak_gpu_memory_mb")
    estimates = [r["peak_estimate_mb"] for r in ranks if r.get("peak_estimate_mb") is not None]
    row.peak_estimate_mb = max(estimates) if estimates else None
    parts = [r for r in ranks if "step_bytes_received" in r]
    if parts:
        busiest = max(parts, key=lambda r: r["step_bytes_received"])
        row.step_mb_received = busiest["step_bytes_received"] / 1e6
        row.step_mb_lower_bound = busiest["step_bytes_lower_bound"] / 1e6
        row.halo_rows = max(r["num_halo"] for r in parts)
        timed = busiest.get("exchanges_timed") or []
        if timed:
            row.exchange_ms = sum(e["ms"] for e in timed)
            moved = sum(
                e["rows_received"]
                * e["width"]
                * torch.empty(0, dtype=getattr(torch, e["dtype"])).element_size()
                for e in timed
            )
            row.exchange_gb_per_s = moved / row.exchange_ms / 1e6 if row.exchange_ms else None
        row.edge_cut = parts[0]["edge_cut"]
        row.num_edges = parts[0]["num_edges"]
    return row


def with_efficiency(rows: list[ScalingRow]) -> list[ScalingRow]:
    """Each row's efficiency against the first one-process row of its config, where both
    have a time."""
    ones = {}
    for r in rows:
        if r.devices == 1 and r.epoch_ms is not None:
            ones.setdefault(r.config, r)
    for r in rows:
        one = ones.get(r.config)
        if one is not None and r.epoch_ms is not None:
            r.efficiency = one.epoch_ms / (r.devices * r.epoch_ms)
    return rows


def summary(rows: list[ScalingRow]) -> tuple[list[str], list[list[str]]]:
    """(headers, cells): one line per point."""

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    def cut(r):
        if r.edge_cut is None or not r.num_edges:
            return "-"
        return f"{r.edge_cut:,} ({r.edge_cut / r.num_edges:.0%})"

    headers = [
        "config",
        "processes",
        "partition",
        "overlap",
        "features",
        "epoch ms",
        "efficiency",
        "MB a step (busiest rank)",
        "lower bound MB",
        "forward exchanges ms (GB/s)",
        "halo rows",
        "edge cut",
        "peak GPU MB (estimate)",
        "load s",
        "error",
    ]
    cells = [
        [
            r.config,
            str(r.devices),
            r.partition or "-",
            r.overlap or "-",
            r.features or "-",
            num(r.epoch_ms, ".1f"),
            num(r.efficiency, ".0%"),
            num(r.step_mb_received, ".0f"),
            num(r.step_mb_lower_bound, ".0f"),
            num(r.exchange_ms, ".2f")
            + ("" if r.exchange_gb_per_s is None else f" ({r.exchange_gb_per_s:.0f})"),
            num(r.halo_rows, ","),
            cut(r),
            num(r.peak_gpu_mb, ".0f")
            + ("" if r.peak_estimate_mb is None else f" ({r.peak_estimate_mb:.0f})"),
            num(r.load_s, ".0f"),
            r.error,
        ]
        for r in rows
    ]
    return headers, cells


def _run_point(args, devices: int, folder: Path) -> ScalingRow:
    out = folder / f"devices{devices}"
    command = [
        sys.executable,
        "-m",
        "flashgnn",
        "train",
        "--config",
        str(args.config),
        "--output",
        str(out),
        f"train.devices={devices}",
        f"train.device={args.device}",
        f"train.epochs={args.epochs}",
        f"train.eval_every={args.epochs + 1}",
        "distributed.time_exchanges=true",
        *args.set,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return ScalingRow(args.config.stem, devices, error=f"timed out after {args.timeout:g} s")
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return ScalingRow(args.config.stem, devices, error=lines[-1] if lines else "failed")
    return row_from_summary(
        args.config.stem, devices, json.loads((out / "summary.json").read_text())
    )


def run(args) -> int:
    counts = device_counts(args.devices)
    device = torch.device(args.device)
    kept = []
    if args.append and args.csv is not None and args.csv.is_file():
        kept = table.read_csv(args.csv, ScalingRow)
    rows = []
    with tempfile.TemporaryDirectory(prefix="flashgnn-scaling-") as folder:
        for devices in counts:
            row = _run_point(args, devices, Path(folder))
            rows.append(row)
            print(f"{devices} processes: {row.epoch_ms or '-'} ms/epoch {row.error}", flush=True)
    every = with_efficiency(kept + rows)
    print(table.text_table(*summary(every)))
    if args.csv:
        env = environment(Timer(device, 1, 3))
        env["config"] = str(args.config)
        table.write_csv(every, args.csv, env, ScalingRow)
    return 1 if any(r.error for r in rows) else 0
