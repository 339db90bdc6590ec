"""``flashgnn bench layers``: one GCN layer and one AGNN layer, forward + backward, flashgnn
against PyG's GCNConv and AGNNConv on the same device, with the same weights.

Layers: GCNConv 128 -> 128 features (norm "both"), AGNNConv on 32 features (learnable beta);
with --models, also GATConv 64 -> 4 heads of 16 features (PyG: edge_index input).
Graphs: the generated ogbn-products-scale power-law graph (2.4M nodes, 60M nonzeros) and the
largest shared real graph, both with a self-loop added on every node.
One call: forward, then the gradients of sum(output * P) (P a fixed random [N, F]
projection) with respect to the input features and every parameter
(``torch.autograd.grad``, nothing accumulates between calls).
ms: median of per-call CUDA-event times after warm-up (``timing.Timer``, cold L2); with
--rounds R, a layer's rows are timed in turns, R rounds of --iters calls each, and ms is the
median over all R rounds (``measure_rounds``).
wall ms: after each round's timed calls, --iters calls back to back (no GPU sleep, no L2
flush) timed by the host's clock, the GPU synchronised before and after, per call; the median
over rounds. It is what a step costs where the host is the bottleneck: there the event timer
gives the GPU time left after the host's lead over the 0.2 ms GPU sleep that precedes each
call, which moves with the host's speed (docs/TUNING.md). A step's time is the larger of ms
and wall ms (the event time on a GPU-bound step, the wall time on a host-bound one), for PyG's
rows and flashgnn's alike.
Precision: flashgnn runs under the training code's ``precision_scope`` (sparse ops in the
precision; dense matmuls under autocast for fp16/bf16, TF32 for tf32; on CUDA the backward on
the calling thread); PyG runs under the same scope for fp32 and fp16 (fp16 = ``torch.autocast``).
PyG inputs ("impl" names the path):
  PyG adj_t:          GCNConv fed the transposed adjacency as a torch.sparse CSR tensor, the
                      sparse-matrix path of PyG's docs (aggregation by torch.sparse.mm, i.e.
                      cuSPARSE SpMM); normalize=True, cached=False (normalised every call).
  PyG adj_t cached:   the same with cached=True: the normalised matrix is computed in the
                      first warm-up call and reused, as flashgnn reuses its normalised values.
  PyG edge_index:     edge_index [2, E] on the device (gather / scatter message passing); the
                      only input AGNNConv can use, as its messages need both end points.
Every PyG layer has add_self_loops=False (the graph has them).
flashgnn's GCNConv, AGNNConv and GATConv replay their kernels from CUDA graphs on graphs of
up to 4M nonzeros (``ops.replay``, on by default there: the "flashgnn" rows); on such a graph
the "flashgnn eager" rows time the same layers with the replay off. speedup = the fastest PyG
fp32 step time of that layer and graph / step time. peak MB: device memory allocated at the
peak of the timed calls beyond the common inputs (graph CSR, features, projection), i.e. the
implementation's adjacency or format plus the call's working memory. prep ms: building that
adjacency or format (flashgnn: ME-BCRS of A and A^T on the device; PyG: its input tensor).
rel err: ||out - ref|| / ||ref|| of the forward output, ref = PyG fp32 (flashgnn fp32
without PyG). A failing row records its error and the run goes on.
With --cuda-graph every step is also captured in a CUDA graph (``cuda_graphs.graphed``) and its
replay timed ("graph ms"): GPU time without the host's launch path, which is what a step
costs when the host is out of the way. graph x PyG fp32 = the fastest PyG fp32 time of the
layer and graph, eager or replayed, / graph ms. A step that cannot be captured records why
(PyG's adj_t path copies from the host inside its sparse matmul). Meant for host-bound graphs:
PyTorch may keep the memory pool of a failed capture, which a 60M-nonzero graph cannot spare.
"""

from __future__ import annotations

import copy
import statistics
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import nn

