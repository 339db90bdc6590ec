"""Helpers shared by the test modules: GPU marks, error measures, random CSR matrices, the
real graphs of ../shared/datasets and runs of the benchmark commands.

Use ``from tests.helpers import ...``.
"""

from __future__ import annotations

import csv
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn.cli import main
from flashgnn.data.dlmc import DLMC_FILE
from flashgnn.data.dlmc import load_dlmc as read_dlmc
from flashgnn.formats.mebcrs import MEBCRS

REPO_ROOT = Path(__file__).resolve().parents[1]

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
GPU = [pytest.mark.gpu, requires_gpu]
"""Marks of a GPU test: ``pytestmark = GPU`` or ``pytest.param(..., marks=GPU)``."""


def needs_gpu(test):
    """Decorator: mark ``test`` as a GPU test, skipped with the reason where no GPU is present."""
    return pytest.mark.gpu(requires_gpu(test))


def rel_err(a, ref) -> float:
    """||a - ref|| / ||ref|| in float64 (Frobenius); ||a|| when ref is all zeros."""
    a = torch.as_tensor(a).detach().cpu().to(torch.float64)
    ref = torch.as_tensor(ref).detach().cpu().to(torch.float64)
    if a.shape != ref.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} vs {tuple(ref.shape)}")
    diff = torch.linalg.vector_norm(a - ref).item()
    scale = torch.linalg.vector_norm(ref).item()
    return diff / scale if scale > 0 else diff


def random_values(n: int, rng: np.random.Generator) -> np.ndarray:
    """float64 [n], magnitudes in [0.5, 1.5) with random signs: never zero, so a value that
    lands in the wrong slot or is lost cannot go unnoticed."""
    return rng.uniform(0.5, 1.5, n) * rng.choice([-1.0, 1.0], n)


def random_csr(
    n_rows: int,
    n_cols: int,
    density: float,
    rng: np.random.Generator,
    *,
    dtype=np.float64,
    index_dtype=np.int32,
) -> sp.csr_matrix:
    """Canonical scipy CSR (sorted, duplicate-free columns) with about ``density * n_rows *
    n_cols`` nonzeros at uniform random positions; values from ``random_values``."""
    nnz = int(round(density * n_rows * n_cols))
    flat = (
        np.unique(rng.integers(0, max(n_rows * n_cols, 1), nnz))
        if n_rows * n_cols
        else np.zeros(0, np.int64)
    )
    return csr_from_coo(
        flat // max(n_cols, 1),
        flat % max(n_cols, 1),
        (n_rows, n_cols),
        rng,
        dtype=dtype,
        index_dtype=index_dtype,
    )


def csr_from_coo(
    rows,
    cols,
    shape: tuple[int, int],
    rng: np.random.Generator,
    *,
    dtype=np.float64,
    index_dtype=np.int32,
) -> sp.csr_matrix:
    """Canonical CSR of the distinct positions (rows[i], cols[i]) with ``random_values``."""
    pattern = sp.csr_matrix((np.ones(len(rows)), (np.asarray(rows), np.asarray(cols))), shape=shape)
    pattern.sum_duplicates()
    pattern.sort_indices()
    m = sp.csr_matrix(
        (random_values(pattern.nnz, rng).astype(dtype), pattern.indices, pattern.indptr),
        shape=shape,
    )
    m.indptr = m.indptr.astype(index_dtype)
    m.indices = m.indices.astype(index_dtype)
    return m


def mebcrs_of(m: sp.csr_matrix, k: int = 8, device="cpu") -> MEBCRS:
    """ME-BCRS of the canonical scipy CSR ``m`` (its shape, its values in float32, which the
    kernels take where float64 values would take the reference), on ``device``."""
    values = torch.from_numpy(m.data).float()
    return MEBCRS.from_csr(m.indptr, m.indices, values, n_cols=m.shape[1], k=k, device=device)


def without_rows(m: sp.csr_matrix, rows) -> sp.csr_matrix:
    """``m`` with the nonzeros of ``rows`` (an index or a slice) removed."""
    keep = np.ones(m.shape[0])
    keep[rows] = 0
    out = (sp.diags(keep) @ m).tocsr()
    out.eliminate_zeros()
    return out


