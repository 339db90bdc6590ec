"""The DLMC collection of pruned ResNet-50 weights (``dlmc_rn50_magnitude_pruning.npz`` of the
shared datasets folder) and the V-row expansion Chen et al. apply to it.

The file holds many matrices: ``names[i]`` = "<sparsity>/<layer>", ``shapes[i]`` = (rows, cols,
nnz), the row pointers of matrix i at ``indptr_all[indptr_off[i]:indptr_off[i + 1]]`` and its
columns (uint16) at ``indices_all[indices_off[i]:indices_off[i + 1]]``. Patterns only: the
collection carries no values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import DataFileError, read_npz

DLMC_FILE = "dlmc_rn50_magnitude_pruning.npz"
_ARRAYS = ("names", "shapes", "indptr_all", "indices_all", "indptr_off", "indices_off")
_LAYOUT = (
    "the DLMC layout: names, shapes, indptr_all, indices_all, indptr_off, indices_off "
    "(see flashgnn.data.dlmc)"
)


@dataclass
class DlmcMatrix:
    """One pruned weight: ``name`` ("<sparsity>/<layer>"), its sparsity (from the name), and
    its pattern as canonical CSR, indptr int32 [n_rows + 1] and indices int32 [nnz]."""

    name: str
    sparsity: float
    n_rows: int
    n_cols: int
    indptr: np.ndarray
    indices: np.ndarray

    @property
    def nnz(self) -> int:
        return int(self.indices.size)


def load_dlmc(root: str | Path, which=None) -> list[DlmcMatrix]:
    """The matrices at the positions ``which`` (default: all, in file order) of
    ``<root>/dlmc_rn50_magnitude_pruning.npz``. FileNotFoundError naming the file when it is
    absent; DataFileError when it does not hold the layout or a matrix's arrays disagree with
    its shape; IndexError for a position past the collection."""
    path = Path(root) / DLMC_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the DLMC collection ({_LAYOUT})")
    d = read_npz(path, _ARRAYS, _LAYOUT)
    count = len(d["names"])
    positions = range(count) if which is None else list(which)
    out = []
    for i in positions:
        if not -count <= i < count:
            raise IndexError(f"DLMC matrix {i} does not exist: the collection holds {count}")
        i %= count
        name = str(d["names"][i])
        n_rows, n_cols, nnz = (int(s) for s in d["shapes"][i])
        indptr = d["indptr_all"][d["indptr_off"][i] : d["indptr_off"][i + 1]].astype(np.int32)
        indices = d["indices_all"][d["indices_off"][i] : d["indices_off"][i + 1]].astype(np.int32)
        if len(indptr) != n_rows + 1 or len(indices) != nnz or (nnz and indptr[-1] != nnz):
            raise DataFileError(f"{path}: matrix {i} ({name}) does not match its shape {n_rows}")
        out.append(DlmcMatrix(name, _sparsity(name), n_rows, n_cols, indptr, indices))
    return out


def _sparsity(name: str) -> float:
    try:
        return float(name.split("/", 1)[0])
    except ValueError:
        return float("nan")


def expand_rows(indptr: np.ndarray, indices: np.ndarray, vector: int) -> tuple[np.ndarray, ...]:
    """Each nonzero (i, j) of a CSR pattern made a ``vector`` x 1 column vector, rows
    vector * i .. vector * i + vector - 1 of column j (how Chen et al. turn DLMC's unstructured
    weights into V x 1 vector-sparse ones): (indptr int64 [vector * n_rows + 1], indices int32
    [vector * nnz]), canonical when the input is."""
    if isinstance(vector, bool) or not isinstance(vector, int) or vector < 1:
        raise ValueError(f"vector must be a positive integer, got {vector!r}")
    indptr = np.asarray(indptr, dtype=np.int64)
    source = np.arange(vector * (indptr.size - 1)) // vector  # the input row of each output row
    counts = indptr[source + 1] - indptr[source]
    out_ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    local = np.arange(out_ptr[-1]) - np.repeat(out_ptr[:-1], counts)
    out_idx = np.asarray(indices)[np.repeat(indptr[source], counts) + local]
    return out_ptr, out_idx.astype(np.int32)