from .. import nn as fnn
from ..cuda_graphs import graphed
from ..graph import Graph
from ..ops import PRECISIONS
from ..ops.replay import NodeReplay, set_replay
from ..precision_context import block_width
from ..pyg_twin import pyg_adjacency, pyg_twin
from ..training.loop import prepare_graph
from ..training.precision import precision_scope
from . import table
from .checks import relative_error
from .environment import environment
from .errors import describe_error
from .graphs import GENERATED, data_dir, load_graph, resolve_names
from .options import QUICK_SCALE, SLOW_CPU_RUN, add_data_arguments, comma_list, cuda_missing
from .timing import Timer, free_device_memory, timed_call, wall_per_call

DEFAULT_GRAPHS = "powerlaw_products,musae_github"
PYG_PRECISIONS = ("fp32", "fp16")
GCN_FEATURES, AGNN_FEATURES = 128, 32
GAT_FEATURES, GAT_HEADS = 64, 4  # 64 -> 4 heads of 16
MODELS = ("GCNConv", "AGNNConv", "GATConv")
DEFAULT_MODELS = ("GCNConv", "AGNNConv")
# fp16 >= 2x the fastest PyG fp32 for GCN, >= 3x for AGNN; fp32 no slower than PyG fp32
BARS = (
    ("GCNConv", "fp16", 2.0),
    ("AGNNConv", "fp16", 3.0),
    ("GCNConv", "fp32", 1.0),
    ("AGNNConv", "fp32", 1.0),
)


@dataclass
class ModelRow:
    """One measured (graph, model, impl, precision). ``ms`` per call (layers) or per epoch
    (training, e2e); ``amortized_ms`` (e2e) = ms + prep_ms / 200; ``speedup`` /
    ``speedup_fp16`` = fastest PyG fp32 / fp16 ms / ms; ``peak_mb`` and ``prep_ms`` as the
    module docs say; ``error`` the first line of what went wrong, or ""."""

    graph: str
    model: str
    impl: str
    precision: str
    ms: float | None = None
    wall_ms: float | None = None
    prep_ms: float | None = None
    amortized_ms: float | None = None
    speedup: float | None = None
    speedup_fp16: float | None = None
    graph_ms: float | None = None
    graph_speedup: float | None = None
    peak_mb: float | None = None
    rel_err: float | None = None
    error: str = ""


COLUMNS = [f.name for f in fields(ModelRow)]
HEADERS = {
    "ms": "ms",
    "wall_ms": "wall ms",
    "prep_ms": "prep ms",
    "amortized_ms": "ms + prep/200",
    "speedup": "x PyG fp32",
    "speedup_fp16": "x PyG fp16",
    "graph_ms": "graph ms",
    "graph_speedup": "graph x PyG fp32",
    "peak_mb": "peak MB",
    "rel_err": "rel err",
}


def pyg_missing() -> str | None:
    """Why PyG rows cannot run (None when torch_geometric imports)."""
    try:
        import torch_geometric.nn  # noqa: F401
    except Exception as e:  # noqa: BLE001 - missing, or broken by a binary mismatch
        return f"torch_geometric is not usable ({describe_error(e)}): PyG rows skipped"
    return None


# ---------------------------------------------------------------------- rows
EAGER = "flashgnn eager"


def implementations(
    pyg_paths, precisions: list[str], with_pyg: bool, eager: bool = False
) -> list[tuple[str, str, str | None]]:
    """(impl label, precision, PyG input path or None for flashgnn) of every row to time; with
    ``eager`` also flashgnn's rows with the layers' kernel replay off (``EAGER``)."""
    runs = (
        [(f"PyG {path}", p, path) for path in pyg_paths for p in PYG_PRECISIONS] if with_pyg else []
    )
    return runs + [(impl, p, None) for impl in ("flashgnn", EAGER)[: 1 + eager] for p in precisions]


def replays(module: nn.Module, x: torch.Tensor, graph: Graph) -> bool:
    """Whether a layer of ``module`` replays its kernels from CUDA graphs on features ``x``
    and ``graph`` (``ops.replay``)."""
    return any(
        isinstance(r := getattr(m, "replay", None), NodeReplay) and r.applies(x, graph.num_edges)
        for m in module.modules()
    )


