"""A small case that runs every CVSE kernel (kernels/cvse.cu) on the GPU, for compute-sanitizer
(a script, not a pytest module):

    compute-sanitizer --tool memcheck python tests/cuda/cvse_sanitizer_case.py
    compute-sanitizer --tool racecheck python tests/cuda/cvse_sanitizer_case.py
    compute-sanitizer --tool initcheck python tests/cuda/cvse_sanitizer_case.py

For every V and precision: the SpMM forward and backward (SDDMM for dvalues, the SpMM of A^T
for dX) at N = 7 and 100 (both tile counts, tails, checked loads) and at N = 64 and 256 on
aligned rows (vector loads; every fp32 lane width), and the SDDMM forward and backward at K =
7 and 40. The matrix (61 x 900, a hub row of ~700 nonzeros) leaves the last strip partial.
"""

import os
import sys

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from flashgnn import ops  # noqa: E402
from flashgnn.formats import CVSE  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(1)
    rows = np.concatenate([rng.integers(0, 61, 300), np.full(700, 3)])
    a = sp.csr_matrix((np.ones(1000), (rows, rng.integers(0, 900, 1000))), shape=(61, 900))
    a.sum_duplicates()
    a.sort_indices()
    values = rng.standard_normal(a.nnz).astype(np.float32)
    for vector in (2, 4, 8):
        fmt = CVSE.from_csr(a.indptr, a.indices, values, n_cols=900, vector=vector, device="cuda")
        for precision in ("fp16", "bf16", "tf32", "fp32"):
            for n in (7, 64, 100, 256):
                x = torch.randn(900, n, device="cuda", requires_grad=True)
                v = fmt.values.clone().requires_grad_()
                ops.spmm(fmt, x, precision, values=v).sum().backward()
            for k in (7, 40):
                u = torch.randn(61, k, device="cuda", requires_grad=True)
                w = torch.randn(900, k, device="cuda", requires_grad=True)
                ops.sddmm(fmt, u, w, precision).sum().backward()
    torch.cuda.synchronize()
    print("cvse sanitizer case done")


if __name__ == "__main__":
    main()
