"""A/B of versions of one kernel source on the GPU: the tensor-core SpMM (kernels/spmm.cu) or
SDDMM (kernels/sddmm.cu) compiled from each given file, timed in turn on each graph with a
timer of ``flashgnn bench kernels`` (back to back by default), against fp32 cuSPARSE, and
their results compared bit for bit with the first version's (a difference is printed and
makes the exit status 1; signed zeros compare equal). Each version is compiled from its own
text with the headers of this checkout's kernels/, for the precision's instantiations only.

    git show HEAD~1:kernels/spmm.cu > /tmp/before.cu
    python benchmarks/source_ab.py --op spmm --versions /tmp/before.cu,kernels/spmm.cu \\
        --graphs real --sizes 32,128 --precision fp16

A version's SpMM must take the launch the checkout's launcher makes (spmm.py): its grid is 2-D
(segment group, chunk group), so a file written for a 1-D grid is named with
``:flat`` after its path (``old.cu:flat``) and gets the same blocks in one dimension.
``--seg-vectors`` fixes the SDDMM's segment length on every graph (its launcher picks 32 or 64).
"""

import argparse
import sys
from pathlib import Path

import common  # puts the checkout on sys.path
import torch
from common import FileSource

from flashgnn._cuda import sddmm as sddmm_launcher
from flashgnn._cuda import spmm as spmm_launcher
from flashgnn.benchmarking import table
from flashgnn.benchmarking.graphs import DEFAULT_CACHE_DIR, data_dir, load_graph, resolve_names
from flashgnn.benchmarking.kernels import STORAGE
from flashgnn.benchmarking.timing import TIMERS, kernel_timer
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.precision_context import block_width


def instantiations(op: str, precision: str) -> list[str]:
    """The op's kernels in ``precision`` that a launch without GAT can take."""
    if op == "spmm":
        tag = spmm_launcher.TAG[STORAGE[precision]]
        prefix = (
            f"fg::spmm_tc<{spmm_launcher._PRECISION_ID[precision]}, "
            f"{block_width(precision)}, {tag}, "
        )
        return [
            n
            for n in spmm_launcher.SOURCE.name_expressions
            if (n.startswith(prefix) and "GAT" not in n) or n == f"fg::spmm_reduce<{tag}>"
        ]
    prefix = f"fg::sddmm_kernel<{sddmm_launcher._PRECISION_INDEX[precision]}, "
    return [n for n in sddmm_launcher.SOURCE.name_expressions if n.startswith(prefix)]


def versions(spec: str, op: str, precision: str) -> list[tuple[str, FileSource, bool]]:
    """(label, source, flat grid) of each comma-separated ``path[:flat]``."""
    found = []
    for item in filter(None, (t.strip() for t in spec.split(","))):
        path, _, flag = item.partition(":")
        if flag not in ("", "flat"):
            raise SystemExit(f"source_ab: a version is PATH or PATH:flat, got {item!r}")
        found.append(
            (
                path,
                FileSource(f"{op}.cu", instantiations(op, precision), Path(path)),
                flag == "flat",
            )
        )
    if len(found) < 2:
        raise SystemExit("source_ab: give at least two versions")
    return found