def module_and_graph(
    module: nn.Module, graph: Graph, precision: str, path: str | None, cached: bool
):
    """What one row runs: a copy of the flashgnn ``module`` with ``graph`` prepared for
    ``precision`` (path None), or its PyG twin fed PyG's input ``path``."""
    if path is None:
        return copy.deepcopy(module), prepare_graph(
            graph, False, graph.device, block_width(precision)
        )
    return pyg_twin(module, pyg_adjacency(graph, path), cached), graph


# ---------------------------------------------------------------------- measuring
def measure(
    row: ModelRow,
    timer: Timer,
    prepare: Callable[[], Callable[[], object]],
    cuda_graph: bool = False,
):
    """Fill ``row`` with the time of the step that ``prepare()`` returns (``prep_ms``: what
    ``prepare`` took), with ``cuda_graph`` the time of its CUDA-graph replay, and the peak
    device memory beyond what was allocated before ``prepare``; return the step's last
    (eager) result, or None with ``row.error`` set on failure."""
    return measure_rounds([(row, prepare)], timer, 1, cuda_graph)[0]


def measure_rounds(
    entries: list[tuple[ModelRow, Callable[[], Callable[[], object]]]],
    timer: Timer,
    rounds: int,
    cuda_graph: bool = False,
    wall: bool = False,
) -> list:
    """``measure`` for each (row, prepare) of ``entries``, the steps timed in turn: every step
    is prepared first, then each is timed once per round (warm-up and ``timer.iters`` calls),
    ``rounds`` times, and ``ms`` is the median of all its calls. On a host-bound graph the
    host's speed drifts within a run (eager GCN steps on musae_github moved by 1.4x-2.2x between
    runs of one loan): in turns, a drift reaches every row alike. With ``wall`` each round also
    times ``timer.iters`` calls back to back by the host's clock (``wall_per_call``), and
    ``wall_ms`` is the median over the rounds. Returns the last results."""
    if rounds < 1:
        raise ValueError(f"need rounds >= 1, got {rounds}")
    device = timer.device
    free_device_memory(device)
    steps, resident, results = [], [], [None] * len(entries)
    samples, walls = [[] for _ in entries], [[] for _ in entries]
    allocated = (
        (lambda: torch.cuda.memory_allocated(device)) if device.type == "cuda" else (lambda: 0)
    )
    with warnings.catch_warnings():
        # PyG builds sparse tensors without invariant checks and says so on every call
        warnings.filterwarnings("ignore", message="Sparse (invariant checks|CSR tensor support)")
        for row, prepare in entries:
            base = allocated()
            try:
                step, seconds = timed_call(prepare, device)
                steps.append(step)
                row.prep_ms = seconds * 1e3
                resident.append(allocated() - base)  # the step's adjacency or format, its module
            except Exception as e:  # noqa: BLE001 - recorded in the row; out of memory included
                row.error = describe_error(e)
                steps.append(None)
                resident.append(0)
        for _ in range(rounds):
            for i, (row, _) in enumerate(entries):
                if steps[i] is None:
                    continue
                # the last round's output is kept for the error; dropped here, so that a step
                # is timed as a loop that holds only its latest output (``ops.replay``: a layer
                # replaying its kernels has two slots, and an output held pins one)
                results[i] = None
                try:
                    m = timer(steps[i])
                    if wall:
                        walls[i].append(wall_per_call(steps[i], timer.iters, device))
                except Exception as e:  # noqa: BLE001
                    row.error, steps[i], results[i] = describe_error(e), None, None
                    continue
                samples[i] += m.samples
                results[i] = m.result
                if (
                    m.extra_bytes is not None
                ):  # CUDA: the step's own memory + its calls' peak beyond it
                    row.peak_mb = max(row.peak_mb or 0.0, (resident[i] + m.extra_bytes) / 2**20)
        for i, (row, _) in enumerate(entries):
            if steps[i] is None:
                continue
            row.ms = statistics.median(samples[i])
            row.wall_ms = statistics.median(walls[i]) if walls[i] else None
            if cuda_graph:
                try:
                    row.graph_ms = timer(graphed(steps[i]), warmup=1).ms
                except Exception as e:  # noqa: BLE001 - a step that cannot be captured says why
                    row.error = f"CUDA graph: {describe_error(e)}"
    steps = None
    free_device_memory(device)
    return results


