"""Tuning sweep of the SpMM's work split on the GPU, against fp32 cuSPARSE, with a timer of
``flashgnn bench kernels`` (``--timer cold``: median of single calls on a cold L2, the default;
``back-to-back``: per call over CUDA-graph replays of many calls in a row). Tensor cores (fp16,
bf16, tf32): segment length x runs per segment (``ways``) x in-kernel summing of split windows
(``fuse_max_parts``, 0 = every split window summed by the separate spmm_reduce launch) x
features per lane; at one segment length and run count every variant must return the same
bits (fusing changes who sums, never the order of the sum); a mismatch is printed and makes the
exit status 1. The fp32 CUDA-core kernel: segment length x lanes per vector (``--lanes``; the
sum order differs between lane counts, so its bits are not compared). Also times an empty
kernel: the floor of any one-launch op under the timer.

    python benchmarks/spmm_sweep.py --graphs citeseer,twitch_DE --sizes 32,128 \\
        --precisions fp16,tf32 --seg 64,128 --ways 1,2 --fuse 0,16 --features 4,8 [--csv out.csv]
    python benchmarks/spmm_sweep.py --precisions fp32 --sizes 32,128,256 --seg 0,64 --lanes 0,16
"""

import argparse
import sys

import common  # puts the checkout on sys.path
import torch

from flashgnn._cuda.spmm import FUSE_MAX_PARTS, spmm_tensor_core
from flashgnn._cuda.spmm_fp32 import spmm_fp32
from flashgnn._torch_private import gpu_sleep
from flashgnn.benchmarking import table
from flashgnn.benchmarking.graphs import DEFAULT_CACHE_DIR, data_dir, load_graph, resolve_names
from flashgnn.benchmarking.kernels import STORAGE
from flashgnn.benchmarking.timing import TIMERS, kernel_timer
from flashgnn.precision_context import block_width


def ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def variants(a, xs, k: int, precision: str, args):
    """(seg, ways or lanes, fuse, features, call) of every configuration to time."""
    if precision == "fp32":
        for seg, lanes in [(s_, l_) for s_ in ints(args.seg) for l_ in ints(args.lanes)]:
            yield (
                seg,
                lanes,
                "-",
                "-",
                lambda seg=seg, lanes=lanes: spmm_fp32(
                    a.row_ptr,
                    a.col_idx,
                    a.vec_mask,
                    a.values,
                    xs,
                    a.n_rows,
                    k,
                    seg_vectors=seg or None,
                    lanes=lanes or None,
                ),
            )
        return
    for seg, ways, fuse, features in [
        (s_, w_, f_, lf)
        for s_ in ints(args.seg)
        for w_ in ints(args.ways)
        for f_ in ints(args.fuse)
        for lf in ints(args.features)
    ]:
        yield (
            seg,
            ways,
            fuse,
            features,
            lambda seg=seg, ways=ways, fuse=fuse, features=features: spmm_tensor_core(
                a.row_ptr,
                a.col_idx,
                a.vec_mask,
                a.values,
                xs,
                a.n_rows,
                k,
                precision,
                xs.dtype,
                seg_vectors=seg or None,
                fuse_max_parts=fuse,
                features=features or None,
                ways=ways or None,
            ),
        )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--graphs", default="real")
    p.add_argument("--sizes", default="32,128")
    p.add_argument("--precisions", default="fp16,tf32")
    p.add_argument("--seg", default="0", help="segment lengths in vectors; 0 = the tuned default")
    p.add_argument(
        "--fuse",
        default=str(FUSE_MAX_PARTS),
        help="fuse_max_parts values (default: the launcher's)",
    )
    p.add_argument(
        "--features", default="0", help="features per lane and vector (4, 8); 0 = the default"
    )
    p.add_argument(
        "--ways",
        default="0",
        help="runs each segment's vectors are cut into (1, 2, 4); 0 = the default",
    )
    p.add_argument("--lanes", default="0", help="fp32: lanes per vector (1 to 32); 0 = the default")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--timer", choices=TIMERS, default="cold")
    p.add_argument("--csv", default=None)
    args = p.parse_args()
    device = torch.device("cuda")
    timer = kernel_timer(args.timer, device, warmup=5, iters=args.iters)
    root = data_dir()
    floor = timer(lambda: gpu_sleep(0)).ms
    print(f"empty kernel under the timer: {floor * 1e3:.1f} us", flush=True)
    rows, mismatches, first = [], 0, {}
    for name in resolve_names(args.graphs, root):
        g = load_graph(name, root, 1, DEFAULT_CACHE_DIR)
        operands = common.graph_operands(g, device)
        csr, gen, mebcrs = operands.csr, operands.gen, common.mebcrs_by_width(operands)
        for n in ints(args.sizes):
            x = torch.randn(g.num_nodes, n, generator=gen, device=device)
            base = timer(lambda: torch.sparse.mm(csr, x)).ms
            for precision in args.precisions.split(","):
                k = block_width(precision)
                a = mebcrs(k)
                xs = x.to(STORAGE[precision])
                for seg, ways, fuse, features, call in variants(a, xs, k, precision, args):
                    m = timer(call)
                    key = (seg, ways)  # fp32: each variant sums in its own order
                    same = (
                        precision == "fp32" or key not in first or torch.equal(m.result, first[key])
                    )
                    first.setdefault(key, m.result)
                    mismatches += not same
                    row = [
                        g.name,
                        g.nnz,
                        n,
                        precision,
                        seg or "default",
                        ways or "default",
                        fuse,
                        features or "default",
                        f"{m.ms * 1e3:.1f}",
                        f"{base * 1e3:.1f}",
                        f"{base / m.ms:.2f}",
                        "" if same else "MISMATCH",
                    ]
                    rows.append(row)
                    print("  ".join(map(str, row)), flush=True)
                first.clear()
    header = [
        "graph",
        "nnz",
        "N",
        "precision",
        "seg",
        "ways|lanes",
        "fuse",
        "features",
        "us",
        "cusparse us",
        "x",
        "bits",
    ]  # fp32 rows: lanes per vector, no fuse or features
    if args.csv:
        with open(args.csv, "w") as f:
            f.write(",".join(header) + "\n")
            f.writelines(",".join(map(str, r)) + "\n" for r in rows)
    # geomean of x per (N, precision, seg, ways, fuse, features) over the graphs
    keys = {}
    for r in rows:
        keys.setdefault(tuple(r[2:8]), []).append(float(r[10]))
    summary = [[*map(str, k), str(len(v)), f"{table.geomean(v):.2f}"] for k, v in keys.items()]
    print(
        table.text_table(
            ["N", "precision", "seg", "ways|lanes", "fuse", "features", "graphs", "geomean x"],
            summary,
        )
    )
    print(f"empty kernel: {floor * 1e3:.1f} us; bit mismatches: {mismatches}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
