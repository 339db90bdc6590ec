"""``flashgnn compare --config ... --precisions fp32,tf32,fp16,bf16 --seeds 5``: the same
model trained under each precision and several seeds, tabulated against fp32.
``--reference pyg`` adds a row "pyg": the same network with torch_geometric's layers
(``model.backend: pyg``, the PyG twin of ``flashgnn.pyg_twin``, starting from the same initial
weights), trained in fp32 on the same data, seeds, loop and stopping rule.

Writes into the output folder: ``runs.csv`` (one row per run), ``compare.csv`` and
``compare.md`` (per precision: test metric mean +- std, its difference to fp32, epoch time,
preprocessing time, peak GPU memory) and ``compare.png`` (a bar chart; needs matplotlib,
``pip install 'flashgnn[plot]'``), and one run folder per (precision, seed). Run folders that
hold runs already are refused before anything is loaded, unless ``--overwrite``.
"""

from __future__ import annotations

import csv
import statistics
import time
from datetime import datetime
from pathlib import Path

from .ops.precision import PRECISIONS
from .training import apply_overrides, load_config, resolve_config, train
from .training.loop import load_configured_dataset
from .training.run_folder import RunFolder

REFERENCES = ("pyg",)  # --reference: the other library whose layers a row is built from
RUN_FIELDS = (
    "precision",
    "seed",
    "test",
    "val",
    "best_epoch",
    "epochs_run",
    "metric",
    "epoch_time_s",
    "preprocess_s",
    "peak_gpu_memory_mb",
)
TABLE_FIELDS = (
    "precision",
    "runs",
    "test_mean",
    "test_std",
    "delta_vs_fp32",
    "epoch_time_ms",
    "preprocess_s",
    "peak_gpu_memory_mb",
)


def add_arguments(p) -> None:
    p.add_argument("--config", type=Path, required=True, help="YAML run config (see configs/)")
    p.add_argument(
        "--precisions", default=",".join(PRECISIONS), help="comma-separated, default all"
    )
    p.add_argument(
        "--seeds", type=int, default=5, help="runs per precision (seeds train.seed, +1, ...)"
    )
    p.add_argument(
        "--output",
        type=Path,
        help="folder of the table (default: <output.root>/compare-<name>-<time>)",
    )
    p.add_argument(
        "--reference",
        choices=REFERENCES,
        help="also train the same network built from this library's layers (pyg: "
        "torch_geometric.nn) in fp32, as the row 'pyg'",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the runs that the run folders hold"
    )
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, as for train"
    )


def parse_precisions(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in PRECISIONS]
    if bad or not names:
        raise ValueError(f"--precisions must list some of {PRECISIONS}, got {text!r}")
    return names


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def aggregate(runs: list[dict]) -> list[dict]:
    """One row per precision (in first-seen order) of the per-run rows."""
    by_precision: dict[str, list[dict]] = {}
    for run in runs:
        by_precision.setdefault(run["precision"], []).append(run)
    rows = []
    for precision, group in by_precision.items():
        tests = [r["test"] for r in group]
        rows.append(
            {
                "precision": precision,
                "runs": len(group),
                "test_mean": statistics.fmean(tests),
                "test_std": statistics.stdev(tests) if len(tests) > 1 else 0.0,
                "epoch_time_ms": 1000 * statistics.fmean(r["epoch_time_s"] for r in group),
                "preprocess_s": statistics.fmean(r["preprocess_s"] for r in group),
                "peak_gpu_memory_mb": _mean(r["peak_gpu_memory_mb"] for r in group),
            }
        )
    reference = next((r["test_mean"] for r in rows if r["precision"] == "fp32"), None)
    for row in rows:
        row["delta_vs_fp32"] = None if reference is None else row["test_mean"] - reference
    return rows


