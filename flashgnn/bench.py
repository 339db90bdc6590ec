"""``flashgnn bench <benchmark>``: the benchmarks of ``flashgnn.benchmarking``, each a module
with ``add_arguments(parser)`` and ``run(args) -> int``. Every benchmark but ``report`` also
takes ``--results DIR``: its CSV and stamp go to ``DIR/<gpu>/<benchmark>.csv``
(``benchmarking/results.py``), where ``flashgnn bench report --results DIR`` finds them."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from .benchmarking import results

BENCHMARKS = {
    "kernels": ("flashgnn.benchmarking.kernels", "SpMM and SDDMM on ME-BCRS against cuSPARSE"),
    "layers": (
        "flashgnn.benchmarking.layers",
        "one GCN and one AGNN layer, forward + backward, against PyG",
    ),
    "training": (
        "flashgnn.benchmarking.training",
        "epoch time and memory of GCN and AGNN training against PyG",
    ),
    "ablation": (
        "flashgnn.benchmarking.ablation",
        "8x1 ME-BCRS against the 16x1 baseline: ms, MMAs, bytes",
    ),
    "e2e": (
        "flashgnn.benchmarking.end_to_end",
        "training epochs of GCN, AGNN and GAT on real and generated graphs against PyG and "
        "torch.sparse",
    ),
    "seeds": (
        "flashgnn.benchmarking.seeds",
        "the seed papers' formats against cuBLAS and cuSPARSE on DLMC weights, graphs, patterns",
    ),
    "sparse-linear": (
        "flashgnn.benchmarking.sparse_linear",
        "SparseLinear forward and backward against cuBLAS dense on pruned weights",
    ),
    "accuracy": (
        "flashgnn.benchmarking.accuracy",
        "test accuracy of the papers' GCN, GAT and AGNN per precision, beside PyG's layers",
    ),
    "distributed": (
        "flashgnn.benchmarking.distributed",
        "strong scaling of a training config over 1, 2, 4, ... processes",
    ),
    "reorder": (
        "flashgnn.benchmarking.reordering",
        "locality reordering: ME-BCRS vectors per nonzero, reorder time, SpMM time",
    ),
    "report": (
        "flashgnn.benchmarking.report",
        "Markdown tables and PNG plots from the benchmarks' CSV files",
    ),
}


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="benchmark", required=True)
    for name, (module, help_text) in BENCHMARKS.items():
        mod = importlib.import_module(module)
        b = sub.add_parser(
            name,
            help=help_text,
            description=mod.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        b.set_defaults(_benchmark_module=module)
        mod.add_arguments(b)
        if name != "report":
            b.add_argument(
                "--results",
                type=Path,
                help="write the CSV and its stamp to "
                "RESULTS/<gpu>/<benchmark>.csv (instead of --csv)",
            )


def run(args) -> int:
    if args.benchmark != "report" and args.results is not None:
        if args.csv is not None:
            raise ValueError("give --csv or --results, not both")
        gpu = results.device_name(args.device)
        args.csv = results.result_path(args.results, gpu, args.benchmark)
    return importlib.import_module(args._benchmark_module).run(args)
