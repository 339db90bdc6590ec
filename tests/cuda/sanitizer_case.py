"""Small GPU cases for compute-sanitizer, one per kernel family (a script, not a pytest module):

    CASE="python tests/cuda/sanitizer_case.py"  # every case; or name some: $CASE cvse hbell
    compute-sanitizer --tool memcheck $CASE
    compute-sanitizer --tool racecheck $CASE
    compute-sanitizer --tool initcheck $CASE

The mebcrs and hbell cases run under memcheck with ``--report-api-errors no``. Cases: mebcrs,
cvse, hbell, tca_gcoo, sparse_linear, gcn_epilogue, hybrid and agnn_one_pass, each function's
docstring saying what it runs. Most run on ``hub_matrix``, whose hub row splits its window or
strip over segments.
"""

import argparse
import os
import sys

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from flashgnn import MEBCRS, ops  # noqa: E402
from flashgnn._cuda import hybrid, segments  # noqa: E402
from flashgnn._cuda.gcoo import FEATURES, gcoo_spmm_cuda  # noqa: E402
from flashgnn._cuda.sddmm import sddmm_cuda_cores  # noqa: E402
from flashgnn._cuda.sparse_linear import (  # noqa: E402
    TOKEN_TILES,
    WINDOW_SHAPES,
    Variant,
    sparse_linear_cuda,
)
from flashgnn._cuda.spmm import spmm_tensor_core  # noqa: E402
from flashgnn._cuda.spmm_fp32 import VARIANTS, spmm_fp32  # noqa: E402
from flashgnn.formats import CVSE, GCOO, HBELL, TCACSR  # noqa: E402
from flashgnn.formats.gcoo import GROUPS  # noqa: E402
from flashgnn.nn import SparseLinear  # noqa: E402
from flashgnn.ops import agnn_one_pass as agnn_one_pass_ops  # noqa: E402
from flashgnn.ops import epilogue as epi  # noqa: E402
from flashgnn.ops.replay import NodeReplay  # noqa: E402
from flashgnn.ops.score_terms import score_terms  # noqa: E402
from tests.cuda.test_hbell_gpu import clustered_109x79  # noqa: E402


def hub_matrix(rng: np.random.Generator, empty_rows: tuple[int, ...] = ()) -> sp.csr_matrix:
    """61 x 900, canonical, ones: 300 scattered nonzeros and a hub row (3) of about 700, the
    rows ``empty_rows`` left empty."""
    rows = np.concatenate([rng.integers(0, 61, 300), np.full(700, 3)])
    rows = rows[~np.isin(rows, empty_rows)]
    a = sp.csr_matrix(
        (np.ones(rows.size), (rows, rng.integers(0, 900, rows.size))), shape=(61, 900)
    )
    a.sum_duplicates()
    a.sort_indices()
    return a


def mebcrs() -> None:
    """Every ME-BCRS op forward and backward in every precision, and the 16x1 baseline's
    forward ops. On ``hub_matrix``, split windows run too: summed in the SpMM kernel, by the
    reduction launch, and both in one call, with 4 and 8 features per lane, each segment taken
    by one warp or split 2 or 4 ways; the fp32 SpMM in each of its variants, fp32 and tf32, and
    the lane-per-vector fp32 SDDMM on both paths; SpMM and SDDMM with their segments in both
    orders (longest first, and by column as on long-row graphs). Then AGNN and GAT on a square
    matrix with a hub row; graph convolution's fp16 backward (the column-sums kernel); graph
    convolution, AGNN and GAT (with and without attention dropout) replayed from CUDA graphs;
    GAT's score terms."""
    rng = np.random.default_rng(1)
    a = hub_matrix(rng)
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
    # the layers' ops replayed from CUDA graphs (ops.replay): eager, captured, then replayed
    gcn_replay, agnn_replay = NodeReplay(True), NodeReplay(True)
    gat_replays = {drop: NodeReplay(True) for drop in (0.3, 0.0)}
    terms = torch.randn(300, 2, device="cuda", requires_grad=True)
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
        for drop, gat_replay in gat_replays.items():
            ft = x.half()
            ops.gat_attention(
                adj, ft, terms[:, :1], terms[:, 1:], 0.2, drop, "fp16", replay=gat_replay
            ).sum().backward()
    # both passes replayed
    for replay in (gcn_replay, agnn_replay, *gat_replays.values()):
        assert replay.graphs()[1] >= 1
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