def timings(row: ModelRow) -> str:
    """The row's time, and its replay's, or its error: for progress lines."""
    return (
        (f"{row.ms:9.3f} ms" if row.ms is not None else str(row.error))
        + (f", wall {row.wall_ms:.3f} ms" if row.wall_ms is not None else "")
        + (f", graph {row.graph_ms:.3f} ms" if row.graph_ms is not None else "")
    )


def step_ms(row: ModelRow) -> float | None:
    """A row's eager step time: the larger of its event time and its wall time per call."""
    return None if row.ms is None else max(row.ms, row.wall_ms or 0.0)


def _replay_ms(row: ModelRow) -> float | None:
    return row.graph_ms


def _fastest_pyg(rows: list[ModelRow], precision: str, times) -> dict[tuple, float]:
    """(graph, model) -> the fastest PyG time of ``precision``, each row's times given by the
    functions ``times``."""
    best: dict[tuple, float] = {}
    for r in rows:
        if r.impl.startswith("PyG") and r.precision == precision:
            for t in filter(None, (time_of(r) for time_of in times)):
                best[r.graph, r.model] = min(best.get((r.graph, r.model), t), t)
    return best


def set_speedups(rows: list[ModelRow]) -> None:
    """speedup (speedup_fp16) of every row = the fastest PyG fp32 (fp16) step time of its
    (graph, model) / its step time (``step_ms``); graph_speedup = the fastest PyG fp32 time,
    eager step or CUDA-graph replay, / its graph_ms."""
    for column, own, best in (
        ("speedup", step_ms, _fastest_pyg(rows, "fp32", (step_ms,))),
        ("speedup_fp16", step_ms, _fastest_pyg(rows, "fp16", (step_ms,))),
        ("graph_speedup", _replay_ms, _fastest_pyg(rows, "fp32", (step_ms, _replay_ms))),
    ):
        for r in rows:
            base, t = best.get((r.graph, r.model)), own(r)
            if base and t:
                setattr(r, column, base / t)


# ---------------------------------------------------------------------- tables
def row_table(rows: list[ModelRow]) -> tuple[list[str], list[list[str]]]:
    cols = [c for c in COLUMNS if any(getattr(r, c) not in (None, "") for r in rows)]
    return [HEADERS.get(c, c) for c in cols], table.cells(rows, cols)


def markdown(title: str, env: dict, method: str, notes: list[str], rows: list[ModelRow]) -> str:
    return "\n".join(
        [
            f"# {title}",
            "",
            "\n".join(f"- {k}: {v}" for k, v in env.items()),
            "",
            method,
            "",
            *([("\n".join(f"- {n}" for n in notes)), ""] if notes else []),
            table.markdown_table(*row_table(rows)),
            "",
        ]
    )


def report(
    rows: list[ModelRow], notes: list[str], args, title: str, method: str, timer: Timer
) -> int:
    """Print the table and the notes, write --csv and --markdown; 1 when a flashgnn row
    failed (a PyG configuration PyG cannot run is not a failure of flashgnn)."""
    env = environment(timer) if args.csv or args.markdown else {}
    if args.csv:
        table.write_csv(rows, args.csv, env, ModelRow)
    if args.markdown:
        args.markdown.write_text(markdown(title, env, method, notes, rows))
    print()
    print(table.text_table(*row_table(rows)))
    for r in rows:
        if r.error:
            print(f"FAILED {r.graph} {r.model} {r.impl} {r.precision}: {r.error}")
    for n in notes:
        print(n)
    return 1 if any(r.error and r.impl == "flashgnn" for r in rows) else 0


