"""The ``flashgnn`` command line. Each subcommand lives in its own module, which provides
``add_arguments(parser)`` and ``run(args) -> int``.

An error ends the command with one line on stderr naming the problem, without a traceback:
exit status 2 for bad input (a config, data file, argument or run folder), 1 for any other
failure, 130 for Ctrl-C. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

SUBCOMMANDS = {
    "demo": ("flashgnn.demo", "run the sparse ops end to end on a generated graph"),
    "bench": ("flashgnn.bench", "benchmarks (kernels: SpMM and SDDMM against cuSPARSE)"),
    "train": ("flashgnn.train", "train a GNN from a YAML config (configs/)"),
    "compare": (
        "flashgnn.compare",
        "train one config under several precisions and tabulate accuracy and time",
    ),
}
BAD_INPUT = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, ImportError)
"""What a user fixes by changing the command, its config or its files: exit status 2."""
DEBUG_HELP = "show the traceback of an error instead of a one-line message"


def run_reporting_errors(command: str, run: Callable[[], int | None], debug: bool) -> int:
    """``run()``'s exit status; an exception is reported in one line on stderr (unless
    ``debug``, which lets it propagate with its traceback)."""
    if debug:
        return run() or 0
    try:
        return run() or 0
    except KeyboardInterrupt:
        print(f"flashgnn {command}: interrupted", file=sys.stderr)
        return 130
    except BAD_INPUT as e:
        print(f"flashgnn {command}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else "(no message)"
        print(
            f"flashgnn {command}: error: {type(e).__name__}: {message} "
            "(--debug shows the traceback)",
            file=sys.stderr,
        )
        return 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="flashgnn", description="GNNs on tensor cores")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        # also after the subcommand; SUPPRESS keeps a --debug given before it
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    return run_reporting_errors(
        args.command, lambda: importlib.import_module(args._module).run(args), args.debug
    )


if __name__ == "__main__":
    sys.exit(main())
