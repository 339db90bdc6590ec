"""Segment order of the SpMM and SDDMM on the GPU: longest first against by column (the order
``flashgnn._cuda.segments`` picks for large graphs of long rows), forced on every graph, timed
as ``flashgnn bench kernels`` times (median of CUDA-event times, cold L2), against cuSPARSE
(``torch.sparse.mm`` / ``sampled_addmm``, fp32). Both orders must give the same bits; a
mismatch is printed and makes the exit status 1. ``--generated NODES:EDGES,...`` adds symmetric
power-law graphs (exponent 3.5, generated once into the cache folder).

    python benchmarks/segment_order.py --graphs powerlaw_reddit --generated 960000:84000000 \\
        --sizes 128 --ops spmm,sddmm --precisions fp16,tf32
"""

import argparse
import sys

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

from flashgnn._cuda import segments
from flashgnn._cuda.sddmm import sddmm_tensor_core
from flashgnn._cuda.spmm import spmm_tensor_core
from flashgnn.benchmarking.graphs import (
    DEFAULT_CACHE_DIR,
    GENERATED,
    GeneratedSpec,
    data_dir,
    load_graph,
)
from flashgnn.benchmarking.timing import KERNEL_HEAD_START, Timer
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.precision_context import block_width

ORDERS = {"longest first": 1 << 62, "by column": 0}  # COLUMN_ORDER_MIN_VECTORS forcing each order


def baseline(op: str, csr: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (
        torch.sparse.mm(csr, x)
        if op == "spmm"
        else torch.sparse.sampled_addmm(csr, x, x.t(), beta=0.0)
    )


def ours(op: str, a: MEBCRS, x: torch.Tensor, precision: str) -> torch.Tensor:
    if op == "spmm":
        return spmm_tensor_core(
            a.row_ptr, a.col_idx, a.vec_mask, a.values, x, a.n_rows, a.k, precision, torch.float32
        )
    return sddmm_tensor_core(a.row_ptr, a.col_idx, a.vec_mask, x, x, a.k, precision)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--graphs", default="powerlaw_reddit", help="comma list of graph names ('' for none)"
    )
    p.add_argument("--generated", default="", help="comma list of NODES:EDGES power-law graphs")
    p.add_argument("--sizes", default="128")
    p.add_argument("--ops", default="spmm,sddmm")
    p.add_argument("--precisions", default="fp16,tf32")
    p.add_argument("--iters", type=int, default=15)
    args = p.parse_args()
    names = [n for n in args.graphs.split(",") if n]
    for spec in filter(None, args.generated.split(",")):
        nodes, edges = (int(v) for v in spec.split(":"))
        GENERATED[f"powerlaw_{nodes}_{edges}"] = GeneratedSpec(
            nodes, edges, 3.5, "a long-row graph"
        )
        names.append(f"powerlaw_{nodes}_{edges}")
    device = torch.device("cuda")
    timer = Timer(device, warmup=3, iters=args.iters, head_start=KERNEL_HEAD_START)
    segments.COLUMN_ORDER_WINDOW_VECTORS = 0
    mismatches = 0
    print(
        f"{'graph':28} {'vec/win':>7} {'op':5} {'prec':5} {'N':>4} {'cuSPARSE ms':>11} "
        + " ".join(f"{o + ' ms':>16}" for o in ORDERS),
        flush=True,
    )
    for name in names:
        g = load_graph(name, data_dir(), 1, DEFAULT_CACHE_DIR)
        indptr, indices = (
            torch.from_numpy(g.indptr).to(device),
            torch.from_numpy(g.indices).to(device),
        )
        values = torch.rand(g.nnz, device=device) + 0.5
        csr = torch.sparse_csr_tensor(
            indptr.to(torch.int32), indices.to(torch.int32), values, (g.num_nodes, g.num_nodes)
        )
        for precision in args.precisions.split(","):
            k = block_width(precision)
            a = MEBCRS.from_csr(indptr, indices, values, n_cols=g.num_nodes, k=k, device=device)
            per_window = a.n_vectors / max(a.row_ptr.numel() - 1, 1)
            for op in args.ops.split(","):
                for n in (int(v) for v in args.sizes.split(",")):
                    x = torch.randn(g.num_nodes, n, device=device)
                    base = timer(lambda: baseline(op, csr, x)).ms
                    results = []
                    for threshold in ORDERS.values():
                        segments.COLUMN_ORDER_MIN_VECTORS = threshold
                        results.append(timer(lambda: ours(op, a, x, precision)))
                    if not torch.equal(results[0].result, results[1].result):
                        mismatches += 1
                        print(
                            f"MISMATCH {name} {op} {precision} {n}: the orders gave different bits"
                        )
                    print(
                        f"{name:28} {per_window:7.0f} {op:5} {precision:5} {n:4d} {base:11.3f} "
                        + " ".join(f"{m.ms:8.3f} ({base / m.ms:4.2f}x)" for m in results),
                        flush=True,
                    )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