def add_common_arguments(p) -> None:
    p.add_argument(
        "--precisions",
        default=",".join(PRECISIONS),
        help="flashgnn precisions, comma list of fp32, tf32, fp16, bf16 (default all four)",
    )
    p.add_argument("--no-pyg", action="store_true", help="flashgnn rows only")
    p.add_argument("--quick", action="store_true", help="a smaller graph and fewer timed calls")
    p.add_argument("--csv", type=Path, help="write every row to this CSV file")
    p.add_argument("--markdown", type=Path, help="write the table to this Markdown file")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed calls first (default 3, quick 1)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=None,
        help="timed calls, the median is reported (default 10, quick 3)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="also time every step replayed from a CUDA graph (GPU time without the host's "
        "launches)",
    )


def setup(args, name: str) -> tuple[torch.device, Timer, list[str], list[str]] | None:
    """(device, timer, flashgnn precisions, notes), or None (after a message) without CUDA."""
    device = torch.device(args.device)
    if cuda_missing(device, name, SLOW_CPU_RUN):
        return None
    precisions = comma_list(args.precisions, PRECISIONS, "precisions")
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    iters = args.iters if args.iters is not None else (3 if args.quick else 10)
    notes = []
    if not args.no_pyg and (missing := pyg_missing()):
        print(missing, file=sys.stderr)
        notes.append(missing)
    return device, Timer(device, warmup, iters), precisions, notes


def pyg_runs(args, notes: list[str]) -> bool:
    return not args.no_pyg and not any("torch_geometric" in n for n in notes)


# ---------------------------------------------------------------------- the layer benchmark
def add_arguments(p) -> None:
    p.add_argument(
        "--graphs",
        default=DEFAULT_GRAPHS,
        help=f"comma list of graph names, or real, generated, all (default {DEFAULT_GRAPHS})",
    )
    add_common_arguments(p)
    add_data_arguments(p)
    p.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help=f"comma list of {', '.join(MODELS)} (default {','.join(DEFAULT_MODELS)})",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="time a layer's rows in turns, this many rounds of --iters calls each, the median "
        "over "
        "all (for host-bound graphs; every row's step is then alive at once)",
    )


