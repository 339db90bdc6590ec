"""Command-line options and values that several benchmarks share."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from .graphs import DEFAULT_CACHE_DIR

QUICK_SCALE = 16  # --quick divides the generated graphs' nodes and edges by this
SLOW_CPU_RUN = " for a (slow) CPU run"


def cuda_missing(device: torch.device, name: str, cpu_run: str = "") -> bool:
    """Whether ``device`` is CUDA on a machine without one, after saying so on stderr: the
    first check of ``flashgnn bench <name>``, which then exits with status 2. ``cpu_run`` ends
    the hint to use --device cpu (what a CPU run gives)."""
    if device.type != "cuda" or torch.cuda.is_available():
        return False
    print(f"flashgnn bench {name}: no CUDA device; use --device cpu{cpu_run}", file=sys.stderr)
    return True


def comma_list(text: str, allowed, what: str) -> list[str]:
    """The items of the comma list ``text`` of option ``--what``; a ValueError naming the
    option unless every item is one of ``allowed`` and there is at least one."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise ValueError(f"--{what}: expected a comma list of {', '.join(allowed)}, got {text!r}")
    return items


def add_data_arguments(p) -> None:
    """Where a benchmark reads real graphs and keeps the generated ones."""
    p.add_argument(
        "--data",
        default=None,
        help="datasets folder (default $FLASHGNN_DATA or ../shared/datasets)",
    )
    p.add_argument(
        "--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where generated graphs are kept"
    )


def add_quick_argument(p) -> None:
    """``--quick``: a short run of a benchmark over the real and the generated graphs."""
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"fewer timed calls and the generated graphs divided by {QUICK_SCALE}",
    )


def add_run_arguments(p) -> None:
    """Device, data and timing options shared by the kernel-level benchmarks."""
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_data_arguments(p)
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed calls first (default 5, quick 2)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=None,
        help="timed calls, the median is reported (default 30, quick 10)",
    )
    p.add_argument("--seed", type=int, default=0)


def timed_calls(args) -> tuple[int, int]:
    """(warmup, iters) of a run with ``add_run_arguments``' options: as given, else their
    defaults, fewer under --quick."""
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    iters = args.iters if args.iters is not None else (10 if args.quick else 30)
    return warmup, iters
