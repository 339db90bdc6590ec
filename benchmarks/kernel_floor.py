"""How fast an ME-BCRS SpMM or SDDMM could be on each graph: the floor kernels of
benchmarks/kernel_floor.cu (each warp reads VECS vectors' columns, masks and a value each,
gathers their dense rows, and stores; no window rows kept apart, no split, no staging: less
than a real kernel must do, on the same format) timed beside fp32 cuSPARSE and flashgnn's
fp16 kernels, with a timer of ``flashgnn bench kernels``. "x" columns are speedups over
cuSPARSE (torch.sparse.mm / torch.sparse.sampled_addmm); "floor x" is the faster of VECS 32
and 64, an estimate of the most a kernel of this chain can reach there.

    python benchmarks/kernel_floor.py --graphs real --sizes 32,128 --timer back-to-back
"""

import argparse
import sys
from pathlib import Path

import common  # puts the checkout on sys.path
import torch
from common import FileSource

from flashgnn._cuda import sddmm as sddmm_launcher
from flashgnn._cuda import spmm as spmm_launcher
from flashgnn._cuda.runtime import launch, ptr
from flashgnn.benchmarking import table
from flashgnn.benchmarking.graphs import DEFAULT_CACHE_DIR, data_dir, load_graph, resolve_names
from flashgnn.benchmarking.timing import TIMERS, kernel_timer
from flashgnn.formats.mebcrs import MEBCRS

SIZES = (32, 128)  # N and K the floors are instantiated for
VECS = (32, 64)  # vectors per warp
SOURCE = FileSource(
    "kernel_floor.cu",
    [f"fg::floor::{op}_floor<{n}, {v}>" for op in ("spmm", "sddmm") for n in SIZES for v in VECS],
    Path(__file__).with_name("kernel_floor.cu"),
)


def _grid(a: MEBCRS, vecs: int) -> tuple[int]:
    warps = -(-a.col_idx.numel() // vecs)
    return (-(-warps // 4),)  # 4 warps per block


def spmm_floor(a: MEBCRS, x: torch.Tensor, vecs: int) -> torch.Tensor:
    out = torch.empty(a.n_rows, x.shape[1], dtype=torch.float16, device=x.device)
    launch(
        SOURCE,
        f"fg::floor::spmm_floor<{x.shape[1]}, {vecs}>",
        x.device,
        _grid(a, vecs),
        (128,),
        ptr(a.col_idx),
        ptr(a.vec_mask),
        ptr(a.values),
        a.col_idx.numel(),
        ptr(x),
        a.n_rows,
        ptr(out),
    )
    return out


def sddmm_floor(a: MEBCRS, x: torch.Tensor, y: torch.Tensor, vecs: int) -> torch.Tensor:
    out = torch.empty(a.col_idx.numel(), dtype=torch.float32, device=x.device)
    launch(
        SOURCE,
        f"fg::floor::sddmm_floor<{x.shape[1]}, {vecs}>",
        x.device,
        _grid(a, vecs),
        (128,),
        ptr(a.col_idx),
        ptr(a.vec_mask),
        a.col_idx.numel(),
        ptr(x),
        ptr(y),
        a.n_rows,
        ptr(out),
    )
    return out


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--graphs", default="real")
    p.add_argument("--sizes", default="32,128", help=f"N and K, from {SIZES}")
    p.add_argument("--ops", default="spmm,sddmm")
    p.add_argument("--timer", choices=TIMERS, default="back-to-back")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not set(sizes) <= set(SIZES):
        raise SystemExit(f"kernel_floor: sizes must be among {SIZES}")
    device = torch.device("cuda")
    timer = kernel_timer(args.timer, device, warmup=5, iters=args.iters)
    rows = []
    for name in resolve_names(args.graphs, data_dir()):
        g = load_graph(name, data_dir(), 1, DEFAULT_CACHE_DIR)
        indptr, indices, values, csr, gen = common.graph_operands(g, device)
        a = MEBCRS.from_csr(indptr, indices, values, n_cols=g.num_nodes, k=8, device=device)
        for op in args.ops.split(","):
            for size in sizes:
                x = torch.randn(g.num_nodes, size, generator=gen, device=device)
                x16 = x.half()
                if op == "spmm":
                    base = timer(lambda: torch.sparse.mm(csr, x)).ms
                    ours = timer(
                        lambda: spmm_launcher.spmm_tensor_core(
                            a.row_ptr,
                            a.col_idx,
                            a.vec_mask,
                            a.values,
                            x16,
                            a.n_rows,
                            8,
                            "fp16",
                            torch.float16,
                        )
                    ).ms
                    floor = min(timer(lambda: spmm_floor(a, x16, v)).ms for v in VECS)
                else:
                    y = torch.randn(g.num_nodes, size, generator=gen, device=device)
                    y16 = y.half()
                    base = timer(lambda: torch.sparse.sampled_addmm(csr, x, y.t(), beta=0.0)).ms
                    ours = timer(
                        lambda: sddmm_launcher.sddmm_tensor_core(
                            a.row_ptr, a.col_idx, a.vec_mask, x16, y16, 8, "fp16"
                        )
                    ).ms
                    floor = min(timer(lambda: sddmm_floor(a, x16, y16, v)).ms for v in VECS)
                rows.append(
                    [
                        name,
                        str(g.nnz),
                        op,
                        str(size),
                        f"{base * 1e3:.2f}",
                        f"{ours * 1e3:.2f}",
                        f"{floor * 1e3:.2f}",
                        f"{base / ours:.2f}",
                        f"{base / floor:.2f}",
                        f"{floor / ours:.2f}",
                    ]
                )
                print("  ".join(rows[-1]), flush=True)
    print(
        table.text_table(
            [
                "graph",
                "nnz",
                "op",
                "size",
                "cuSPARSE us",
                "fp16 us",
                "floor us",
                "fp16 x",
                "floor x",
                "floor / fp16",
            ],
            rows,
        )
    )
    for op, size in dict.fromkeys((r[2], r[3]) for r in rows):
        sel = [r for r in rows if (r[2], r[3]) == (op, size)]
        ours, floor = (table.geomean([float(r[c]) for r in sel]) for c in (7, 8))
        print(
            f"{op} {size}: geomean over cuSPARSE: fp16 {ours:.2f}x, floor {floor:.2f}x "
            f"({len(sel)} graphs)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
