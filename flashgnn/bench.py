"""``flashgnn bench <benchmark>``: the benchmarks of ``flashgnn.benchmarking``, each a module
with ``add_arguments(parser)`` and ``run(args) -> int``."""
from __future__ import annotations

import argparse
import importlib

BENCHMARKS = {
    "kernels": ("flashgnn.benchmarking.kernels", "SpMM and SDDMM on ME-BCRS against cuSPARSE"),
    "layers": ("flashgnn.benchmarking.layers", "one GCN and one AGNN layer, forward + backward, against PyG"),
    "training": ("flashgnn.benchmarking.training", "epoch time and memory of GCN and AGNN training against PyG"),
    "ablation": ("flashgnn.benchmarking.ablation", "8x1 ME-BCRS against the 16x1 baseline: ms, MMAs, bytes"),
    "e2e": ("flashgnn.benchmarking.end_to_end",
            "training epochs of GCN, AGNN and GAT on real and generated graphs against PyG and torch.sparse"),
    "report": ("flashgnn.benchmarking.report", "Markdown tables and PNG plots from the benchmarks' CSV files"),
}


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="benchmark", required=True)
    for name, (module, help_text) in BENCHMARKS.items():
        mod = importlib.import_module(module)
        b = sub.add_parser(name, help=help_text, description=mod.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        b.set_defaults(_benchmark_module=module)
        mod.add_arguments(b)


def run(args) -> int:
    return importlib.import_module(args._benchmark_module).run(args)
