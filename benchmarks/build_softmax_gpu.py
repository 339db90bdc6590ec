"""Time the GPU ME-BCRS builder, the edge softmax kernels and the fp32 SpMM on a generated
ogbn-products-sized power-law graph (2.4M nodes, 60M nonzeros by default).

Builder: nonzeros per second (goal >= 1e9 on a Hopper GPU), beside the sort-based torch
reference (flashgnn.formats.mebcrs.build_pattern) run on the same GPU. Edge softmax: effective GB/s
= bytes a single pass must move (forward: scores in, probabilities out; backward: p and g in,
d out; plus vec_mask) / time. fp32 SpMM: ms and GB/s beside torch.sparse.mm (cuSPARSE, CSR).
Every time is the median of CUDA-event timings of single calls after warm-up, each call
started on an idle GPU (``timing.event_median_ms``).

    python benchmarks/build_softmax_gpu.py [--nodes 2400000] [--nnz 60000000] [--graph graph.npz]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import common  # noqa: F401  (puts the checkout on sys.path)
import numpy as np
import torch

from flashgnn._cuda.edge_softmax import edge_softmax_backward_cuda, edge_softmax_cuda
from flashgnn._cuda.spmm_fp32 import spmm_fp32
from flashgnn.benchmarking.timing import event_median_ms, timed_call
from flashgnn.data.generators import power_law_csr
from flashgnn.formats.mebcrs import build_canonical, build_pattern


def load_graph(args) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the generated graph, read from / written to --graph when given."""
    path = Path(args.graph) if args.graph else None
    if path is not None and path.is_file():
        with np.load(path) as d:
            return d["indptr"], d["indices"]
    (indptr, indices), seconds = timed_call(
        lambda: power_law_csr(args.nodes, args.nnz, exponent=args.exponent, seed=args.seed)
    )
    print(f"generated in {seconds:.1f} s")
    if path is not None:
        np.savez(path, indptr=indptr, indices=indices)
    return indptr, indices


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=2_400_000)
    p.add_argument("--nnz", type=int, default=60_000_000)
    p.add_argument("--exponent", type=float, default=2.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--graph", help="cache of the generated graph (.npz), read when present")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument(
        "--no-reference", action="store_true", help="skip timing the sort-based torch builder"
    )
    p.add_argument(
        "--widths", default="32,128", help="feature widths N of the fp32 SpMM ('' to skip)"
    )
    args = p.parse_args(argv)

    device = torch.device("cuda")
    indptr_np, indices_np = load_graph(args)
    n = indptr_np.size - 1
    indptr = torch.from_numpy(indptr_np.astype(np.int64)).to(device)
    indices = torch.from_numpy(indices_np.astype(np.int64)).to(device)
    nnz = indices.numel()
    values = torch.rand(nnz, device=device) + 0.5
    degree = np.diff(indptr_np)
    print(
        f"{torch.cuda.get_device_name(device)}; graph: {n:,} nodes, {nnz:,} nonzeros, "
        f"max degree {degree.max():,}"
    )

    for k in (8, 4):
        ms = event_median_ms(
            lambda: build_canonical(indptr, indices, values, n, device, k),
            args.warmup,
            args.repeats,
        )
        line = f"builder k={k}: {ms:8.2f} ms  {nnz / ms / 1e6:6.2f} G nonzeros/s"
        if not args.no_reference:
            ref = event_median_ms(lambda: build_pattern(indptr, indices, n, k), 1, 3)
            line += f"   (torch sort-based reference: {ref:8.2f} ms, {ref / ms:5.1f}x slower)"
        print(line)

    a = build_canonical(indptr, indices, values, n, device, 8)
    slots = 8 * a.n_vectors
    print(
        f"ME-BCRS k=8: {a.n_vectors:,} vectors ({nnz / a.n_vectors:.3f} nonzeros per vector), "
        f"{int(torch.diff(a.row_ptr).max()):,} vectors in the longest window"
    )
    scores = torch.randn(slots, device=device)
    grad = torch.randn(slots, device=device)
    probs = edge_softmax_cuda(a.row_ptr, a.vec_mask, scores, a.k)
    out = torch.empty_like(scores)
    for name, fn, bytes_moved in (
        (
            "edge softmax forward ",
            lambda: edge_softmax_cuda(a.row_ptr, a.vec_mask, scores, a.k, out=out),
            8 * slots + a.n_vectors,
        ),
        (
            "edge softmax backward",
            lambda: edge_softmax_backward_cuda(a.row_ptr, a.vec_mask, probs, grad, a.k, out=out),
            12 * slots + a.n_vectors,
        ),
    ):
        ms = event_median_ms(fn, args.warmup, args.repeats)
        print(f"{name}: {ms:8.3f} ms  {bytes_moved / ms / 1e6:7.1f} GB/s")

    widths = [int(w) for w in args.widths.split(",") if w.strip()]
    csr = torch.sparse_csr_tensor(indptr, indices, values, (n, n)) if widths else None
    for width in widths:
        x = torch.randn(n, width, device=device)

        def ours_spmm():
            return spmm_fp32(a.row_ptr, a.col_idx, a.vec_mask, a.values, x, a.n_rows, a.k)

        ours = event_median_ms(ours_spmm, args.warmup, args.repeats)
        theirs = event_median_ms(lambda: torch.sparse.mm(csr, x), args.warmup, args.repeats)
        gathered = 4 * width * (a.n_vectors + n)  # one X row per vector, one Y row per row
        print(
            f"fp32 SpMM N={width:<4}: {ours:8.3f} ms  {gathered / ours / 1e6:7.1f} GB/s   "
            f"torch.sparse.mm: {theirs:8.3f} ms  ({theirs / ours:4.2f}x)"
        )


if __name__ == "__main__":
    main()