def _cell(value, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def markdown_table(rows: list[dict], metric: str, title: str) -> str:
    lines = [
        f"## {title}",
        "",
        f"| precision | runs | test {metric} (mean +- std) | vs fp32 | epoch (ms) | "
        f"preprocessing (s) "
        "| peak GPU memory (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        delta = "" if r["delta_vs_fp32"] is None else f"{100 * r['delta_vs_fp32']:+.2f} pt"
        lines.append(
            f"| {r['precision']} | {r['runs']} | {100 * r['test_mean']:.2f} +- "
            f"{100 * r['test_std']:.2f} "
            f"| {delta} | {r['epoch_time_ms']:.2f} | {r['preprocess_s']:.2f} "
            f"| {_cell(r['peak_gpu_memory_mb'], 0)} |"
        )
    return "\n".join(lines) + "\n"


def _write_csv(path: Path, fields, rows) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def plot(rows: list[dict], metric: str, title: str, path: Path) -> Path | None:
    """Bar charts of the test metric (with its std) and the epoch time per precision; None,
    with a message, when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            f"{path.name} not written: matplotlib is not installed (pip install 'flashgnn[plot]')"
        )
        return None
    names = [r["precision"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.bar(
        names,
        [100 * r["test_mean"] for r in rows],
        yerr=[100 * r["test_std"] for r in rows],
        capsize=4,
    )
    left.set_ylabel(f"test {metric} (%)")
    low = min(100 * (r["test_mean"] - r["test_std"]) for r in rows)
    left.set_ylim(max(0.0, low - 5), None)
    right.bar(names, [r["epoch_time_ms"] for r in rows])
    right.set_ylabel("epoch time (ms)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_configs(
    config: dict,
    precisions: list[str],
    seeds: int,
    out_dir: Path,
    overwrite: bool = False,
    reference: str | None = None,
) -> list[tuple[str, dict]]:
    """(label, resolved config) of every run of a comparison, the reference's first: each
    precision (label: the precision) and, with ``reference="pyg"``, PyG's layers in fp32
    (label "pyg"), ``seeds`` seeds each, each in its folder under ``out_dir``. Checks the
    configs and the folders (refused when they hold runs, unless ``overwrite``)."""
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    if reference is not None and reference not in REFERENCES:
        raise ValueError(f"--reference must be one of {REFERENCES}, got {reference!r}")
    cfg = resolve_config(config)
    labels = ([reference] if reference else []) + list(precisions)
    out = []
    for label in labels:
        for i in range(seeds):
            seed = cfg["train"]["seed"] + i
            train_section = {**cfg["train"], "precision": label, "seed": seed}
            model = cfg["model"]
            if label == "pyg":
                # PyG's layers in float32, their steps eager: PyG's message passing reads
                # sizes back to the host, which a captured step cannot
                train_section.update(precision="fp32", cuda_graph=False)
                model = {**model, "backend": "pyg"}
            run_cfg = {
                **cfg,
                "model": model,
                "train": train_section,
                "output": {**cfg["output"], "dir": str(out_dir / f"{label}-seed{seed}")},
            }
            resolve_config(run_cfg)
            RunFolder(Path(run_cfg["output"]["dir"]), resume=False, overwrite=overwrite)
            out.append((label, run_cfg))
    return out


def compare_runs(
    config: dict,
    precisions: list[str],
    seeds: int,
    out_dir: Path,
    overwrite: bool = False,
    reference: str | None = None,
) -> list[dict]:
    """Train every run of ``run_configs``; return one row (``RUN_FIELDS``) per run. The
    dataset is loaded once; its load time is in every run's preprocessing time, the graph
    preparation is timed per run."""
    runs = run_configs(config, precisions, seeds, out_dir, overwrite, reference)
    tic = time.perf_counter()
    dataset = load_configured_dataset(resolve_config(config)["dataset"])
    load_seconds = time.perf_counter() - tic
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, run_cfg in runs:
        seed = run_cfg["train"]["seed"]
        summary = train(run_cfg, overwrite=overwrite, dataset=dataset, load_seconds=load_seconds)
        rows.append({"precision": label, "seed": seed, **{k: summary[k] for k in RUN_FIELDS[2:]}})
        print(
            f"{run_cfg['name']} {label} seed {seed}: test {summary['test']:.4f}, "
            f"{1000 * summary['epoch_time_s']:.2f} ms/epoch"
        )
    return rows


def compare(
    config: dict,
    precisions: list[str],
    seeds: int,
    out_dir: Path,
    overwrite: bool = False,
    reference: str | None = None,
) -> list[dict]:
    """Train ``config`` under every precision (and the ``reference``) and ``seeds`` seeds;
    write the tables and the plot into ``out_dir``; return the per-precision rows.
    ``overwrite``: replace the runs that the run folders hold (else they are refused)."""
    runs = compare_runs(config, precisions, seeds, out_dir, overwrite, reference)
    rows = aggregate(runs)
    cfg = resolve_config(config)
    title = f"{cfg['model']['name']} on {cfg['dataset']['name']}"
    metric = runs[0]["metric"]
    _write_csv(out_dir / "runs.csv", RUN_FIELDS, runs)
    _write_csv(out_dir / "compare.csv", TABLE_FIELDS, rows)
    (out_dir / "compare.md").write_text(markdown_table(rows, metric, title))
    plot(rows, metric, title, out_dir / "compare.png")
    return rows


def run(args) -> int:
    config = apply_overrides(load_config(args.config), args.overrides)
    cfg = resolve_config(config)
    out_dir = (
        args.output
        or Path(cfg["output"]["root"]) / f"compare-{cfg['name']}-{datetime.now():%Y%m%d-%H%M%S}"
    )
    compare(
        config,
        parse_precisions(args.precisions),
        args.seeds,
        out_dir,
        args.overwrite,
        args.reference,
    )
    print((out_dir / "compare.md").read_text())
    print(f"tables and runs in {out_dir}")
    return 0
