"""``flashgnn bench accuracy``: the test accuracy of the papers' models in every precision,
beside the same networks built from PyG's layers and the papers' figures.

Configs (``--configs``, default all nine): GCN, GAT and AGNN on cora and citeseer, each with
its paper's architecture and recipe (the config's comment says which), and the same three
recipes on musae_facebook (22,470 nodes, 4,714 binary features, a seeded 60/20/20 split; no
paper figure). Each config is trained as ``flashgnn compare --reference pyg`` trains it: in
every ``--precisions`` and as its PyG twin ("pyg": torch_geometric's GCNConv, GATConv and
AGNNConv in fp32, starting from the flashgnn model's weights), ``--seeds`` seeds each (train.seed
0, 1, ...), the same data, loop and stopping rule; one row per run (test and validation
accuracy of the epoch the rule keeps, epochs run, mean epoch time). ``--jobs N`` trains N
runs (one config in one precision, or its twin, with one seed) at once in their own processes
on the same device (epoch times then share it): on cora a run is bound by the host, so a
many-core machine trains the nine tables in about the time of the slowest runs.
``--append`` keeps the rows of the configs not run now, so that a table is run in parts.

    flashgnn bench accuracy --results benchmarks/results --jobs 9
    flashgnn bench accuracy --results benchmarks/results --configs gat-cora --append
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import torch

from ..ops import PRECISIONS
from . import table
from .environment import environment
from .errors import describe_error
from .options import comma_list, cuda_missing
from .results import REPO_ROOT
from .timing import Timer

DATASETS = ("cora", "citeseer", "musae-facebook")
CONFIGS = tuple(f"{m}-{d}" for d in DATASETS for m in ("gcn", "gat", "agnn"))
PAPER = {  # test accuracy (%) each paper reports on the Planetoid public split
    ("gcn", "cora"): 81.5,
    ("gcn", "citeseer"): 70.3,
    ("gat", "cora"): 83.0,
    ("gat", "citeseer"): 72.5,
    ("agnn", "cora"): 83.1,
    ("agnn", "citeseer"): 71.7,
}
REFERENCE = "pyg"


@dataclass
class AccuracyRow:
    """One training run: ``impl`` "pyg" (PyG's layers, fp32) or flashgnn's precision."""

    config: str
    model: str
    dataset: str
    impl: str
    seed: int | None = None
    test: float | None = None
    val: float | None = None
    best_epoch: int | None = None
    epochs_run: int | None = None
    epoch_ms: float | None = None
    error: str = ""


def add_arguments(p) -> None:
    p.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="comma list of configs: names in configs/ or YAML paths (default: the nine)",
    )
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="comma list (default all)")
    p.add_argument("--seeds", type=int, default=10, help="runs per precision (default 10)")
    p.add_argument("--no-reference", action="store_true", help="leave out the PyG twin's rows")
    p.add_argument(
        "--jobs", type=int, default=1, help="runs (a config in one precision, one seed) at once"
    )
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--data",
        default=None,
        help="datasets folder (default $FLASHGNN_DATA or ../shared/datasets)",
    )
    p.add_argument(
        "--runs", type=Path, help="keep the run folders here (default: a temporary folder)"
    )
    p.add_argument("--csv", type=Path, help="write every row to this CSV file (its stamp beside)")
    p.add_argument(
        "--append",
        action="store_true",
        help="keep the rows of the other configs that the CSV holds (one table run in parts)",
    )


def config_path(name: str) -> Path:
    """``configs/<name>.yaml`` of the repository for a bare name, else the path given."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        return path
    return REPO_ROOT / "configs" / f"{name}.yaml"


def config_runs(
    path: Path,
    precisions: list[str],
    seeds: int,
    reference: str | None,
    overrides: list[str],
    out_dir: Path,
    first_seed: int = 0,
) -> list[AccuracyRow]:
    """Every run of one config (``compare.compare_runs``), seeds ``first_seed`` to
    ``first_seed + seeds - 1`` counted from the config's train.seed; a config that fails
    becomes one row with its error."""
    from ..compare import compare_runs
    from ..training import apply_overrides, load_config, resolve_config

    name = path.stem
    try:
        config = apply_overrides(load_config(path), [*overrides, "train.progress=false"])
        seed = resolve_config(config)["train"]["seed"] + first_seed
        config = apply_overrides(config, [f"train.seed={seed}"])
        cfg = resolve_config(config)
        runs = compare_runs(config, precisions, seeds, out_dir / name, True, reference)
    except Exception as e:  # noqa: BLE001 - a config that cannot run is a row, not the end
        return [AccuracyRow(name, "", "", "", error=describe_error(e))]
    model, dataset = cfg["model"]["name"], cfg["dataset"]["name"]
    return [
        AccuracyRow(
            name,
            model,
            dataset,
            r["precision"],
            r["seed"],
            r["test"],
            r["val"],
            r["best_epoch"],
            r["epochs_run"],
            1000 * r["epoch_time_s"],
        )
        for r in runs
    ]


def measure(
    paths: list[Path],
    precisions: list[str],
    seeds: int,
    reference: str | None,
    overrides: list[str],
    out_dir: Path,
    jobs: int = 1,
    done: Callable[[list[AccuracyRow]], None] | None = None,
) -> list[AccuracyRow]:
    """The rows of every config, in the order given (per config the reference's first, then
    each precision's, each by seed); ``jobs`` > 1 trains that many runs (a config in one
    precision with one seed) at once, each in a process of its own. ``done(rows)``, when
    given, sees the rows finished so far, in that order, each time a run finishes."""
    if seeds < 1 or jobs < 1:
        raise ValueError(f"--seeds and --jobs must be >= 1, got {seeds} and {jobs}")
    labels = [(None, reference)] if reference else []
    labels += [([p], None) for p in precisions]
    args = [
        (p, ps or [], 1, ref, overrides, out_dir, i)
        for p in paths
        for ps, ref in labels
        for i in range(seeds)
    ]
    finished: dict[int, list[AccuracyRow]] = {}

    def gather(index: int, runs: list[AccuracyRow]) -> list[AccuracyRow]:
        # a config that cannot run fails every run alike: its first error row says so
        finished[index] = runs
        rows, failed = [], set()
        for i in sorted(finished):
            for row in finished[i]:
                if not (row.error and row.config in failed):
                    failed.update([row.config] if row.error else [])
                    rows.append(row)
        if done is not None:
            done(list(rows))
        return rows

    rows: list[AccuracyRow] = []
    if jobs == 1:
        for index, a in enumerate(args):
            rows = gather(index, config_runs(*a))
        return rows
    workers = min(jobs, len(args))
    # each worker takes its share of the host's cores: a cora run is bound by the host, and
    # workers of a core count's threads each slow each other down
    with ProcessPoolExecutor(
        workers,
        mp_context=get_context("spawn"),
        initializer=torch.set_num_threads,
        initargs=(max(1, (os.cpu_count() or 1) // workers),),
    ) as pool:
        futures = {pool.submit(config_runs, *a): index for index, a in enumerate(args)}
        for future in as_completed(futures):
            rows = gather(futures[future], future.result())
    return rows


def _cell(values: list[float]) -> str:
    if not values:
        return ""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):.2f} +- {100 * std:.2f}"


def summary(rows: list[AccuracyRow]) -> tuple[list[str], list[list[str]]]:
    """(headers, cells): per config, the paper's figure, then the test accuracy (%) of each
    implementation as mean +- std over its seeds, fp32 minus PyG, and the largest distance of
    another precision from fp32 (points)."""
    done = [r for r in rows if not r.error and r.test is not None]
    impls = [i for i in (REFERENCE, *PRECISIONS) if any(r.impl == i for r in done)]
    configs = list(dict.fromkeys(r.config for r in done))
    header = ["model", "data", "seeds", "paper", *impls, "fp32 - pyg", "precisions - fp32"]
    body = []
    for config in configs:
        runs = [r for r in done if r.config == config]
        tests = {i: [r.test for r in runs if r.impl == i] for i in impls}
        means = {i: 100 * statistics.fmean(v) for i, v in tests.items() if v}
        paper = PAPER.get((runs[0].model, runs[0].dataset))
        gap = ""
        if "fp32" in means and REFERENCE in means:
            gap = f"{means['fp32'] - means[REFERENCE]:+.2f}"
        others = [abs(means[p] - means["fp32"]) for p in PRECISIONS if p != "fp32" and p in means]
        spread = f"{max(others):.2f}" if others and "fp32" in means else ""
        body.append(
            [
                runs[0].model.upper(),
                runs[0].dataset,
                str(min(len(v) for v in tests.values() if v)),
                "" if paper is None else f"{paper:.1f}",
                *(_cell(tests[i]) for i in impls),
                gap,
                spread,
            ]
        )
    return header, body


def failures(rows: list[AccuracyRow]) -> list[str]:
    """One line per config that failed to run."""
    return [f"{r.config}: {r.error}" for r in rows if r.error]


def kept_rows(
    previous: list[AccuracyRow], env: dict, running: set[str], rows: list[AccuracyRow]
) -> tuple[list[AccuracyRow], str]:
    """The ``previous`` rows (an earlier CSV's, written with the stamp ``env``) of the configs
    not ``running`` now, then ``rows``; and the line that says where the kept rows come from
    (their run's commit and command, and the earlier such lines), "" when none is kept."""
    kept = [r for r in previous if r.config not in running]
    if not kept:
        return rows, ""
    names = ", ".join(dict.fromkeys(r.config for r in kept))
    note = (
        f"Rows of {names} from an earlier run: commit `{env.get('commit', 'unknown')[:7]}`, "
        f"`{env.get('command', 'command not recorded')}`."
    )
    return kept + rows, " ".join(filter(None, [env.get("note"), note]))


def run(args) -> int:
    device = torch.device(args.device)
    if cuda_missing(device, "accuracy"):
        return 2
    names = [t.strip() for t in args.configs.split(",") if t.strip()]
    paths = [config_path(n) for n in names]
    absent = [str(p) for p in paths if not p.is_file()]
    if absent or not paths:
        print(f"flashgnn bench accuracy: no such config: {', '.join(absent)}", file=sys.stderr)
        return 2
    precisions = comma_list(args.precisions, PRECISIONS, "precisions")
    overrides = [f"train.device={args.device}"]
    if args.data is not None:
        overrides.append(f"dataset.root={args.data}")
    reference = None if args.no_reference else REFERENCE
    env = environment(Timer(device)) if args.csv is not None else None
    previous, previous_env = [], {}
    if args.csv is not None and args.append and args.csv.is_file():
        previous = table.read_csv(args.csv, AccuracyRow)
        previous_env = table.read_environment(args.csv) or {}
    running = {p.stem for p in paths}

    def write(rows: list[AccuracyRow]) -> None:
        """The CSV as it stands, rewritten after every run: a table cut short keeps the runs
        it finished."""
        if args.csv is None:
            return
        rows, note = kept_rows(previous, previous_env, running, rows)
        table.write_csv(rows, args.csv, {**env, **({"note": note} if note else {})}, AccuracyRow)

    with tempfile.TemporaryDirectory(prefix="flashgnn-accuracy-") as scratch:
        out_dir = args.runs if args.runs is not None else Path(scratch)
        rows = measure(
            paths, precisions, args.seeds, reference, overrides, out_dir, args.jobs, write
        )
    print(table.text_table(*summary(rows)))
    for line in failures(rows):
        print(f"failed: {line}", file=sys.stderr)
    if args.csv is not None:
        print(f"wrote {args.csv}")
    return 1 if failures(rows) else 0
