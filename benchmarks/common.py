"""Shared by the scripts in benchmarks/: makes the checkout's ``flashgnn`` importable when a
script is run as ``python benchmarks/<name>.py`` without installing, and re-exports the
timing helpers (the benchmark logic itself lives in ``flashgnn.benchmarking``, so that
``flashgnn bench`` runs it from an installed package)."""
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from flashgnn.benchmarking.timing import Measurement, Timer  # noqa: E402

__all__ = ["REPO_ROOT", "Measurement", "Timer", "wall_median_ms"]


def wall_median_ms(fn, reps: int) -> float:
    """Median wall time of ``fn()`` in ms over ``reps`` calls, the GPU synchronised around each:
    for host-bound steps, where the host's time is the cost."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        tic = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - tic) * 1e3)
    return statistics.median(times)
