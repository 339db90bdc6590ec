"""What one call costs the host, for the pieces an eager layer step is made of: Python, torch's
dispatcher, the CUDA caching allocator, kernel launches (torch's and flashgnn's), autocast
and flashgnn's precision context, a system call. Each row: median over 7 loops of 200 calls,
microseconds per call, with the GPU kept busy by a sleep of about 1 ms ahead of each loop so
that only the host is timed (``timing.host_us_per_call``).

    python benchmarks/host_op_cost.py [--graph musae_github]
"""

import argparse
import os

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

from flashgnn import ops
from flashgnn.benchmarking.graphs import data_dir, load_graph
from flashgnn.benchmarking.timing import KERNEL_HEAD_START, host_us_per_call
from flashgnn.graph import Graph
from flashgnn.precision_context import precision

CALLS, LOOPS = 200, 7


def entered(make_context):
    def run():
        with make_context():
            pass

    return run


def under_autocast(fn):
    """``fn`` with autocast (fp16) on for its device, entered once for all the calls."""

    def run():
        return fn()

    run.autocast = True
    return run


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--graph", default="musae_github")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = load_graph(args.graph, data_dir())
    graph = Graph(
        torch.from_numpy(g.indptr).to(device), torch.from_numpy(g.indices).to(device), g.num_nodes
    )
    a = graph.adj()
    x32 = torch.randn(graph.num_nodes, 128, device=device)
    x16 = x32.half()
    w = torch.randn(128, 128, device=device)
    w16, bias = w.half(), torch.randn(128, device=device)
    ops.spmm(a, x16, "fp16")  # compiled and cached before timing
    autocast_device = device.type
    reusable = torch.autocast(autocast_device, dtype=torch.float16)
    rows = [
        ("empty Python call", lambda: None),
        ("os.stat('/') (a system call)", lambda: os.stat("/")),
        ("x.data_ptr()", x32.data_ptr),
        ("torch.cuda.is_available()", torch.cuda.is_available),
        (
            "torch.empty([N, 128], fp16)",
            lambda: torch.empty(graph.num_nodes, 128, dtype=torch.float16, device=device),
        ),
        ("x.add_(1) (launch, no allocation)", lambda: x32.add_(1)),
        ("x.to(fp16) (allocation + launch)", lambda: x32.to(torch.float16)),
        ("torch.mm([N, 128], [128, 128]) fp32", lambda: torch.mm(x32, w)),
        ("torch.mm fp16", lambda: torch.mm(x16, w16)),
        ("torch.mm fp16, out_dtype=fp32", lambda: torch.mm(x16, w16, out_dtype=torch.float32)),
        ("torch.mm fp32 under autocast fp16", under_autocast(lambda: torch.mm(x32, w))),
        ("torch.mm fp16 under autocast fp16", under_autocast(lambda: torch.mm(x16, w16))),
        ("x16 + bias fp32", lambda: x16 + bias),
        ("torch.autocast(...) built", lambda: torch.autocast(autocast_device, dtype=torch.float16)),
        (
            "torch.autocast(...) built, entered, left",
            entered(lambda: torch.autocast(autocast_device, dtype=torch.float16)),
        ),
        ("one autocast object entered, left", entered(lambda: reusable)),
        ("flashgnn.precision('fp16') entered, left", entered(lambda: precision("fp16"))),
        ("ops.spmm(A, x fp16, 'fp16')", lambda: ops.spmm(a, x16, "fp16")),
    ]
    print(
        f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}; graph "
        f"{args.graph}"
    )
    print(f"{'call':48s} {'us':>8s}")
    for name, fn in rows:
        with torch.autocast(
            device.type, dtype=torch.float16, enabled=getattr(fn, "autocast", False)
        ):
            us = host_us_per_call(fn, device, CALLS, LOOPS, head_start=KERNEL_HEAD_START)
        print(f"{name:48s} {us:8.2f}")


if __name__ == "__main__":
    main()
