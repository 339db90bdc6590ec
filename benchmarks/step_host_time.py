"""Where the host's time goes in an eager layer step (forward + torch.autograd.grad) on a
host-bound graph: host-clock marks (``timing.HostMarks``) around the pieces of flashgnn's
GCNConv (128 -> 128) and AGNNConv (32) steps, with the GPU kept busy by a sleep so that only
the host is timed (no profiler, whose own cost per op would dominate). Columns, median
microseconds per step: precision_scope's entry and exit, the layer's Python before its
autograd node, the node's forward, the hand-over to autograd's CUDA thread, the node's
backward, the hand-back.

    python benchmarks/step_host_time.py --graph musae_github --steps 150
"""

import argparse
import importlib

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

from flashgnn import nn as fnn
from flashgnn._torch_private import gpu_sleep
from flashgnn.benchmarking.graphs import data_dir, load_graph
from flashgnn.benchmarking.timing import HostMarks
from flashgnn.graph import Graph
from flashgnn.training.loop import prepare_graph
from flashgnn.training.precision import precision_scope

MARKS = HostMarks()
mark = MARKS.mark
NODES = {
    "GCNConv": ("flashgnn.ops.graph_conv", "_GraphConv"),
    "AGNNConv": ("flashgnn.ops.agnn", "_Propagate"),
}


def marked(node: type) -> None:
    """Put marks around the forward and backward of the autograd node ``node``."""
    forward, backward = node.forward, node.backward

    def timed_forward(ctx, *args):
        mark("forward")
        out = forward(ctx, *args)
        mark("forward done")
        return out

    def timed_backward(ctx, *grads):
        mark("backward")
        out = backward(ctx, *grads)
        mark("backward done")
        return out

    node.forward, node.backward = staticmethod(timed_forward), staticmethod(timed_backward)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--graph", default="musae_github")
    p.add_argument(
        "--steps", type=int, default=150, help="timed steps, in 10 bursts behind a GPU sleep"
    )
    args = p.parse_args()
    for module, name in NODES.values():
        marked(getattr(importlib.import_module(module), name))
    device = torch.device("cuda")
    g = load_graph(args.graph, data_dir())
    graph = Graph(
        torch.from_numpy(g.indptr).to(device), torch.from_numpy(g.indices).to(device), g.num_nodes
    )
    graph = prepare_graph(graph.add_self_loops(), False, device, 8)
    pieces = [
        ("scope in", "step", "scope entered"),
        ("layer", "scope entered", "forward"),
        ("forward", "forward", "forward done"),
        ("to backward", "layer done", "backward"),
        ("backward", "backward", "backward done"),
        ("back", "backward done", "grad done"),
        ("scope out", "grad done", "step done"),
    ]
    print(f"{'layer':9} {'prec':5} {'step us':>8} " + " ".join(f"{p[0]:>11}" for p in pieces))
    for layer_name, features in (("GCNConv", 128), ("AGNNConv", 32)):
        layer = (fnn.GCNConv(features, features) if layer_name == "GCNConv" else fnn.AGNNConv()).to(
            device
        )
        x = torch.randn(graph.num_nodes, features, device=device, requires_grad=True)
        proj = torch.randn(graph.num_nodes, features, device=device)
        inputs = [x, *layer.parameters()]
        for precision in ("fp32", "fp16"):

            def step():
                mark("step")
                with precision_scope(precision, device):
                    mark("scope entered")
                    out = layer(graph, x)
                    mark("layer done")
                    torch.autograd.grad(out, inputs, proj)
                    mark("grad done")
                mark("step done")

            for _ in range(10):
                step()
            torch.cuda.synchronize()
            MARKS.clear()
            for _ in range(10):
                gpu_sleep(60_000_000)
                for _ in range(-(-args.steps // 10)):
                    step()
                torch.cuda.synchronize()
            print(
                f"{layer_name:9} {precision:5} {MARKS.span_us('step', 'step done'):8.1f} "
                + " ".join(f"{MARKS.span_us(a, b):11.1f}" for _, a, b in pieces),
                flush=True,
            )


if __name__ == "__main__":
    main()
