"""A small case that runs the TCA and GCOO SpMM kernels on the GPU, for compute-sanitizer (a
script, not a pytest module):

    compute-sanitizer --tool memcheck python tests/cuda/tca_gcoo_sanitizer_case.py
    compute-sanitizer --tool racecheck python tests/cuda/tca_gcoo_sanitizer_case.py
    compute-sanitizer --tool initcheck python tests/cuda/tca_gcoo_sanitizer_case.py

The matrix (61 x 900) has a hub row of about 700 nonzeros (TCA: 11 chunks and ROW_WARPS_MAX
warps; GCOO: a strip split into segments, summed by gcoo_reduce), empty rows, and a last strip
shorter than the others. TCA runs fp16, bf16 and tf32 into each output type; GCOO every strip
height, 1, 2 and 4 features per lane, fp32 and tf32, default and short segments; N of 1, 5,
36 (tails of a tile), 64 and 160.
"""

import os
import sys

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from flashgnn import ops  # noqa: E402
from flashgnn._cuda.gcoo import FEATURES, gcoo_spmm_cuda  # noqa: E402
from flashgnn.formats import GCOO, TCACSR  # noqa: E402
from flashgnn.formats.gcoo import GROUPS  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(1)
    rows = np.concatenate([rng.integers(0, 61, 300), np.full(700, 3)])
    rows = rows[(rows != 10) & (rows != 11)]  # empty rows
    a = sp.csr_matrix(
        (np.ones(rows.size), (rows, rng.integers(0, 900, rows.size))), shape=(61, 900)
    )
    a.sum_duplicates()
    a.sort_indices()
    values = torch.tensor(rng.standard_normal(a.nnz), dtype=torch.float32)
    tca = TCACSR.from_csr(a.indptr, a.indices, values, 900, device="cuda")
    for n in (1, 5, 36, 64, 160):
        x = torch.randn(900, n, device="cuda")
        for precision in ("fp16", "bf16", "tf32", "fp32"):
            ops.spmm(tca, x, precision)
            ops.spmm(tca, x.half(), precision)
            ops.spmm(tca, x.bfloat16(), precision, out_fp32=True)
        for group in GROUPS:
            g = GCOO.from_csr(a.indptr, a.indices, values, 900, group=group, device="cuda")
            for precision in ("fp32", "tf32"):
                for features in FEATURES:
                    if n % features:
                        continue
                    for seg_nnz in (None, 32):
                        gcoo_spmm_cuda(
                            g.group_ptr,
                            g.rows,
                            g.cols,
                            g.values,
                            x,
                            g.n_rows,
                            group,
                            precision=precision,
                            seg_nnz=seg_nnz,
                            features=features,
                        )
    torch.cuda.synchronize()
    print("tca/gcoo sanitizer case done")


if __name__ == "__main__":
    main()
