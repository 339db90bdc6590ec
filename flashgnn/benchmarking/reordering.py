"""``flashgnn bench reorder``: what locality reordering (``Graph.reorder``) buys on every
benchmark graph, method by method, against the graph's own node order.

Per graph and method, before (the order the graph comes in) and after the reordering:
- vectors: ME-BCRS's 8x1 column vectors (``MEBCRS.n_vectors``, k = 8) and vectors per nonzero
  (from 1 down to 1/8 when every window's 8 rows read the same columns); the MMAs of SpMM at N
  (``mma_cost.spmm_cost``: per window, ceil(vectors / 8) x ceil(N / 16)) follow the vectors.
- MB: SpMM's bytes at N in the precision's storage type by ``mma_cost.spmm_cost``: every
  format array once, a row of X (N elements) gathered per vector, Y written once; the X rows
  dominate, so this is the gathered traffic of a kernel without reuse across windows.
- reorder s: ``Graph.reorder`` on --device (order and renumbered CSR) by the host's clock,
  the GPU synchronised after it (``timing.timed_call``); on CUDA after one untimed call.
On CUDA also the SpMM's kernel time at N (``timing.ProfilerTimer``: the summed device time of
the call's kernels, caches as the previous call left them), before and after, the speedup,
and the reordering against training: an epoch of a two-layer GCN counted as EPOCH_SPMMS
SpMMs (two forward, one backward: the first layer's input needs no gradient), "share of 200
epochs" = reorder time / (200 x EPOCH_SPMMS x SpMM ms before), "pays back in" = reorder time /
(EPOCH_SPMMS x ms saved per SpMM) epochs. --check compares the reordered SpMM, restored to the
graph's order, with float64 torch.sparse on the original graph (bounds: ``checks.py``).
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from ..graph import Graph
from ..ops import spmm
from ..reorder import METHODS
from . import table
from .checks import ERROR_BOUND, relative_error
from .environment import environment
from .errors import describe_error
from .graphs import BenchGraph, data_dir, load_graph, resolve_names
from .kernels import STORAGE
from .mma_cost import spmm_cost
from .options import (
    QUICK_SCALE,
    add_quick_argument,
    add_run_arguments,
    comma_list,
    cuda_missing,
    timed_calls,
)
from .timing import KERNEL_HEAD_START, ProfilerTimer, Timer, timed_call

EPOCH_SPMMS = 3
EPOCHS = 200
PRECISIONS = ("fp16", "bf16")


@dataclass
class ReorderRow:
    """One method on one graph: ``vpn_*`` vectors per nonzero, ``mb_*`` SpMM megabytes at
    ``size`` (N), ``ms_*`` SpMM kernel time (CUDA only); ``speedup`` = ms_before / ms_after;
    ``share_200`` and ``payback_epochs`` weigh ``reorder_s`` against training (module
    docstring)."""

    graph: str
    nnz: int | None
    method: str
    device: str = ""
    size: int | None = None
    reorder_s: float | None = None
    vectors_before: int | None = None
    vectors_after: int | None = None
    vpn_before: float | None = None
    vpn_after: float | None = None
    mmas_before: int | None = None
    mmas_after: int | None = None
    mb_before: float | None = None
    mb_after: float | None = None
    ms_before: float | None = None
    ms_after: float | None = None
    speedup: float | None = None
    share_200: float | None = None
    payback_epochs: float | None = None
    rel_err: float | None = None
    error: str = ""


def default_methods() -> list[str]:
    """Every method but "none"; "metis" where pymetis is installed."""
    have_metis = importlib.util.find_spec("pymetis") is not None
    return [m for m in METHODS if m != "none" and (m != "metis" or have_metis)]


def add_arguments(p) -> None:
    p.add_argument(
        "--graphs",
        default="all",
        help="comma list of graph names, or real, generated, all (default all)",
    )
    p.add_argument(
        "--methods",
        default=",".join(default_methods()),
        help="comma list of reorder methods (default: every one, metis where pymetis is installed)",
    )
    p.add_argument("--size", type=int, default=128, help="SpMM's N (default 128)")
    p.add_argument("--precision", default="fp16", choices=PRECISIONS)
    add_quick_argument(p)
    p.add_argument(
        "--check",
        action="store_true",
        help="check the reordered SpMM, restored, against float64 torch.sparse (CUDA)",
    )
    p.add_argument(
        "--csv", type=Path, help="write every row to this CSV file (the environment beside it)"
    )
    p.add_argument("--markdown", type=Path, help="write the table to this Markdown file")
    add_run_arguments(p)


class ReorderBench:
    """Measures every method on one graph at a time into ``rows``."""

    def __init__(self, device: torch.device, timer, methods, size, precision, check, seed):
        self.device, self.timer = device, timer
        self.methods, self.size, self.precision = methods, size, precision
        self.check, self.seed = check, seed
        self.rows: list[ReorderRow] = []

    def run_graph(self, g: BenchGraph) -> None:
        graph = Graph(
            torch.from_numpy(g.indptr).to(self.device),
            torch.from_numpy(g.indices).to(self.device),
            g.num_nodes,
        )
        before = graph.adj(8)
        cost = spmm_cost(before, self.size, STORAGE[self.precision].itemsize)
        x = ms_before = ref = None
        if self.timer is not None:
            gen = torch.Generator(self.device).manual_seed(self.seed)
            x = torch.randn(g.num_nodes, self.size, generator=gen, device=self.device)
            x = x.to(STORAGE[self.precision])
            ms_before = self.timer(lambda: spmm(before, x, self.precision)).ms
            ref = self._reference(graph, x) if self.check else None
        for method in self.methods:
            row = ReorderRow(
                g.name,
                g.nnz,
                method,
                str(self.device),
                self.size,
                vectors_before=before.n_vectors,
                vpn_before=before.n_vectors / max(g.nnz, 1),
                mmas_before=cost.mmas,
                mb_before=cost.bytes / 1e6,
                ms_before=ms_before,
            )
            try:
                self._measure(graph, method, row, x, ref)
            except Exception as e:  # noqa: BLE001 - recorded in the table instead
                row.error = describe_error(e)
                if isinstance(e, torch.cuda.OutOfMemoryError):
                    torch.cuda.empty_cache()
            self.rows.append(row)
            _print(row)

    def _measure(self, graph: Graph, method: str, row: ReorderRow, x, ref) -> None:
        if self.device.type == "cuda":  # kernels load and the allocator grows on the first call
            graph.reorder(method)
        (reordered, reordering), row.reorder_s = timed_call(
            lambda: graph.reorder(method), self.device
        )
        after = reordered.adj(8)
        cost = spmm_cost(after, self.size, STORAGE[self.precision].itemsize)
        row.vectors_after, row.mmas_after, row.mb_after = (
            after.n_vectors,
            cost.mmas,
            cost.bytes / 1e6,
        )
        row.vpn_after = after.n_vectors / max(row.nnz, 1)
        if x is None:
            return
        moved = reordering.apply_to_nodes(x)
        m = self.timer(lambda: spmm(after, moved, self.precision))
        row.ms_after = m.ms
        row.speedup = row.ms_before / m.ms
        spmm_ms = EPOCH_SPMMS * row.ms_before
        row.share_200 = row.reorder_s * 1e3 / (EPOCHS * spmm_ms)
        saved = EPOCH_SPMMS * (row.ms_before - m.ms)
        row.payback_epochs = row.reorder_s * 1e3 / saved if saved > 0 else None
        if ref is not None:
            row.rel_err = relative_error(reordering.restore(m.result), ref)
            if not row.rel_err <= ERROR_BOUND[self.precision]:  # also catches NaN
                row.error = f"check failed: relative error {row.rel_err:.1e}"

    @staticmethod
    def _reference(graph: Graph, x: torch.Tensor) -> torch.Tensor:
        """A X in float64 by torch.sparse on the graph's own order."""
        n = graph.num_nodes
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            a = torch.sparse_csr_tensor(
                graph.indptr,
                graph.indices,
                torch.ones(graph.num_edges, dtype=torch.float64, device=x.device),
                (n, n),
                check_invariants=False,
            )
            return torch.sparse.mm(a, x.double())


