"""AGNN's propagation on the three-kernel path and the one-pass path (ops/agnn_one_pass.py):
per path and precision, the kernel time (profiler: the summed device time of one call's
kernels), the wall time (host clock per call, synchronised) and the peak memory above what was
allocated before the call, for the forward alone and for forward + backward.

    python benchmarks/agnn_one_pass.py --graph powerlaw_products --features 128 \\
        --precisions fp16,fp32

A generated graph (``powerlaw_products``, ``powerlaw_reddit``; ``--scale-divisor`` shrinks it)
or a dataset's (FLASHGNN_DATA). Both paths run in one process on the same operands: the switch
is ``agnn_one_pass.ONE_PASS``, which FLASHGNN_AGNN_ONE_PASS sets in other processes.
"""

import argparse

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

from flashgnn import ops
from flashgnn.benchmarking.graphs import data_dir, load_graph
from flashgnn.benchmarking.timing import ProfilerTimer, wall_median_ms
from flashgnn.formats.mebcrs import MEBCRS
from flashgnn.ops import agnn_one_pass


def peak_mb(fn) -> float:
    """The peak memory of one call of ``fn`` above what was allocated before it, MB."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="powerlaw_products")
    parser.add_argument("--scale-divisor", type=int, default=1)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--precisions", default="fp16,bf16,tf32,fp32")
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    g = load_graph(args.graph, data_dir(), args.scale_divisor)
    indptr = torch.from_numpy(g.indptr).cuda()
    indices = torch.from_numpy(g.indices).cuda()
    gen = torch.Generator("cuda").manual_seed(0)
    feat = torch.randn(g.num_nodes, args.features, device="cuda", generator=gen)
    feat.requires_grad_()
    beta = torch.tensor([1.0], device="cuda", requires_grad=True)
    timer = ProfilerTimer(torch.device("cuda"), warmup=3, iters=args.iters)
    print(f"{g.name}: {g.num_nodes} nodes, {len(g.indices)} edges, F = {args.features}")
    print("precision  path        pass      kernel_ms   wall_ms   peak_MB")
    for precision in args.precisions.split(","):
        k = 4 if precision == "tf32" else 8
        a = MEBCRS.from_csr(indptr, indices, n_cols=g.num_nodes, k=k)
        grad = torch.ones(g.num_nodes, args.features, device="cuda")

        def forward():
            with torch.no_grad():
                return ops.agnn_propagate(a, feat, beta, precision)

        def training():
            out = ops.agnn_propagate(a, feat, beta, precision)
            return torch.autograd.grad(out, (feat, beta), grad)

        for one_pass in (False, True):
            agnn_one_pass.ONE_PASS = one_pass
            path = "one-pass" if one_pass else "3-kernel"
            for name, fn in (("forward", forward), ("fwd+bwd", training)):
                kernel = timer(fn).ms
                wall = wall_median_ms(fn, args.iters)
                peak = peak_mb(fn)
                print(
                    f"{precision:<10} {path:<11} {name:<9} {kernel:>9.3f} {wall:>9.3f} {peak:>9.1f}"
                )
    agnn_one_pass.ONE_PASS = None


if __name__ == "__main__":
    main()
