"""Tuning sweep of the tensor-core SpMM's work split on the GPU: segment length x runs per
segment (``ways``) x in-kernel summing of split windows (``fuse_max_parts``, 0 = every split
window summed by the separate spmm_reduce launch) x features per lane, against fp32 cuSPARSE,
with the benchmark timer of ``flashgnn bench kernels`` (median of CUDA-event times, cold L2). At
one segment length and run count every variant must return the same bits (fusing changes who
sums, never the order of the sum); a mismatch is printed and makes the exit status 1. Also times
an empty kernel: the floor of any one-launch op under this timer.

    python benchmarks/spmm_sweep.py --graphs citeseer,twitch_DE --sizes 32,128 \\
        --precisions fp16,tf32 --seg 64,128 --ways 1,2 --fuse 0,16 --features 4,8 [--csv out.csv]
"""
import argparse
import sys

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

from flashgnn._cuda.spmm import spmm_tensor_core
from flashgnn.benchmarking import table
from flashgnn.benchmarking.graphs import DEFAULT_CACHE_DIR, data_dir, load_graph, resolve_names
from flashgnn.benchmarking.kernels import STORAGE, block_width
from flashgnn.benchmarking.timing import KERNEL_HEAD_START, Timer
from flashgnn.format import MEBCRS


def ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="real")
    p.add_argument("--sizes", default="32,128")
    p.add_argument("--precisions", default="fp16,tf32")
    p.add_argument("--seg", default="0", help="segment lengths in vectors; 0 = the tuned default")
    p.add_argument("--fuse", default="0,16", help="fuse_max_parts values")
    p.add_argument("--features", default="0", help="features per lane and vector (4, 8); 0 = the default")
    p.add_argument("--ways", default="0", help="runs each segment's vectors are cut into (1, 2, 4); 0 = the default")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--csv", default=None)
    args = p.parse_args()
    device = torch.device("cuda")
    timer = Timer(device, warmup=5, iters=args.iters, head_start=KERNEL_HEAD_START)
    root = data_dir()
    floor = timer(lambda: torch.cuda._sleep(0)).ms
    print(f"empty kernel under the timer: {floor * 1e3:.1f} us", flush=True)
    rows, mismatches = [], 0
    for name in resolve_names(args.graphs, root):
        g = load_graph(name, root, 1, DEFAULT_CACHE_DIR)
        gen = torch.Generator(device).manual_seed(0)
        indptr = torch.from_numpy(g.indptr).to(device)
        indices = torch.from_numpy(g.indices).to(device)
        values = torch.rand(g.nnz, generator=gen, device=device) + 0.5
        csr = torch.sparse_csr_tensor(indptr.to(torch.int32), indices, values, (g.num_nodes, g.num_nodes))
        formats = {}
        for n in ints(args.sizes):
            x = torch.randn(g.num_nodes, n, generator=gen, device=device)
            base = timer(lambda: torch.sparse.mm(csr, x)).ms
            for precision in args.precisions.split(","):
                k = block_width(precision)
                if k not in formats:
                    formats[k] = MEBCRS.from_csr(indptr, indices, values, n_cols=g.num_nodes, k=k, device=device)
                a = formats[k]
                xs = x.to(STORAGE[precision])
                for seg, ways in [(s_, w_) for s_ in ints(args.seg) for w_ in ints(args.ways)]:
                    first = None  # another segment length or way count sums in another order
                    for fuse, features in [(f, lf) for f in ints(args.fuse) for lf in ints(args.features)]:
                        def call():
                            return spmm_tensor_core(a.row_ptr, a.col_idx, a.vec_mask, a.values, xs, a.n_rows, k,
                                                    precision, xs.dtype, seg_vectors=seg or None,
                                                    fuse_max_parts=fuse, features=features or None,
                                                    ways=ways or None)
                        m = timer(call)
                        same = first is None or torch.equal(m.result, first)
                        first = m.result if first is None else first
                        mismatches += not same
                        row = [g.name, g.nnz, n, precision, seg or "default", ways or "default", fuse,
                               features or "default",
                               f"{m.ms * 1e3:.1f}", f"{base * 1e3:.1f}", f"{base / m.ms:.2f}",
                               "" if same else "MISMATCH"]
                        rows.append(row)
                        print("  ".join(map(str, row)), flush=True)
    header = ["graph", "nnz", "N", "precision", "seg", "ways", "fuse", "features", "us", "cusparse us", "x", "bits"]
    if args.csv:
        with open(args.csv, "w") as f:
            f.write(",".join(header) + "\n")
            f.writelines(",".join(map(str, r)) + "\n" for r in rows)
    # geomean of x per (N, precision, seg, ways, fuse, features) over the graphs
    keys = {}
    for r in rows:
        keys.setdefault(tuple(r[2:8]), []).append(float(r[10]))
    summary = [[*map(str, k), str(len(v)), f"{table.geomean(v):.2f}"] for k, v in keys.items()]
    print(table.text_table(["N", "precision", "seg", "ways", "fuse", "features", "graphs", "geomean x"], summary))
    print(f"empty kernel: {floor * 1e3:.1f} us; bit mismatches: {mismatches}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