def launching(launcher, source: FileSource, flat_grid: bool):
    """(the launcher's launch, a replacement that launches the op's kernels from ``source``)."""
    real = launcher.launch

    def launch(src, name, device, grid, *args, **kwargs):
        if flat_grid and len(grid) == 2:
            grid = (grid[0] * grid[1],)
        return real(source, name, device, grid, *args, **kwargs)

    return real, launch


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    p.add_argument(
        "--versions", required=True, help="comma list of source files, each PATH or PATH:flat"
    )
    p.add_argument("--graphs", default="real")
    p.add_argument("--sizes", default="32,128", help="N (SpMM) or K (SDDMM)")
    p.add_argument("--precision", choices=("fp16", "bf16", "tf32"), default="fp16")
    p.add_argument("--timer", choices=TIMERS, default="back-to-back")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument(
        "--seg-vectors",
        type=int,
        default=None,
        help="SDDMM: vectors per segment for every graph instead of the launcher's rule "
        "(seg_vectors)",
    )
    args = p.parse_args()
    if args.seg_vectors is not None:
        if args.op != "sddmm" or args.seg_vectors < 1:
            raise SystemExit("source_ab: --seg-vectors takes a positive count, with --op sddmm")
        sddmm_launcher.seg_vectors = lambda n_vectors: args.seg_vectors
    device = torch.device("cuda")
    launcher = spmm_launcher if args.op == "spmm" else sddmm_launcher
    found = versions(args.versions, args.op, args.precision)
    timer = kernel_timer(args.timer, device, warmup=5, iters=args.iters)
    print("; ".join(f"version {i}: {label}" for i, (label, _, _) in enumerate(found)), flush=True)
    k = block_width(args.precision)
    rows, mismatches = [], 0
    for name in resolve_names(args.graphs, data_dir()):
        g = load_graph(name, data_dir(), 1, DEFAULT_CACHE_DIR)
        indptr, indices, values, csr, gen = common.graph_operands(g, device)
        a = MEBCRS.from_csr(indptr, indices, values, n_cols=g.num_nodes, k=k, device=device)
        for size in (int(s) for s in args.sizes.split(",")):
            x = torch.randn(g.num_nodes, size, generator=gen, device=device)
            if args.op == "spmm":
                base = timer(lambda: torch.sparse.mm(csr, x)).ms
                xs = x.to(STORAGE[args.precision])

                def call():
                    return spmm_launcher.spmm_tensor_core(
                        a.row_ptr,
                        a.col_idx,
                        a.vec_mask,
                        a.values,
                        xs,
                        a.n_rows,
                        k,
                        args.precision,
                        xs.dtype,
                    )
            else:
                y = torch.randn(g.num_nodes, size, generator=gen, device=device)
                base = timer(lambda: torch.sparse.sampled_addmm(csr, x, y.t(), beta=0.0)).ms
                xs, ys = x.to(STORAGE[args.precision]), y.to(STORAGE[args.precision])

                def call():
                    return sddmm_launcher.sddmm_tensor_core(
                        a.row_ptr, a.col_idx, a.vec_mask, xs, ys, k, args.precision
                    )

            times, first = [], None
            for label, source, flat in found:
                real, replacement = launching(launcher, source, flat)
                launcher.launch = replacement
                try:
                    times.append(timer(call).ms)
                    out = call() + 0  # -0.0 becomes +0.0
                finally:
                    launcher.launch = real
                if first is None:
                    first = out
                elif not torch.equal(out, first):
                    mismatches += 1
                    print(
                        f"MISMATCH {name} size {size} {label}: {(out != first).sum().item()} "
                        f"elements",
                        flush=True,
                    )
            rows.append(
                [
                    name,
                    str(g.nnz),
                    str(size),
                    f"{base * 1e3:.2f}",
                    *(f"{t * 1e3:.2f}" for t in times),
                    *(f"{base / t:.2f}" for t in times),
                ]
            )
            print("  ".join(map(str, rows[-1])), flush=True)
    labels = [label for label, _, _ in found]
    n = len(labels)
    print(
        table.text_table(
            [
                "graph",
                "nnz",
                "size",
                "cuSPARSE us",
                *(f"us {i}" for i in range(n)),
                *(f"x {i}" for i in range(n)),
            ],
            rows,
        )
    )
    for size in sorted({r[2] for r in rows}, key=int):
        sel = [r for r in rows if r[2] == size]
        means = [table.geomean([float(r[4 + n + i]) for r in sel]) for i in range(n)]
        print(
            f"size {size}: geomean x over cuSPARSE "
            + ", ".join(f"{labels[i]} {means[i]:.3f}" for i in range(n))
        )
    print(f"bit mismatches: {mismatches}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
