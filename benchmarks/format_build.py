"""Time the CPU reference builder MEBCRS.from_csr on a generated OGB-scale graph.

The graph has power-law out-degrees (mean 25, like ogbn-products: 2.4M nodes, ~60M
nonzeros) and uniform random columns, so nearly every nonzero opens its own 8x1 vector, the
hard case for the builder. The issue asks for 60M nonzeros in under a minute on 2 cores.

    python benchmarks/format_build.py [--nodes 2400000] [--nnz 60000000] [--threads 2] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
import torch

from flashgnn.format import MEBCRS


def power_law_out_degree_csr(n: int, nnz: int, exponent: float, rng: np.random.Generator):
    """(indptr int64 [n+1], indices int32) of a canonical CSR with about ``nnz`` nonzeros:
    out-degrees multinomial with Pareto weights of the given exponent (so they sum to
    ``nnz``), columns uniform; the few duplicate columns a row draws are dropped."""
    weight = rng.pareto(exponent - 1.0, n) + 1.0
    degree = rng.multinomial(nnz, weight / weight.sum())
    rows = np.repeat(np.arange(n, dtype=np.int64), degree)
    keys = rows * n + rng.integers(0, n, rows.size)
    keys.sort()
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // n, minlength=n), out=indptr[1:])
    return indptr, (keys % n).astype(np.int32)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=2_400_000)
    p.add_argument("--nnz", type=int, default=60_000_000)
    p.add_argument("--exponent", type=float, default=2.5, help="power-law exponent of the out-degrees")
    p.add_argument("--k", type=int, default=8, choices=(8, 4))
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="cProfile one build and print the top calls")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    indptr, indices = power_law_out_degree_csr(args.nodes, args.nnz, args.exponent, rng)
    values = rng.uniform(0.5, 1.5, indices.size).astype(np.float32)
    nnz = indices.size
    degree = np.diff(indptr)
    print(f"graph: {args.nodes:,} nodes, {nnz:,} nonzeros, max out-degree {degree.max():,}, "
          f"generated in {time.perf_counter() - t0:.1f} s")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, k = {args.k}")

    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        fmt = MEBCRS.from_csr(indptr, indices, values, n_cols=args.nodes, k=args.k)
        times.append(time.perf_counter() - t0)
        del fmt
    best = min(times)
    print(f"MEBCRS.from_csr: {best:.2f} s (best of {len(times)}), {nnz / best / 1e6:.2f} M nonzeros/s")

    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        fmt = MEBCRS.from_csr(indptr, indices, values, n_cols=args.nodes, k=args.k)
        prof.disable()
        print(f"{fmt.n_vectors:,} vectors ({nnz / fmt.n_vectors:.3f} nonzeros per vector)")
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