def cvse() -> None:
    """kernels/cvse.cu on ``hub_matrix`` (the last strip partial), for every V and precision:
    the SpMM forward and backward (SDDMM for dvalues, the SpMM of A^T for dX) at N = 7 and 100
    (both tile counts, tails, checked loads) and at N = 64 and 256 on aligned rows (vector
    loads; every fp32 lane width), and the SDDMM forward and backward at K = 7 and 40."""
    rng = np.random.default_rng(1)
    a = hub_matrix(rng)
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


def hbell() -> None:
    """HB-ELL's SpMM in every precision on a 109 x 79 matrix with dense blocks (one the corner
    block that reaches past the last row and column), ELL blocks and scattered nonzeros; N runs
    through widths that are and are not multiples of 8 (the kernels' aligned and checked paths,
    4 and 8 features per lane). Then a matrix of dense blocks only and one of ELL blocks only
    (each path alone), custom values, and an output dtype of each kind."""
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


def tca_gcoo() -> None:
    """TCA's and GCOO's SpMM on ``hub_matrix`` with empty rows: the hub row takes 11 TCA chunks
    and ROW_WARPS_MAX warps, and splits a GCOO strip into segments summed by gcoo_reduce; the
    last strip is shorter than the others. TCA runs fp16, bf16 and tf32 into each output type;
    GCOO every strip height, 1, 2 and 4 features per lane, fp32 and tf32, default and short
    segments; N of 1, 5, 36 (tails of a tile), 64 and 160."""
    rng = np.random.default_rng(1)
    a = hub_matrix(rng, empty_rows=(10, 11))
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


def sparse_linear() -> None:
    """kernels/sparse_linear.cu: every token tile of the chunk kernel (16, 32, 64 tokens a
    block) and every shape of the window kernel, V = 2, 4, 8, fp16 and bf16, with tails
    everywhere: tokens, input features (several chunks and a partial one) and outputs (a short
    last strip, more than one strip group) not multiples of anything; one layer forward and
    backward through SparseLinear."""
    torch.manual_seed(0)
    variants = [Variant("chunk", mt) for mt in TOKEN_TILES] + [
        Variant("window", shape=shape, list_vectors=1) for shape in WINDOW_SHAPES
    ]
    for vector, n_in, n_out in ((8, 530, 517), (4, 300, 259), (2, 70, 131)):
        layer = SparseLinear(n_in, n_out, sparsity=0.8, vector=vector).cuda()
        for precision in ("fp16", "bf16"):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                x = torch.randn(45, n_in, device="cuda", dtype=dtype)
                for variant in variants:
                    sparse_linear_cuda(
                        x,
                        layer.values.detach(),
                        layer.bias.detach(),
                        layer.row_ptr,
                        layer.col_idx,
                        n_out,
                        vector,
                        precision,
                        variant=variant,
                    )
    layer = SparseLinear(200, 90, sparsity=0.9, vector=8, precision="fp16").cuda()
    x = torch.randn(1100, 200, device="cuda", requires_grad=True)  # the kernel's token count
    layer(x).square().sum().backward()


def gcn_epilogue() -> None:
    """kernels/epilogue.cu: the forward from and to every type (bias, ReLU, dropout), its
    backward, on 77 x 45 (no multiple of anything) and an empty matrix; graph_conv with the
    epilogue forward and backward on ``hub_matrix``, aggregating first and projecting first."""
    torch.manual_seed(0)
    key = torch.tensor([5, 6], device="cuda")
    types = (torch.float16, torch.bfloat16, torch.float32)
    for rows in (77, 0):
        for y_dtype in types:
            for out_dtype in types:
                y = torch.randn(rows, 45, device="cuda").to(y_dtype)
                ep = epi.Epilogue(True, 0.3, key, 2, out_dtype)
                out = epi.apply(y, torch.randn(45, device="cuda"), ep)
                epi.backward(torch.ones_like(out), out, ep, None, torch.float32)
    hub = hub_matrix(np.random.default_rng(0))
    values = hub.data.astype(np.float32)
    a = MEBCRS.from_csr(hub.indptr, hub.indices, values, n_cols=900, k=8, device="cuda")
    for f_in, f_out in ((5, 9), (9, 5)):
        feat = torch.randn(a.n_cols, f_in, device="cuda", requires_grad=True)
        weight = torch.randn(f_in, f_out, device="cuda", requires_grad=True)
        bias = torch.randn(f_out, device="cuda", requires_grad=True)
        with torch.autocast("cuda", dtype=torch.float16):
            ep = epi.Epilogue(True, 0.5, key, 0, torch.float16)
            out = ops.graph_conv(a, feat, weight, bias, "fp16", epilogue=ep)
        out.float().square().sum().backward()


