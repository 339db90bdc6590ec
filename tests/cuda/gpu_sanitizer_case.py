"""A small case that runs every op forward and backward in every precision on the GPU, for
compute-sanitizer (a script, not a pytest module):

    compute-sanitizer --tool memcheck --report-api-errors no python tests/cuda/gpu_sanitizer_case.py
    compute-sanitizer --tool racecheck python tests/cuda/gpu_sanitizer_case.py
    compute-sanitizer --tool initcheck python tests/cuda/gpu_sanitizer_case.py

The 16x1 baseline runs its forward ops too. The matrix (61 x 900) has a hub row of ~700
nonzeros, so split windows run too: summed in the SpMM kernel, by the reduction launch, and
both in one call, with 4 and 8 features per lane, each segment taken by one warp or split 2 or
4 ways; the fp32 SpMM in each of its variants, fp32 and tf32, and the lane-per-vector fp32
SDDMM on both paths; SpMM and SDDMM run with their segments in both orders (longest first,
and by column as on long-row graphs); graph convolution's fp16 backward (the column-sums kernel);
graph convolution and AGNN replayed from CUDA graphs.
"""

import os
import sys

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from flashgnn import MEBCRS, ops  # noqa: E402
from flashgnn._cuda import segments  # noqa: E402
from flashgnn._cuda.sddmm import sddmm_cuda_cores  # noqa: E402
from flashgnn._cuda.spmm import spmm_tensor_core  # noqa: E402
from flashgnn._cuda.spmm_fp32 import VARIANTS, spmm_fp32  # noqa: E402
from flashgnn.ops.replay import NodeReplay  # noqa: E402
from flashgnn.ops.score_terms import score_terms  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(1)
    rows = np.concatenate([rng.integers(0, 61, 300), np.full(700, 3)])
    a = sp.csr_matrix((np.ones(1000), (rows, rng.integers(0, 900, 1000))), shape=(61, 900))
    a.sum_duplicates()
    a.sort_indices()
    defaults = segments.COLUMN_ORDER_MIN_VECTORS, segments.COLUMN_ORDER_WINDOW_VECTORS
    for k, precisions in ((8, ("fp16", "bf16", "fp32")), (4, ("tf32", "fp32"))):
        values = rng.standard_normal(a.nnz).astype(np.float32)
        fmt = MEBCRS.from_csr(a.indptr, a.indices, values, n_cols=900, k=k, device="cuda")
        for precision in precisions:
            # segments longest first, then by column (the long-row order, forced on this small
            # matrix)
            for thresholds in (defaults, (0, 0)):
                segments.COLUMN_ORDER_MIN_VECTORS, segments.COLUMN_ORDER_WINDOW_VECTORS = thresholds
                for n in (
                    7,
                    8,
                    16,
                    64,
                    160,
                ):  # 1, 1, 1, 2 and 4 warps per staged SpMM segment; K <= 16 short chunks
                    x = torch.randn(900, n, device="cuda", requires_grad=True)
                    v = fmt.values.clone().requires_grad_()
                    ops.spmm(fmt, x, precision, values=v).sum().backward()
                    s = ops.sddmm(
                        fmt,
                        torch.randn(61, n, device="cuda"),
                        torch.randn(900, n, device="cuda"),
                        precision,
                    )
                    ops.edge_softmax(fmt, s.requires_grad_()).pow(2).sum().backward()
            segments.COLUMN_ORDER_MIN_VECTORS, segments.COLUMN_ORDER_WINDOW_VECTORS = defaults
            if precision == "fp32":
                # every variant of the CUDA-core kernel, and its tf32 form
                for variant in VARIANTS:
                    for n, p in ((7, "fp32"), (64, "fp32"), (160, "tf32")):
                        x = torch.randn(900, n, device="cuda")
                        spmm_fp32(
                            fmt.row_ptr,
                            fmt.col_idx,
                            fmt.vec_mask,
                            fmt.values,
                            x,
                            61,
                            k,
                            seg_vectors=64,
                            variant=variant,
                            precision=p,
                        )
                # every layout of the rows SDDMM, fp32 and tf32; the lane-per-vector SDDMM (K = 32,
                # x not 16-byte aligned), walking set bits or stepping rows
                for n in (16, 32, 64, 128, 256):
                    for p in ("fp32", "tf32"):
                        sddmm_cuda_cores(
                            fmt.row_ptr,
                            fmt.col_idx,
                            fmt.vec_mask,
                            torch.randn(61, n, device="cuda"),
                            torch.randn(900, n, device="cuda"),
                            k,
                            p,
                        )
                for walk in (True, False):
                    sddmm_cuda_cores(
                        fmt.row_ptr,
                        fmt.col_idx,
                        fmt.vec_mask,
                        torch.randn(61 * 32 + 1, device="cuda")[1:].view(61, 32),
                        torch.randn(900, 32, device="cuda"),
                        k,
                        walk=walk,
                    )
                continue
            for n, features, fuse, ways in [
                (64, 4, 0, 1),
                (64, 8, 2, 2),
                (160, 8, 64, 1),
                (32, 4, 64, 4),
                (16, 2, 64, 2),
                (7, 2, 0, 1),
            ]:
                x = torch.randn(900, n, device="cuda")
                spmm_tensor_core(
                    fmt.row_ptr,
                    fmt.col_idx,
                    fmt.vec_mask,
                    fmt.values,
                    x,
                    61,
                    k,
                    precision,
                    torch.float32,
                    seg_vectors=64,
                    fuse_max_parts=fuse,
                    features=features,
                    ways=ways,
                )
    # AGNN (row normalisation, scaled softmax) and GAT: square, with a hub row split over segments
    rows = np.concatenate([rng.integers(0, 300, 1000), np.full(1000, 3)])
    sq = sp.csr_matrix((np.ones(2000), (rows, rng.integers(0, 300, 2000))), shape=(300, 300))
    sq.sum_duplicates()
    sq.sort_indices()
    for k, precision in ((8, "fp16"), (4, "tf32"), (8, "fp32")):
        adj = MEBCRS.from_csr(sq.indptr, sq.indices, n_cols=300, k=k, device="cuda")
        x = torch.randn(300, 33, device="cuda")
        x[7] = 0.0
        beta = torch.tensor([0.8], device="cuda", requires_grad=True)
        ops.agnn_propagate(adj, x.requires_grad_(), beta, precision).sum().backward()
        # GAT (scores formed in the softmax kernels): P^T moved (attention dropout) or computed
        terms = torch.randn(300, 2, device="cuda", requires_grad=True)
        for drop in (0.3, 0.0):
            ops.gat_attention(
                adj, x, terms[:, :1], terms[:, 1:], 0.2, drop, precision
            ).sum().backward()
    # graph convolution under autocast: the fp32 bias added by cuBLAS; its gradient and the 16-bit
    # output gradient from the column-sums kernel (several blocks; idle column lanes, two column
    # groups)
    adj = MEBCRS.from_csr(sq.indptr, sq.indices, n_cols=300, device="cuda")
    for f_in, f_out in ((33, 40), (20, 300)):
        shapes = ((300, f_in), (f_in, f_out), (f_out,))
        leaves = [torch.randn(*shape, device="cuda", requires_grad=True) for shape in shapes]
        with torch.autocast("cuda", dtype=torch.float16):
            out = ops.graph_conv(adj, *leaves, "fp16")
        out.sum().backward()
    # both layers' ops replayed from CUDA graphs (ops.replay): eager, captured, then replayed
    gcn_replay, agnn_replay = NodeReplay(True), NodeReplay(True)
    leaves = [
        torch.randn(*shape, device="cuda", requires_grad=True)
        for shape in ((300, 33), (33, 40), (40,))
    ]
    x = torch.randn(300, 33, device="cuda", requires_grad=True)
    beta = torch.tensor([0.8], device="cuda", requires_grad=True)
    for _ in range(4):
        with torch.autocast("cuda", dtype=torch.float16):
            out = ops.graph_conv(adj, *leaves, "fp16", replay=gcn_replay)
        out.sum().backward()
        ops.agnn_propagate(adj, x, beta, "fp16", replay=agnn_replay).sum().backward()
    assert gcn_replay.graphs()[1] >= 1 and agnn_replay.graphs()[1] >= 1  # both passes replayed
    # GAT's score terms: several blocks per head in the backward, a last warp of a head not full
    for dtype, terms_per_head, f_dim in ((torch.float16, 2, 33), (torch.float32, 1, 7)):
        attn = torch.randn(3, terms_per_head, f_dim, device="cuda")
        ft = torch.randn(3 * 2500, f_dim, device="cuda", dtype=dtype, requires_grad=True)
        score_terms(ft, attn.requires_grad_()).sum().backward()
    fmt16 = MEBCRS.from_csr(a.indptr, a.indices, n_cols=900, device="cuda", vector=16)
    for n in (7, 64):
        ops.spmm(fmt16, torch.randn(900, n, device="cuda"), "fp16")
        ops.sddmm(
            fmt16, torch.randn(61, n, device="cuda"), torch.randn(900, n, device="cuda"), "fp16"
        )
    torch.cuda.synchronize()
    print("sanitizer case done")


if __name__ == "__main__":
    main()