_SHOWN = [
    "graph",
    "method",
    "reorder_s",
    "vpn_before",
    "vpn_after",
    "mb_before",
    "mb_after",
    "ms_before",
    "ms_after",
    "speedup",
    "share_200",
    "payback_epochs",
    "rel_err",
    "error",
]
HEADERS = {
    "reorder_s": "reorder s",
    "vpn_before": "vectors/nnz before",
    "vpn_after": "vectors/nnz after",
    "mb_before": "SpMM MB before",
    "mb_after": "SpMM MB after",
    "ms_before": "SpMM ms before",
    "ms_after": "SpMM ms after",
    "speedup": "speedup",
    "share_200": f"share of {EPOCHS} epochs",
    "payback_epochs": "pays back in (epochs)",
    "rel_err": "rel err",
}


def _cell(row: ReorderRow, column: str) -> str:
    value = getattr(row, column)
    if column.startswith("vpn") and value is not None:
        return f"{value:.3f}"
    if column == "share_200" and value is not None:
        return f"{value:.1%}"
    return table.cell(column, value)


def _print(row: ReorderRow) -> None:
    print("  ".join(c for c in (_cell(row, col) for col in _SHOWN) if c), flush=True)


def markdown(rows: list[ReorderRow]) -> str:
    """One line per (graph, method), the columns the rows measured."""
    columns = [c for c in _SHOWN if any(getattr(r, c) not in (None, "") for r in rows)]
    body = [[_cell(r, c) for c in columns] for r in rows]
    return table.markdown_table([HEADERS.get(c, c) for c in columns], body)