def hybrid_spmm() -> None:
    """The hybrid SpMM (sparse windows on CUDA cores, kernels/spmm_hybrid.cu) on ``hub_matrix``
    with an empty window and a window of full vectors (rows 48..55 on columns 0..19), at
    thresholds 2 (the full window on tensor cores, the rest, the hub's window split over
    segments and reduced, on CUDA cores) and infinity (CUDA cores only), fp16, bf16 and tf32,
    output in the storage type and fp32, N = 7 (one feature per lane) and 32, and x
    misaligned for vector loads."""
    rng = np.random.default_rng(7)
    a = hub_matrix(rng, empty_rows=(8, 9, 10, 11, 12, 13, 14, 15, 40))
    full = sp.csr_matrix(
        (np.ones(160), (np.repeat(np.arange(48, 56), 20), np.tile(np.arange(20), 8))),
        shape=a.shape,
    )
    a = (a + full).tocsr()
    a.sum_duplicates()
    a.sort_indices()
    storage = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}
    try:
        for below in (2.0, float("inf")):
            hybrid.forced_below = below
            for precision, dtype in storage.items():
                k = 4 if precision == "tf32" else 8
                f = MEBCRS.from_csr(
                    a.indptr, a.indices, torch.from_numpy(a.data).float(), n_cols=900, k=k
                ).to("cuda")
                for n in (7, 32):
                    x = torch.randn(900, n, device="cuda").to(dtype)
                    for out_fp32 in (False, True):
                        ops.spmm(f, x, precision, out_fp32=out_fp32)
                skewed = torch.randn(900 * 32 + 1, device="cuda").to(dtype)[1:].view(900, 32)
                ops.spmm(f, skewed, precision)
    finally:
        hybrid.forced_below = hybrid.from_environment()


def agnn_one_pass() -> None:
    """kernels/agnn_one_pass.cu: AGNN's one-pass forward (and the backward that recomputes P) in
    every precision and output type, at 1, 7, 33 and 130 features (1, 2 and 4 features per lane,
    two chunks), on ``hub_matrix`` with and without empty rows: its hub window is split over
    segments, which the combine kernel merges."""
    agnn_one_pass_ops.ONE_PASS = True
    try:
        for empty_rows in ((), (0, 5, 60)):
            hub = hub_matrix(np.random.default_rng(2), empty_rows)
            for k, precisions in ((8, ("fp16", "bf16", "fp32")), (4, ("tf32",))):
                a = MEBCRS.from_csr(hub.indptr, hub.indices, n_cols=900, k=k, device="cuda")
                for precision in precisions:
                    for n, dtype in ((1, torch.float32), (7, torch.float16), (33, torch.bfloat16),
                                     (130, torch.float32)):  # fmt: skip
                        feat = torch.randn(900, n, device="cuda").to(dtype).requires_grad_()
                        beta = torch.tensor([0.8], device="cuda", requires_grad=True)
                        out = ops.agnn_propagate(a, feat, beta, precision)
                        out.float().square().sum().backward()
    finally:
        agnn_one_pass_ops.ONE_PASS = None


CASES = {
    "hybrid" if f is hybrid_spmm else f.__name__: f
    for f in (
        mebcrs,
        cvse,
        hbell,
        tca_gcoo,
        sparse_linear,
        gcn_epilogue,
        hybrid_spmm,
        agnn_one_pass,
    )
}


def main() -> None:
    parser = argparse.ArgumentParser(description="GPU cases to run under compute-sanitizer.")
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"of {', '.join(CASES)} (all)")
    names = parser.parse_args().cases or list(CASES)
    unknown = [name for name in names if name not in CASES]
    if unknown:
        parser.error(f"unknown case {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    for name in names:
        CASES[name]()
        torch.cuda.synchronize()
        print(f"{name} sanitizer case done")


if __name__ == "__main__":
    main()
