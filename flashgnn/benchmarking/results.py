"""Where benchmark results live and what stamps them.

Layout: ``<results>/<gpu>/<benchmark>.csv``, one file per benchmark and GPU (a new run of the
benchmark on that GPU replaces it), ``<gpu>`` the GPU's name as a slug (``gpu_slug``) and
``<benchmark>`` the name of ``flashgnn bench <benchmark>``. Beside each CSV its stamp,
``<benchmark>.csv.json``: the environment the benchmark records (GPU, driver, CUDA, torch, ...)
and, from ``provenance``, the commit, the UTC date and the command line that reproduces the run.
``flashgnn bench report --results <results>`` turns the folder into BENCHMARKS.md.
"""

from __future__ import annotations

import datetime
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = "benchmarks/results"  # the repository's results folder, relative to its root
UNKNOWN = "unknown"
BEFORE = ".before"


def gpu_slug(name: str) -> str:
    """A GPU's name as a folder name: "NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3"."""
    name = re.sub(r"^nvidia\s+", "", name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "cpu"


def result_path(results: Path, gpu_name: str, benchmark: str) -> Path:
    """The CSV of ``benchmark`` measured on the GPU named ``gpu_name`` ("cpu" for the CPU)."""
    return Path(results) / gpu_slug(gpu_name) / f"{benchmark}.csv"


def device_name(device: str) -> str:
    """The name of the GPU ``device`` ("cuda", "cuda:1") names, "cpu" for any other device or
    where CUDA is absent."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return "cpu"
    return torch.cuda.get_device_name(device)


def find(results: Path) -> list[tuple[str, str, Path]]:
    """(GPU slug, benchmark, CSV path) of every current result in the folder ``results``
    (earlier runs kept beside them, ``before_path``, left out), sorted."""
    return [
        (p.parent.name, p.stem, p)
        for p in sorted(Path(results).glob("*/*.csv"))
        if not p.stem.endswith(BEFORE)
    ]


def before_path(path: Path) -> Path:
    """Where an earlier run of the result ``path`` is kept to compare the current one with:
    ``<benchmark>.before.csv`` (with its stamp), put there by hand or ``run_all.sh --compare``."""
    return path.with_name(f"{path.stem}{BEFORE}.csv")


def commit(repo: Path = REPO_ROOT) -> str:
    """The commit of the checkout that holds this package (``git rev-parse HEAD``), with
    "-dirty" when a tracked file outside the results folder differs from it (results written
    earlier in the same run do not count); ``$FLASHGNN_COMMIT`` where set (a copy of a
    checkout without its .git: the commit it was copied from); else "unknown"."""
    if os.environ.get("FLASHGNN_COMMIT"):
        return os.environ["FLASHGNN_COMMIT"]

    def git(*args: str) -> str:
        # safe.directory: a checkout copied to another machine may belong to another user
        return subprocess.run(
            ["git", "-C", str(repo), "-c", f"safe.directory={repo}", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        changed = git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){RESULTS_DIR}"
        )
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return f"{head}-dirty" if changed else head


def command_line(argv: list[str] | None = None) -> str:
    """The shell command that reproduces this process: ``flashgnn`` and its arguments, quoted,
    when it runs the flashgnn command line (the ``flashgnn`` script or ``python -m flashgnn``);
    else the arguments as given."""
    argv = list(sys.argv if argv is None else argv)
    if argv and Path(argv[0]).name in ("flashgnn", "__main__.py"):
        argv = ["flashgnn", *argv[1:]]
    return shlex.join(argv)


def provenance() -> dict[str, str]:
    """commit, date (UTC, ISO 8601) and command of the running benchmark, for its stamp."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "commit": commit(),
        "date": now.isoformat(timespec="seconds"),
        "command": command_line(),
    }