def summary(rows: list[ReorderRow]) -> str:
    """One line per graph, the methods side by side (vectors per nonzero after, SpMM speedup,
    reordering seconds), the geometric-mean speedup per method last; failed rows are left to
    the CSV."""
    rows = [r for r in rows if not r.error]
    methods = [m for m in METHODS if any(r.method == m for r in rows)]
    by_graph: dict[str, dict[str, ReorderRow]] = {}
    for r in rows:
        by_graph.setdefault(r.graph, {})[r.method] = r
    header = ["graph", "nnz", "vectors/nnz", "SpMM ms"]
    for m in methods:
        header += [f"{m} vectors/nnz", f"{m} speedup", f"{m} s"]
    header.append("max rel err")
    body = []
    for graph, done in by_graph.items():
        first = next(iter(done.values()))
        line = [
            graph,
            table.cell("nnz", first.nnz),
            _cell(first, "vpn_before"),
            table.cell("ms_before", first.ms_before),
        ]
        for m in methods:
            r = done.get(m)
            line += [_cell(r, c) if r else "" for c in ("vpn_after", "speedup", "reorder_s")]
        errors = [r.rel_err for r in done.values() if r.rel_err is not None]
        line.append(table.cell("rel_err", max(errors)) if errors else "")
        body.append(line)
    if any(r.speedup for r in rows):  # kernel times exist on CUDA runs only
        mean = [f"geomean ({len(by_graph)} graphs)", "", "", ""]
        for m in methods:
            speedups = [r.speedup for r in rows if r.method == m and r.speedup]
            mean += ["", f"{table.geomean(speedups):.3f}x" if speedups else "", ""]
        body.append(mean + [""])
    return table.markdown_table(header, body)


def table_lines(path: Path) -> list[str]:
    """The benchmark document's table of a run's CSV: a line per graph (``summary``)."""
    return [summary(table.read_csv(path, ReorderRow))]


SECTION = (
    "Locality reordering: vectors per nonzero and SpMM time",
    """\
`Graph.reorder` per graph against the graph's own order, a column group per method: ME-BCRS
vectors per nonzero (MMA work follows them), the SpMM's kernel-time speedup at N and the
reordering's time on the GPU in seconds. The CSV behind each table adds the SpMM bytes at N (a
row of X gathered per vector), the times before and after and the reordering weighed against
200 epochs of a two-layer GCN's SpMMs (`flashgnn bench reorder --help`).""",
)


def run(args) -> int:
    device = torch.device(args.device)
    if cuda_missing(device, "reorder", " for the vectors and the reordering time alone"):
        return 2
    methods = comma_list(args.methods, METHODS, "methods")
    if args.size < 1:
        raise ValueError(f"--size must be >= 1, got {args.size}")
    root = data_dir(args.data)
    names = resolve_names(args.graphs, root)
    warmup, iters = timed_calls(args)
    timer = ProfilerTimer(device, warmup, iters) if device.type == "cuda" else None
    bench = ReorderBench(device, timer, methods, args.size, args.precision, args.check, args.seed)
    for name in names:
        try:
            g = load_graph(name, root, QUICK_SCALE if args.quick else 1, args.cache_dir)
        except Exception as e:  # noqa: BLE001 - recorded in the table instead
            bench.rows.append(ReorderRow(name, None, "load", error=describe_error(e)))
            continue
        print(f"== {g.name}: {g.num_nodes:,} nodes, {g.nnz:,} nonzeros", flush=True)
        try:
            bench.run_graph(g)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory for the format
            bench.rows.append(ReorderRow(g.name, g.nnz, "setup", error=describe_error(e)))
        del g
        if device.type == "cuda":
            torch.cuda.empty_cache()
    env = environment(Timer(device, 1, 1, KERNEL_HEAD_START))
    if timer is not None:
        env["timer"] = "profiler: the summed device time of the SpMM call's kernels"
    if args.csv:
        table.write_csv(bench.rows, args.csv, env, ReorderRow)
    if args.markdown:
        args.markdown.write_text(markdown(bench.rows) + "\n")
    failed = [r for r in bench.rows if r.error]
    print()
    for r in failed:
        print(f"FAILED {r.graph} {r.method}: {r.error}")
    return 1 if failed else 0
