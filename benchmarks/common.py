"""Shared by the scripts in benchmarks/: makes the checkout's ``flashgnn`` importable when a
script is run as ``python benchmarks/<name>.py`` without installing, and re-exports the
timing helpers (the benchmark logic itself lives in ``flashgnn.benchmarking``, so that
``flashgnn bench`` runs it from an installed package)."""
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from flashgnn.benchmarking.timing import Measurement, Timer  # noqa: E402

__all__ = ["REPO_ROOT", "Measurement", "Timer"]
