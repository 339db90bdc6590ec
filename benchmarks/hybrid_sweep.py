"""Sweep of the hybrid SpMM's threshold (flashgnn/_cuda/hybrid.py) on the GPU: for each graph,
fp16 SpMM (and any other --precisions) at N = 128 and 32 with windows of fewer than T nonzeros
per vector on CUDA cores, T in --thresholds ("off" = every window on tensor cores, "inf" =
every window on CUDA cores), against fp32 cuSPARSE (torch.sparse.mm on a CSR tensor) in the
same run. Kernel time: torch.profiler's sum of the kernels one call launches (the hybrid's
two launches, and any reduction, all count), median of --iters calls. Prints a table per
graph, the geometric mean speedup over cuSPARSE per threshold, and writes every row to --out
(CSV). Each result is checked against the all-tensor-core one (relative error <= 2e-3, the
fp16 bound; bf16 1e-2); a failure is printed and makes the exit status 1. The fastest
threshold per N is what hybrid.SPARSE_BELOW takes.

    python benchmarks/hybrid_sweep.py --graphs real,generated --out hybrid_sweep.csv
    python benchmarks/hybrid_sweep.py --graphs citeseer,powerlaw_products --sizes 128 \\
        --thresholds off,1.5,2 --precisions fp16,bf16 --out sweep.csv
"""

import argparse
import csv
import math
import sys

import common  # puts the checkout on sys.path
import torch

from flashgnn import ops
from flashgnn._cuda import hybrid
from flashgnn.benchmarking import table
from flashgnn.benchmarking.graphs import DEFAULT_CACHE_DIR, data_dir, load_graph, resolve_names
from flashgnn.benchmarking.kernels import STORAGE
from flashgnn.benchmarking.timing import ProfilerTimer
from flashgnn.pattern_nnz import pattern_nnz
from flashgnn.precision_context import block_width

BOUND = {"fp16": 2e-3, "bf16": 1e-2, "tf32": 2e-3}
COLUMNS = [
    "graph",
    "nnz",
    "nnz_per_vector",
    "n",
    "precision",
    "threshold",
    "cuda_core_windows",
    "cuda_core_vectors",
    "us",
    "cusparse_us",
    "speedup",
    "rel_err",
]


def threshold(text: str) -> float:
    """A --thresholds entry: "off" is 0 (every window on tensor cores)."""
    return 0.0 if text == "off" else hybrid.parse_below(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--graphs", default="real,generated", help="names, or real/generated/all")
    p.add_argument("--sizes", default="128,32", help="N, comma-separated")
    p.add_argument("--precisions", default="fp16", help="of fp16, bf16, tf32")
    p.add_argument("--thresholds", default="off,1.5,2,3,4", help='nonzeros per vector; "off"')
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--out", required=True, help="CSV path")
    args = p.parse_args()
    device = torch.device("cuda")
    timer = ProfilerTimer(device, warmup=5, iters=args.iters)
    root = data_dir()
    thresholds = [(t, threshold(t)) for t in args.thresholds.split(",") if t.strip()]
    rows, failures = [], 0
    try:
        for name in resolve_names(args.graphs, root):
            g = load_graph(name, root, 1, DEFAULT_CACHE_DIR)
            operands = common.graph_operands(g, device)
            csr, gen, mebcrs = operands.csr, operands.gen, common.mebcrs_by_width(operands)
            for n in (int(s) for s in args.sizes.split(",")):
                x = torch.randn(g.num_nodes, n, generator=gen, device=device)
                cusparse = timer(lambda: torch.sparse.mm(csr, x)).ms
                for precision in args.precisions.split(","):
                    k = block_width(precision)
                    a = mebcrs(k)
                    per_vector = pattern_nnz(a.vec_mask) / max(a.n_vectors, 1)
                    xs = x.to(STORAGE[precision])
                    first = None
                    for label, below in thresholds:
                        hybrid.forced_below = below
                        m = timer(lambda: ops.spmm(a, xs, precision))
                        split = hybrid.window_split(a.row_ptr, a.vec_mask, below)
                        y = m.result.float()
                        first = y if first is None else first
                        err = ((y - first).norm() / first.norm().clamp_min(1e-30)).item()
                        ok = math.isfinite(err) and err <= BOUND[precision]
                        if not ok:
                            failures += 1
                            print(f"MISMATCH {g.name} N={n} {precision} T={label}: {err:.2e}")
                        windows = 0 if split is None else a.row_ptr.numel() - 1 - split.n_dense
                        rows.append(
                            {
                                "graph": g.name,
                                "nnz": g.nnz,
                                "nnz_per_vector": f"{per_vector:.3f}",
                                "n": n,
                                "precision": precision,
                                "threshold": label,
                                "cuda_core_windows": windows,
                                "cuda_core_vectors": 0 if split is None else split.sparse_vectors,
                                "us": f"{m.ms * 1e3:.1f}",
                                "cusparse_us": f"{cusparse * 1e3:.1f}",
                                "speedup": f"{cusparse / m.ms:.3f}",
                                "rel_err": f"{err:.1e}",
                            }
                        )
                        print(" ".join(f"{c}={rows[-1][c]}" for c in COLUMNS), flush=True)
    finally:
        hybrid.forced_below = hybrid.from_environment()
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(table.text_table(COLUMNS, [[str(r[c]) for c in COLUMNS] for r in rows]))
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["n"], r["precision"], r["threshold"]), []).append(float(r["speedup"]))
    summary = [
        [*map(str, key), str(len(v)), f"{table.geomean(v):.3f}"] for key, v in groups.items()
    ]
    print(
        table.text_table(["n", "precision", "threshold", "graphs", "geomean x cuSPARSE"], summary)
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
