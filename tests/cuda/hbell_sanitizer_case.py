"""A small case that runs HB-ELL's SpMM in every precision on the GPU, for compute-sanitizer (a
script, not a pytest module):

    CASE=tests/cuda/hbell_sanitizer_case.py
    compute-sanitizer --tool memcheck --report-api-errors no python $CASE
    compute-sanitizer --tool racecheck python $CASE
    compute-sanitizer --tool initcheck python $CASE

The matrix (109 x 79) has dense blocks, one of them the corner block that reaches past the last
row and column, ELL blocks and scattered nonzeros; N runs through widths that are and are not
multiples of 8 (the kernels' aligned and checked paths, 4 and 8 features per lane). Then a
matrix of dense blocks only and one of ELL blocks only (each path alone), custom values, and an
output dtype of each kind.
"""

import os
import sys

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from flashgnn import ops  # noqa: E402
from flashgnn.formats import HBELL  # noqa: E402
from tests.cuda.test_hbell_gpu import clustered_109x79  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(1)
    matrices = {
        "clustered": clustered_109x79(rng),
        "dense only": sp.csr_matrix(rng.standard_normal((45, 47)).astype(np.float32)),
        "ell only": sp.random(70, 90, 0.05, format="csr", random_state=2, dtype=np.float32),
    }
    for name, m in matrices.items():
        m.sort_indices()
        fmt = HBELL.from_csr(
            m.indptr, m.indices, torch.from_numpy(m.data), n_cols=m.shape[1], device="cuda"
        )
        for precision in ("fp16", "bf16", "tf32", "fp32"):
            for n in (1, 7, 16, 33, 64, 160):
                x = torch.randn(m.shape[1], n, device="cuda")
                ops.spmm(fmt, x, precision)
                ops.spmm(fmt, x.half(), precision, out_fp32=True)
                ops.spmm(fmt, x.bfloat16(), precision)
            ops.spmm(fmt, x, precision, values=fmt.values * 2)
    torch.cuda.synchronize()
    print("hbell sanitizer case: done")


if __name__ == "__main__":
    main()
