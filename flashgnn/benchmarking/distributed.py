"""``flashgnn bench distributed``: strong scaling of one training config over 1, 2, 4, ...
processes. Each point is a ``flashgnn train`` run of its own (a subprocess, so that one that
runs out of memory or time becomes a row with its error), full-graph or mini-batch as the
config says, evaluation held to the end (``train.eval_every`` past the epochs).

Per point: the mean epoch time after the first (the loop's ``epoch_time_s``: one training
step, host clock), the efficiency against the one-process point (t1 / (P tP)), and for a
partitioned run, from the ranks' reports in ``summary.json``: the bytes a training step
receives on the busiest rank (forward exchanges and their reverse in the backward) and their
lower bound (every halo row once each way), the time of the forward's exchanges that the
layers wait for on that rank (``distributed.time_exchanges``; with ``distributed.overlap``
on, GCN's overlapped exchanges are left out) and their rate, the halo rows,
the edge cut, and the largest peak GPU memory of a rank.

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
    row = ScalingRow(config, devices, epoch_ms=1e3 * summary["epoch_time_s"])
    row.preprocess_s = summary.get("preprocess_s")
    ranks = (summary.get("distributed") or {}).get("ranks", [])
    peaks = [r["peak_gpu_memory_mb"] for r in ranks if r.get("peak_gpu_memory_mb") is not None]
    row.peak_gpu_mb = max(peaks) if peaks else summary.get("peak_gpu_memory_mb")
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
    """Each row's efficiency against the one-process row, where both have a time."""
    one = next((r for r in rows if r.devices == 1 and r.epoch_ms is not None), None)
    for r in rows:
        if one is not None and r.epoch_ms is not None:
            r.efficiency = one.epoch_ms / (r.devices * r.epoch_ms)
    return rows


def summary(rows: list[ScalingRow]) -> tuple[list[str], list[list[str]]]:
    """(headers, cells): one line per point."""

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    headers = [
        "processes",
        "epoch ms",
        "efficiency",
        "MB a step (busiest rank)",
        "lower bound MB",
        "forward exchanges ms (GB/s)",
        "halo rows",
        "edge cut",
        "peak GPU MB",
        "error",
    ]
    cells = [
        [
            str(r.devices),
            num(r.epoch_ms, ".1f"),
            num(r.efficiency, ".0%"),
            num(r.step_mb_received, ".0f"),
            num(r.step_mb_lower_bound, ".0f"),
            num(r.exchange_ms, ".2f")
            + ("" if r.exchange_gb_per_s is None else f" ({r.exchange_gb_per_s:.0f})"),
            num(r.halo_rows, ","),
            num(r.edge_cut, ","),
            num(r.peak_gpu_mb, ".0f"),
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
    rows = []
    with tempfile.TemporaryDirectory(prefix="flashgnn-scaling-") as folder:
        for devices in counts:
            row = _run_point(args, devices, Path(folder))
            rows.append(row)
            print(f"{devices} processes: {row.epoch_ms or '-'} ms/epoch {row.error}", flush=True)
    with_efficiency(rows)
    print(table.text_table(*summary(rows)))
    if args.csv:
        env = environment(Timer(device, 1, 3))
        env["config"] = str(args.config)
        table.write_csv(rows, args.csv, env, ScalingRow)
    return 1 if any(r.error for r in rows) else 0
