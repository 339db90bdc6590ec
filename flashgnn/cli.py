"""The ``flashgnn`` command line. Each subcommand lives in its own module, which provides
``add_arguments(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "demo": ("flashgnn.demo", "run the sparse ops end to end on a generated graph"),
    "bench": ("flashgnn.bench", "benchmarks (kernels: SpMM and SDDMM against cuSPARSE)"),
    "train": ("flashgnn.train", "train a GNN from a YAML config (configs/)"),
    "compare": (
        "flashgnn.compare",
        "train one config under several precisions and tabulate accuracy and time",
    ),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="flashgnn", description="GNNs on tensor cores")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    try:
        return importlib.import_module(args._module).run(args) or 0
    except (ValueError, FileNotFoundError) as e:  # bad configs, data or arguments: no traceback
        print(f"flashgnn {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
