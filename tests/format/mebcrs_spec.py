"""An independent reading of ME-BCRS as docs/FORMAT.md §1 specifies it, used to check
flashgnn.formats.mebcrs without trusting any of its code.

- Rows are cut into windows of 8; a vector is one column of one window holding >= 1 nonzero;
  a window's vectors are sorted by column (§1.1).
- row_ptr[w] .. row_ptr[w + 1] are window w's vectors; col_idx[v] is vector v's column (§1.2).
- values: block after block, k vectors a block; a full block is 8 x k row-major, the window's
  last block of r = n_vec mod k vectors is 8 x r row-major; blocks are contiguous, no padding
  (§1.3); padding slots hold 0.
- perm[i] is the slot of the i-th nonzero in CSR order; bit r of vec_mask[v] marks row r of
  vector v as a nonzero (§1.4).

The decoder walks windows with a Python loop and each window's blocks with NumPy; it is
meant for the test matrices and the graphs of ../shared/datasets, not for large inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

WINDOW = 8


def _numpy(a, dtype=None) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu()
        if a.is_floating_point():
            a = a.to(torch.float64)  # exact for every float type, bfloat16 included
        a = a.numpy()
    a = np.asarray(a)
    return a.astype(dtype) if dtype is not None else a


@dataclass
class Slots:
    """One entry per value slot, in slot order: the vector owning the slot, the matrix row and
    column the slot stands for (rows may pass n_rows in the last window), and its value."""

    vector: np.ndarray
    row: np.ndarray
    col: np.ndarray
    value: np.ndarray


def decode(row_ptr, col_idx, values, k: int, n_rows: int, n_cols: int) -> Slots:
    """Read every value slot of an ME-BCRS matrix (FORMAT.md §1.3); AssertionError on a
    malformed layout (the invariants of §1.6 it can see)."""
    row_ptr = _numpy(row_ptr, np.int64)
    col_idx = _numpy(col_idx, np.int64)
    values = _numpy(values, np.float64)
    n_windows = -(-n_rows // WINDOW)
    n_vectors = len(col_idx)
    assert k in (4, 8), f"k = {k}"
    assert row_ptr.shape == (n_windows + 1,), (
        f"row_ptr has {len(row_ptr)} entries, expected {n_windows + 1}"
    )
    assert row_ptr[0] == 0 and row_ptr[-1] == n_vectors, "row_ptr must run from 0 to n_vectors"
    assert np.all(np.diff(row_ptr) >= 0), "row_ptr decreases"
    assert values.shape == (WINDOW * n_vectors,), f"{len(values)} values for {n_vectors} vectors"

    vector = np.empty(WINDOW * n_vectors, np.int64)
    row = np.empty_like(vector)
    for w in range(n_windows):
        first, end = int(row_ptr[w]), int(row_ptr[w + 1])
        cols = col_idx[first:end]
        assert np.all(np.diff(cols) > 0), f"window {w}: columns not strictly increasing"
        assert np.all((cols >= 0) & (cols < n_cols)), f"window {w}: column out of range"
        n_full = (end - first) // k
        # full blocks: [n_full, 8, k] row-major from slot 8 * first on
        b, r, j = np.indices((n_full, WINDOW, k)).reshape(3, -1)
        full_end = WINDOW * (first + n_full * k)
        vector[WINDOW * first : full_end] = first + b * k + j
        row[WINDOW * first : full_end] = WINDOW * w + r
        # the last block: [8, width] row-major, width = n_vec mod k
        width = end - (first + n_full * k)
        r, j = np.indices((WINDOW, width)).reshape(2, -1)
        vector[full_end : WINDOW * end] = first + n_full * k + j
        row[full_end : WINDOW * end] = WINDOW * w + r
    return Slots(vector, row, col_idx[vector], values)


def _pattern_lookup(
    a: sp.csr_matrix, row: np.ndarray, col: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(in_pattern, position in a's CSR order) of each (row, col); rows may pass a's last row."""
    n_rows, n_cols = a.shape
    a_rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(a.indptr))
    a_keys = a_rows * n_cols + a.indices.astype(np.int64)
    assert np.all(np.diff(a_keys) > 0), "reference matrix must be canonical CSR"
    keys = row * n_cols + col
    pos = np.searchsorted(a_keys, keys)
    found = (row < n_rows) & (pos < len(a_keys))
    found[found] = a_keys[pos[found]] == keys[found]
    return found, pos


def _assert_encodes(row_ptr, col_idx, values, k: int, a: sp.csr_matrix):
    n_rows, n_cols = a.shape
    s = decode(row_ptr, col_idx, values, k, n_rows, n_cols)
    in_pattern, pos = _pattern_lookup(a, s.row, s.col)
    assert np.array_equal(s.value[in_pattern], a.data.astype(np.float64)[pos[in_pattern]]), (
        "a nonzero holds the wrong value"
    )
    assert not np.any(s.value[~in_pattern]), "a slot outside the pattern holds a nonzero"
    per_vector = np.bincount(s.vector[in_pattern], minlength=len(_numpy(col_idx)))
    assert np.all(per_vector > 0), f"vector {int(np.argmin(per_vector))} holds no nonzero"
    # slots are distinct (row, col) pairs, so a count equal to nnz means every nonzero is stored
    assert int(in_pattern.sum()) == a.nnz, (
        f"{int(in_pattern.sum())} nonzeros stored, matrix has {a.nnz}"
    )
    return s, in_pattern


def assert_encodes(row_ptr, col_idx, values, k: int, a: sp.csr_matrix) -> Slots:
    """Assert that (row_ptr, col_idx, values, k) is exactly the ME-BCRS of the canonical scipy
    CSR matrix ``a``: every nonzero of ``a`` in its slot with its value, no vector without a
    nonzero, every other slot 0. Returns the decoded slots."""
    return _assert_encodes(row_ptr, col_idx, values, k, sp.csr_matrix(a))[0]


def assert_mebcrs_of(fmt, a: sp.csr_matrix) -> None:
    """Every public field of an ``MEBCRS`` (read as plain arrays) against the canonical scipy
    CSR matrix ``a``: layout and values as ``assert_encodes``; perm[i] is the slot of a's i-th
    nonzero in CSR order; bit r of vec_mask[v] is set exactly when row r of vector v is a
    nonzero (FORMAT.md §1.4)."""
    a = sp.csr_matrix(a)
    assert (fmt.n_rows, fmt.n_cols) == a.shape, f"shape {(fmt.n_rows, fmt.n_cols)} != {a.shape}"
    s, in_pattern = _assert_encodes(fmt.row_ptr, fmt.col_idx, fmt.values, fmt.k, a)

    perm = _numpy(fmt.perm, np.int64)
    assert perm.shape == (a.nnz,), f"perm has {len(perm)} entries for {a.nnz} nonzeros"
    csr_rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    assert np.array_equal(s.row[perm], csr_rows), "perm sends a nonzero to a slot of another row"
    assert np.array_equal(s.col[perm], a.indices), (
        "perm sends a nonzero to a slot of another column"
    )

    vec_mask = _numpy(fmt.vec_mask, np.int64)
    expected = np.zeros(len(s.vector) // WINDOW, np.int64)
    np.add.at(expected, s.vector[in_pattern], 1 << (s.row[in_pattern] % WINDOW))
    assert np.array_equal(vec_mask, expected), "vec_mask differs from the pattern"