def data_dir() -> Path | None:
    """The real datasets: ``$FLASHGNN_DATA``, default ``<repo>/../shared/datasets``; None when
    absent."""
    path = Path(os.environ.get("FLASHGNN_DATA") or REPO_ROOT.parent / "shared" / "datasets")
    return path if path.is_dir() else None


NO_DATA = "datasets not found: set FLASHGNN_DATA or provide ../shared/datasets"


def graph_params() -> list:
    """``graph_names()`` for ``pytest.mark.parametrize``; where the datasets are absent, one
    parameter skipped with the reason (an empty list would only say "empty parameter set")."""
    return graph_names() or [pytest.param("no-datasets", marks=pytest.mark.skip(reason=NO_DATA))]


def graph_names() -> list[str]:
    """Names of the graph files (every .npz but the DLMC weight collection), sorted."""
    root = data_dir()
    if root is None:
        return []
    return sorted(p.stem for p in root.glob("*.npz") if not p.stem.startswith("dlmc"))


def load_npz_graph(name: str) -> sp.csr_matrix:
    """Adjacency of graph ``name`` as an n x n scipy CSR of float32 ones (int32 indices)."""
    root = data_dir()
    if root is None:
        pytest.skip(NO_DATA)
    with np.load(root / f"{name}.npz") as d:
        indptr, indices, n = d["indptr"], d["indices"], int(d["num_nodes"])
    return sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(n, n))


def dlmc_spread(k: int) -> list[int]:
    """``k`` positions spread evenly over the DLMC collection, first and last included, so
    that a sample crosses every sparsity level whatever the collection holds; skipped where
    the collection is absent."""
    root = data_dir()
    if root is None or not (root / DLMC_FILE).is_file():
        pytest.skip(f"{DLMC_FILE}: {NO_DATA}")
    with np.load(root / DLMC_FILE) as d:
        count = len(d["names"])
    return sorted({round(j * (count - 1) / max(k - 1, 1)) for j in range(k)})


def load_dlmc(indices) -> list[tuple[str, sp.csr_matrix]]:
    """(name, pattern as a scipy CSR of float32 ones) of the DLMC matrices at ``indices``
    (``flashgnn.data.dlmc``); skipped where the collection is absent."""
    root = data_dir()
    if root is None or not (root / DLMC_FILE).is_file():
        pytest.skip(f"{DLMC_FILE}: {NO_DATA}")
    return [
        (
            m.name,
            sp.csr_matrix(
                (np.ones(m.nnz, np.float32), m.indices, m.indptr), shape=(m.n_rows, m.n_cols)
            ),
        )
        for m in read_dlmc(root, indices)
    ]


def host_syncs(fn) -> int:
    """Host synchronisations ``fn()`` makes on the GPU (torch.cuda's sync debug mode)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # not the once-per-process note that the debug mode "does not yet detect all synchronizing
    # operations", which made the first call in a process count one
    return sum("called a synchronizing CUDA operation" in str(w.message) for w in caught)


ONE_CALL = ("--warmup", "0", "--iters", "1")
"""Benchmark options that time a single call with no warm-up: the fastest run of a harness."""


def read_csv(path) -> list[dict[str, str]]:
    """The rows of the CSV file at ``path``, as dicts keyed by its header."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_metrics(run_dir: Path) -> list[dict[str, str]]:
    """The rows of a training run's metrics.csv (one per epoch), as dicts."""
    return read_csv(Path(run_dir) / "metrics.csv")


def run_losses(run_dir: Path) -> list[float]:
    """The training loss of each epoch of the run in ``run_dir`` (its metrics.csv)."""
    return [float(r["loss"]) for r in read_metrics(run_dir)]


def run_bench(command: str, out: Path, *args: str) -> tuple[int, list[dict[str, str]]]:
    """``flashgnn bench <command> --device cpu <args> --csv <out>``: (exit code, the rows of the
    CSV it wrote)."""
    code = main(["bench", command, "--device", "cpu", *args, "--csv", str(out)])
    return code, read_csv(out)
