"""Time the CPU reference builder ``MEBCRS.from_csr`` on an OGB-scale power-law graph.

The issue asks for 60 million nonzeros in under a minute on a 2-core machine. The graph is
ogbn-products-sized (2.4M nodes, 60M nonzeros, power-law degrees, hubs spread over the ids).
Prints the total time and nonzeros per second, then the time of each stage of the builder
(each stage run again on its own), so a regression shows where it comes from.

    python benchmarks/format_build.py [--nodes 2400000] [--nnz 60000000] [--k 8] [--threads 2]
"""

from __future__ import annotations

import argparse

import common  # noqa: F401  (puts the checkout on sys.path)
import numpy as np
import torch

from flashgnn.benchmarking.timing import timed_call
from flashgnn.data.generators import power_law_csr
from flashgnn.formats.mebcrs import MEBCRS, WINDOW, build_pattern
from flashgnn.formats.windowed import check_csr


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=2_400_000)
    p.add_argument("--nnz", type=int, default=60_000_000)
    p.add_argument("--k", type=int, default=8, choices=(8, 4))
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    (indptr, indices), gen_s = timed_call(
        lambda: power_law_csr(args.nodes, args.nnz, 2.5, args.seed)
    )
    values = np.random.default_rng(args.seed).random(len(indices), dtype=np.float32)
    print(
        f"graph: {args.nodes:,} nodes, {len(indices):,} nonzeros, max degree "
        f"{np.diff(indptr).max():,} "
        f"(generated in {gen_s:.1f} s); k = {args.k}, torch threads = {torch.get_num_threads()}"
    )

    fmt, total_s = timed_call(lambda: MEBCRS.from_csr(indptr, indices, values, args.nodes, args.k))
    print(
        f"MEBCRS.from_csr: {total_s:.2f} s, {fmt.nnz / total_s / 1e6:.2f} M nonzeros/s; "
        f"{fmt.n_vectors:,} vectors, {fmt.nnz / fmt.n_vectors:.3f} nonzeros per 8x1 vector"
    )

    # the builder's stages, one at a time, on the same input
    indptr_t = torch.from_numpy(indptr).to(torch.int64)
    (indices_t, values_t), convert_s = timed_call(
        lambda: (torch.from_numpy(indices).to(torch.int64), torch.from_numpy(values))
    )
    _, check_s = timed_call(lambda: check_csr(indptr_t, indices_t, args.nodes))
    (row_ptr, col_idx, perm, vec_mask), pattern_s = timed_call(
        lambda: build_pattern(indptr_t, indices_t, args.nodes, args.k)
    )
    _, scatter_s = timed_call(
        lambda: values_t.new_zeros(WINDOW * col_idx.numel()).index_copy_(0, perm, values_t)
    )
    for name, s in [
        ("index conversion", convert_s),
        ("check_csr", check_s),
        ("build_pattern", pattern_s),
        ("value scatter", scatter_s),
    ]:
        print(f"  {name:<17} {s:6.2f} s")


if __name__ == "__main__":
    main()
