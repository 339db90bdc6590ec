"""Random sparse matrices with the shapes GPU kernels get wrong, shared by the GPU tests of
the builder, the edge softmax and the fp32 SpMM."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tests.helpers import csr_from_coo, random_csr

HUB_NNZ = 20_000


def hub_matrix(rng: np.random.Generator) -> sp.csr_matrix:
    """1003 x 20011 canonical CSR (the last window has 3 rows) with about 8,000 random
    nonzeros, row 5 empty, rows 64..127 empty (eight empty windows), a hub row (301) of
    20,000 nonzeros, a window (rows 400..407) whose rows share 40 columns (full vec_masks),
    and windows of exactly 4, 5, 8 and 9 vectors (rows 600..631)."""
    n_rows, n_cols = 1003, 20_011
    r = rng.integers(0, n_rows, 8000)
    c = rng.integers(0, n_cols, 8000)
    keep = (r != 5) & ~((r >= 64) & (r < 128)) & ~((r >= 600) & (r < 632))
    rows, cols = [r[keep]], [c[keep]]
    rows.append(np.full(HUB_NNZ, 301))
    cols.append(rng.choice(n_cols, HUB_NNZ, replace=False))
    shared = rng.choice(n_cols, 40, replace=False)
    rows.append(np.repeat(np.arange(400, 408), 40))
    cols.append(np.tile(shared, 8))
    for window, n_vectors in zip(range(75, 79), (4, 5, 8, 9)):
        rows.append(8 * window + rng.integers(0, 8, n_vectors))
        cols.append(rng.choice(n_cols, n_vectors, replace=False))
    return csr_from_coo(
        np.concatenate(rows), np.concatenate(cols), (n_rows, n_cols), rng, dtype=np.float32
    )


CASES = {
    "hub_1003x20011": hub_matrix,
    "square_61x61": lambda rng: random_csr(61, 61, 0.1, rng, dtype=np.float32),
    "tall_100x7": lambda rng: random_csr(100, 7, 0.3, rng, dtype=np.float32),
    "dense_16x16": lambda rng: random_csr(16, 16, 1.0, rng, dtype=np.float32),
    "one_row_1x50": lambda rng: random_csr(1, 50, 0.3, rng, dtype=np.float32),
    "all_empty_10x5": lambda rng: random_csr(10, 5, 0.0, rng, dtype=np.float32),
}
"""name -> factory(rng) of a float32 scipy CSR matrix."""