def bench_graph(
    name: str,
    graph: Graph,
    timer: Timer,
    precisions: list[str],
    with_pyg: bool,
    seed: int,
    cuda_graph: bool = False,
    models=DEFAULT_MODELS,
    rounds: int = 1,
) -> list[ModelRow]:
    """Every row of one graph (with self-loops, on the timer's device) and of each of ``models``;
    with ``rounds`` > 1 a model's rows are timed in turns (``measure_rounds``)."""
    device = timer.device
    torch.manual_seed(seed)
    layers = {
        "GCNConv": (
            lambda: fnn.GCNConv(GCN_FEATURES, GCN_FEATURES),
            GCN_FEATURES,
            ("adj_t", "adj_t cached", "edge_index"),
        ),
        "AGNNConv": (fnn.AGNNConv, AGNN_FEATURES, ("edge_index",)),
        "GATConv": (
            lambda: fnn.GATConv(GAT_FEATURES, GAT_FEATURES // GAT_HEADS, GAT_HEADS),
            GAT_FEATURES,
            ("edge_index",),
        ),
    }
    rows = []
    for model in models:
        make, features, pyg_paths = layers[model]
        layer = make()
        layer = layer.to(device)
        gen = torch.Generator(device).manual_seed(seed)
        x = torch.randn(graph.num_nodes, features, generator=gen, device=device).requires_grad_()
        proj = torch.randn(graph.num_nodes, features, generator=gen, device=device)
        entries = []
        for impl, precision, path in implementations(
            pyg_paths, precisions, with_pyg, replays(layer, x, graph)
        ):

            def prepare(layer=layer, precision=precision, path=path, impl=impl, x=x, proj=proj):
                module, g = module_and_graph(
                    layer,
                    graph,
                    precision,
                    path and path.split()[0],
                    cached=path is not None and "cached" in path,
                )
                return fwd_bwd(
                    set_replay(module, False) if impl == EAGER else module, g, x, proj, precision
                )

            entries.append((ModelRow(name, model, impl, precision), prepare))
        ref = None
        # in turns only when asked: every step and its format are then alive at once
        for group in [entries] if rounds > 1 else [[e] for e in entries]:
            measured = measure_rounds(group, timer, rounds, cuda_graph, wall=True)
            for (row, _), out in zip(group, measured):
                if out is not None:
                    if ref is None and row.precision == "fp32":
                        ref = out.to(torch.float64)
                    if ref is not None:
                        row.rel_err = relative_error(out, ref)
                rows.append(row)
                print(f"  {model:8s} {row.impl:18s} {row.precision:5s} {timings(row)}", flush=True)
            del out
        del x, proj, ref
    return rows


def fwd_bwd(module: nn.Module, graph: Graph, x: torch.Tensor, proj: torch.Tensor, precision: str):
    """The timed call: forward in ``precision``, then the gradients of sum(out * proj) with
    respect to x and the parameters; returns the detached output."""
    inputs = [x, *(p for p in module.parameters() if p.requires_grad)]
    grad_out = {}

    def step():
        with precision_scope(precision, x.device):
            out = module(graph, x)
            if out.dtype not in grad_out:
                grad_out[out.dtype] = proj.to(out.dtype).view_as(out)  # GAT: [N, heads, C]
            torch.autograd.grad(out, inputs, grad_out[out.dtype])
        return out.detach()

    return step


def bar_lines(rows: list[ModelRow]) -> list[str]:
    """One line per (graph, bar): the issue's speedup bars, met or not."""
    lines = []
    for graph in dict.fromkeys(r.graph for r in rows):
        for model, precision, target in BARS:
            (row,) = [
                r
                for r in rows
                if (r.graph, r.model, r.impl, r.precision) == (graph, model, "flashgnn", precision)
            ] or [None]
            for mode, column in (("", "speedup"), (" (CUDA graphs)", "graph_speedup")):
                what = (
                    f"bar {graph} {model} flashgnn {precision}{mode} >= {target:g}x the "
                    "fastest PyG fp32:"
                )
                speedup = None if row is None else getattr(row, column)
                if speedup is not None:
                    lines.append(
                        f"{what} {speedup:.2f}x {'met' if speedup >= target else 'NOT met'}"
                    )
                elif not mode:
                    lines.append(f"{what} not measured")
    return lines


def run(args) -> int:
    context = setup(args, "layers")
    if context is None:
        return 2
    device, timer, precisions, notes = context
    models = comma_list(args.models, MODELS, "models")
    root = data_dir(args.data)
    names = resolve_names(args.graphs, root)
    rows: list[ModelRow] = []
    for name in names:
        try:
            g = load_graph(
                name, root, QUICK_SCALE if args.quick and name in GENERATED else 1, args.cache_dir
            )
            graph = Graph(
                torch.from_numpy(g.indptr).to(device),
                torch.from_numpy(g.indices).to(device),
                g.num_nodes,
            ).add_self_loops()
            label, nnz = g.name, graph.num_edges
            del g
        except Exception as e:  # noqa: BLE001 - recorded in the table instead
            rows.append(
                ModelRow(name, "", "flashgnn", "", error=f"loading the graph: {describe_error(e)}")
            )
            continue
        print(
            f"== {label}: {graph.num_nodes:,} nodes, {nnz:,} nonzeros with self-loops", flush=True
        )
        rows += bench_graph(
            label,
            graph,
            timer,
            precisions,
            pyg_runs(args, notes),
            args.seed,
            args.cuda_graph and device.type == "cuda",
            models,
            args.rounds,
        )
        del graph
        free_device_memory(device)
    set_speedups(rows)
    notes = notes + bar_lines(rows)
    return report(
        rows,
        notes,
        args,
        "Layer benchmark (forward + backward)",
        __doc__.split("\n\n", 1)[1],
        timer,
    )
