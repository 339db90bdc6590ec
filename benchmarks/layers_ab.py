"""A/B of the layer benchmark between a git revision and this checkout: ``flashgnn bench
layers`` run from each in turn, ``--pairs`` times, and the step time (the larger of event and
wall time, ``layers.step_ms``) and speedup over the fastest PyG fp32 row of every flashgnn row
printed per run.

    python benchmarks/layers_ab.py --base 8842a0c --pairs 2 -- \\
        --graphs musae_github --models GCNConv,AGNNConv --precisions fp32,fp16 --rounds 5 --iters 10

The revision's package (flashgnn/, kernels/, models/) is exported with ``git archive`` into a
temporary folder and each run starts in its folder: ``python -m`` puts the working directory
first on sys.path, so a run started here with another PYTHONPATH would import this checkout
and compare it with itself. Both read this checkout's datasets and generated graphs
unless ``--data`` / ``--cache-dir`` are given. On a host-bound graph the host's speed drifts within
a
loan, and runs in separate processes minutes apart see it: compare pairs, not runs.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import common  # noqa: F401  (puts the checkout on sys.path)
from common import REPO_ROOT

from flashgnn.benchmarking import table
from flashgnn.benchmarking.graphs import DEFAULT_CACHE_DIR, data_dir
from flashgnn.benchmarking.layers import ModelRow, step_ms


def export(revision: str, dest: Path) -> None:
    """The package of ``revision`` (flashgnn/, kernels/, models/) written under ``dest``."""
    done = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", revision, "flashgnn", "kernels", "models"],
        capture_output=True,
    )
    if done.returncode:
        raise SystemExit(
            f"layers_ab.py: cannot export {revision!r}: {done.stderr.decode().strip()}"
        )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=done.stdout, check=True)


def run(root: Path, bench_args: list[str], csv_path: Path) -> list[ModelRow]:
    """``flashgnn bench layers`` imported from ``root``, its rows read back from ``csv_path``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "flashgnn", "bench", "layers", *bench_args, "--csv", str(csv_path)]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a flashgnn row failed, which the table shows
        raise RuntimeError(f"{' '.join(cmd)} in {root} failed:\n{done.stderr[-2000:]}")
    return table.read_csv(csv_path, ModelRow)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--base", required=True, help="git revision of the baseline (e.g. HEAD~1)")
    p.add_argument(
        "--pairs", type=int, default=2, help="base/checkout runs, alternating (default 2)"
    )
    p.add_argument(
        "bench_args", nargs=argparse.REMAINDER, help="after --: arguments of flashgnn bench layers"
    )
    args = p.parse_args()
    bench_args = [a for a in args.bench_args if a != "--"]
    if any(a.startswith("--csv") for a in bench_args):
        p.error("--csv is this script's: leave it out of the benchmark's arguments")
    # both runs read this checkout's datasets and generated graphs (the base runs elsewhere)
    if not any(a.startswith("--data") for a in bench_args) and (root := data_dir()) is not None:
        bench_args += ["--data", str(root)]
    if not any(a.startswith("--cache-dir") for a in bench_args):
        bench_args += ["--cache-dir", str(DEFAULT_CACHE_DIR)]
    with tempfile.TemporaryDirectory() as tmp:
        base_root = Path(tmp) / "base"
        base_root.mkdir()
        export(args.base, base_root)
        results: dict[tuple, dict[str, str]] = {}  # (graph, model, precision) -> run label -> cell
        labels = []
        for i in range(args.pairs):
            for name, root in (("base", base_root), ("checkout", REPO_ROOT)):
                label = f"{name} {i + 1}"
                labels.append(label)
                for r in run(root, bench_args, Path(tmp) / f"{name}-{i}.csv"):
                    if r.impl != "flashgnn":
                        continue
                    t, x = step_ms(r), r.speedup
                    cell = r.error[:30] if t is None else f"{t:.3f}" + (f" ({x:.2f}x)" if x else "")
                    results.setdefault((r.graph, r.model, r.precision), {})[label] = cell
                print(f"{label} done", file=sys.stderr, flush=True)
    headers = ["graph", "model", "precision", *labels]
    rows = [[*key, *(cells.get(label, "") for label in labels)] for key, cells in results.items()]
    print(f"step ms (x the fastest PyG fp32 step) of flashgnn's rows, base = {args.base}")
    print(table.text_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
