"""``flashgnn bench kernels``: ME-BCRS SpMM and SDDMM against cuSPARSE (through torch.sparse)
on the real graphs and on generated power-law graphs at OGB scale.

ms: median of per-call CUDA-event times after warm-up, each call with a cold L2 (timing.py's
Timer); with --timer back-to-back, the median over CUDA-graph replays of many calls in a row
of the time per call, operands warm in L2 where they fit (timing.py's BackToBackTimer: the
reference implementation's method), for flashgnn's kernels and the baselines alike.
GFLOPS: 2 * nnz * N / t, real nonzeros only (padding slots of 8x1 vectors do not count).
Effective GB/s: bytes / t, counting every array once, and the gathered dense rows once per
vector (ME-BCRS) or per nonzero (CSR), the minimum a kernel without reuse across windows moves:
  SpMM ME-BCRS:   row_ptr + col_idx + values (8 per vector) + X, n_vectors * N + Y, n_rows * N
  SpMM CSR:       indptr + indices + values + X, nnz * N + Y, n_rows * N
  SDDMM ME-BCRS:  row_ptr + col_idx + vec_mask + X, n_rows * K + Y, n_vectors * K + out, 8 per
  vector
  SDDMM CSR:      indptr + indices + X, n_rows * K + Y, nnz * K + out, nnz
each element at its stored size. flashgnn's kernels get X and Y in the precision's storage type
(fp16, bf16; float32 for tf32 and fp32) and A's values as the format stores them (float32),
as a layer calls them. The baselines are float32 CSR with int32 indices: torch.sparse.mm
(cuSPARSE SpMM) and torch.sparse.sampled_addmm (cuSPARSE SDDMM, which computes
beta * input + alpha * (mat1 @ mat2) on input's pattern; here beta = 0, so exactly X Y^T
sampled on A). The ME-BCRS format is built once per graph and block width k (k = 4 for
tf32, 8 otherwise) by the GPU builder; its time is reported in rows of op "build", never
inside an op's time. --check compares every timed result with float64 torch.sparse and
flags errors above 1e-5 (fp32), 2e-3 (tf32, fp16), 1e-2 (bf16), and SDDMM padding slots
that are not 0. --formats adds the SpMM of other formats by name (format_specs.py: cvse4, tca,
gcoo, hbell, ...) in rows of impl "<format> <precision>" (GCOO in fp32 only), each built once
per graph (rows of op "build", impl the format's name); GB/s is not given for them. A
failing configuration is recorded in its row and the run goes on (after a sticky CUDA error,
such as an illegal address, every later GPU row fails too).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from ..formats.mebcrs import MEBCRS
from ..ops import PRECISIONS, sddmm, spmm
from ..precision_context import block_width
from . import table
from .checks import ERROR_BOUND, relative_error, sddmm_check
from .environment import environment
from .errors import describe_error
from .format_specs import SPECS, FormatSpec, parse_formats
from .graphs import BenchGraph, data_dir, load_graph, resolve_names
from .options import (
    QUICK_SCALE,
    SLOW_CPU_RUN,
    add_quick_argument,
    add_run_arguments,
    comma_list,
    cuda_missing,
    timed_calls,
)
from .table import Row
from .timing import TIMERS, BackToBackTimer, Timer, kernel_timer

OPS = ("spmm", "sddmm")
DEFAULT_SIZES = {"spmm": (32, 128, 256), "sddmm": (32, 128)}
DEFAULT_PRECISIONS = {
    "spmm": ("fp16", "bf16", "tf32", "fp32"),
    "sddmm": ("fp16", "bf16", "tf32", "fp32"),
}
BASELINE = {"spmm": "torch.sparse.mm fp32", "sddmm": "sampled_addmm fp32"}
STORAGE = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "tf32": torch.float32,
    "fp32": torch.float32,
}
TIMER_TEXT = {
    "cold": "cold: median of single calls, each on a cold L2",
    "back-to-back": "back-to-back: median over CUDA-graph replays of many calls in a row, per call",
}


def add_arguments(p) -> None:
    p.add_argument(
        "--graphs",
        default="all",
        help="comma list of graph names, or real, generated, all (default all)",
    )
    p.add_argument("--ops", default=",".join(OPS), help="comma list of spmm, sddmm")
    p.add_argument(
        "--precisions", default=None, help="comma list of fp16, bf16, tf32, fp32 (default all four)"
    )
    p.add_argument(
        "--sizes",
        default=None,
        help="N (SpMM) and K (SDDMM), comma list (default: 32,128,256 and 32,128)",
    )
    add_quick_argument(p)
    p.add_argument(
        "--check",
        action="store_true",
        help="check every timed result against float64 torch.sparse and show the relative error",
    )
    p.add_argument(
        "--timer",
        choices=TIMERS,
        default="cold",
        help="cold: single calls, each on a cold L2 (default); back-to-back: many calls in a row "
        "replayed from a CUDA graph, time per call (format builds are always timed cold)",
    )
    p.add_argument(
        "--formats",
        default="mebcrs",
        help="comma list of formats whose SpMM is timed besides ME-BCRS, which always runs "
        "(format_specs.py: mebcrs, cvse2, cvse4, cvse8, tca, gcoo, hbell, blocked); default mebcrs",
    )
    p.add_argument("--csv", type=Path, help="write every row to this CSV file")
    p.add_argument("--markdown", type=Path, help="write the tables to this Markdown file")
    add_run_arguments(p)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--sizes: expected a comma list of positive integers, got {text!r}")
    return sizes


class KernelBench:
    """Runs the configurations of one graph after another and collects their rows."""

    def __init__(
        self,
        device: torch.device,
        timer: Timer | BackToBackTimer,
        build_timer: Timer,
        plan: dict[str, tuple[list[int], list[str]]],
        check: bool,
        seed: int,
        others: list[FormatSpec] = (),
    ):
        self.device, self.timer, self.build_timer = device, timer, build_timer
        self.plan, self.check, self.seed = plan, check, seed
        self.others = list(others)  # formats besides ME-BCRS, SpMM only
        self.other_formats: dict = {}  # the current graph's, by name
        self.rows: list[Row] = []
        self.graphs: list[dict] = []

    # ------------------------------------------------------------------ one graph
    def run_graph(self, g: BenchGraph) -> None:
        dev = self.device
        gen = torch.Generator(dev).manual_seed(self.seed)
        with torch.no_grad():
            indptr = torch.from_numpy(g.indptr).to(dev)
            indices = torch.from_numpy(g.indices).to(dev)
            values = torch.rand(g.nnz, generator=gen, device=dev) + 0.5
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
                csr = torch.sparse_csr_tensor(
                    indptr.to(torch.int32),
                    indices,
                    values,
                    (g.num_nodes, g.num_nodes),
                    check_invariants=False,
                )  # canonical by construction
            csr64 = csr.to(torch.float64) if self.check else None
            ks = sorted(
                {block_width(p) for _, precisions in self.plan.values() for p in precisions},
                reverse=True,
            )
            formats = {k: self._build(g, indptr, indices, values, k) for k in ks}
            self.other_formats = {
                spec.name: self._build_other(g, spec, indptr, indices, values)
                for spec in self.others
            }
            del indptr, indices
            info = {"graph": g.name, "nodes": g.num_nodes, "nnz": g.nnz}
            built = next((f for f in formats.values() if f is not None), None)
            if built is not None:  # the vectors do not depend on k
                info["vectors"] = built.n_vectors
                info["nnz/vector"] = round(g.nnz / max(built.n_vectors, 1), 3)
            self.graphs.append(info)
            for op, (sizes, precisions) in self.plan.items():
                for size in sizes:
                    getattr(self, f"_{op}")(g, csr, csr64, formats, size, precisions, gen)
        del csr, csr64, formats
        self.other_formats = {}
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    def _build(self, g: BenchGraph, indptr, indices, values, k: int) -> MEBCRS | None:
        """The format of the graph with block width k (None when the build fails), built
        on the device once untimed and three times timed."""
        row = Row(g.name, g.nnz, "build", f"k{k}")
        return self._measure(
            row,
            lambda: MEBCRS.from_csr(
                indptr, indices, values, n_cols=g.num_nodes, k=k, device=self.device
            ),
            flops=0,
            nbytes=0,
            warmup=1,
            iters=3,
            timer=self.build_timer,
        )

    def _build_other(self, g: BenchGraph, spec: FormatSpec, indptr, indices, values):
        """The format ``spec`` names (None when the build fails), timed as ``_build``."""
        row = Row(g.name, g.nnz, "build", spec.name)
        return self._measure(
            row,
            lambda: spec.build(indptr, indices, values, g.num_nodes, self.device, "fp16"),
            flops=0,
            nbytes=0,
            warmup=1,
            iters=3,
            timer=self.build_timer,
        )

    def _spmm(self, g, csr, csr64, formats, n: int, precisions, gen) -> None:
        x = torch.randn(g.num_nodes, n, generator=gen, device=self.device)
        ref = torch.sparse.mm(csr64, x.to(torch.float64)) if self.check else None
        flops = 2 * g.nnz * n
        csr_bytes = _csr_bytes(g) + 4 * g.nnz + 4 * n * (g.nnz + g.num_nodes)
        base = Row(g.name, g.nnz, "spmm", BASELINE["spmm"], n)
        check = None if ref is None else lambda out: (relative_error(out, ref), None)
        self._measure(
            base,
            lambda: torch.sparse.mm(csr, x),
            flops,
            csr_bytes,
            check=check,
            bound=ERROR_BOUND["fp32"],
        )
        for precision in precisions:
            row = Row(g.name, g.nnz, "spmm", precision, n)
            fmt = formats[block_width(precision)]
            if fmt is None:
                self.skip(row, "the format build failed")
                continue
            xs = x.to(STORAGE[precision])
            size = xs.element_size()
            nbytes = (
                _mebcrs_bytes(fmt)
                + 8 * fmt.n_vectors * fmt.values.element_size()
                + size * n * (fmt.n_vectors + g.num_nodes)
            )
            self._measure(
                row,
                lambda: spmm(fmt, xs, precision),
                flops,
                nbytes,
                check=check,
                bound=ERROR_BOUND[precision],
                baseline=base,
            )
        for spec in self.others:
            fmt = self.other_formats.get(spec.name)
            for precision in dict.fromkeys(spec.spmm_precision(p) for p in precisions):
                row = Row(g.name, g.nnz, "spmm", f"{spec.name} {precision}", n)
                if fmt is None:
                    self.skip(row, "the format build failed")
                    continue
                xs = x.to(STORAGE[precision])
                self._measure(
                    row,
                    lambda fmt=fmt, xs=xs, precision=precision: spmm(fmt, xs, precision),
                    flops,
                    0,
                    check=check,
                    bound=ERROR_BOUND[precision],
                    baseline=base,
                )

    def _sddmm(self, g, csr, csr64, formats, k_dim: int, precisions, gen) -> None:
        x = torch.randn(g.num_nodes, k_dim, generator=gen, device=self.device)
        y = torch.randn(g.num_nodes, k_dim, generator=gen, device=self.device)
        ref = None
        if self.check:
            ref = torch.sparse.sampled_addmm(
                csr64, x.to(torch.float64), y.to(torch.float64).t(), beta=0.0
            ).values()
        flops = 2 * g.nnz * k_dim
        csr_bytes = _csr_bytes(g) + 4 * k_dim * (g.num_nodes + g.nnz) + 4 * g.nnz
        base = Row(g.name, g.nnz, "sddmm", BASELINE["sddmm"], k_dim)
        check = None if ref is None else lambda out: (relative_error(out.values(), ref), None)
        self._measure(
            base,
            lambda: torch.sparse.sampled_addmm(csr, x, y.t(), beta=0.0),
            flops,
            csr_bytes,
            check=check,
            bound=ERROR_BOUND["fp32"],
        )
        for precision in precisions:
            row = Row(g.name, g.nnz, "sddmm", precision, k_dim)
            fmt = formats[block_width(precision)]
            if fmt is None:
                self.skip(row, "the format build failed")
                continue
            xs, ys = x.to(STORAGE[precision]), y.to(STORAGE[precision])
            size = xs.element_size()
            nbytes = (
                _mebcrs_bytes(fmt)
                + fmt.n_vectors
                + size * k_dim * (g.num_nodes + fmt.n_vectors)
                + 4 * 8 * fmt.n_vectors
            )
            self._measure(
                row,
                lambda: sddmm(fmt, xs, ys, precision),
                flops,
                nbytes,
                check=None if ref is None else sddmm_check(fmt, ref),
                bound=ERROR_BOUND[precision],
                baseline=base,
            )

    # ------------------------------------------------------------------ one row
    def _measure(
        self,
        row: Row,
        fn,
        flops: int,
        nbytes: int,
        *,
        check=None,
        bound: float | None = None,
        baseline: Row | None = None,
        warmup: int | None = None,
        iters: int | None = None,
        timer: Timer | None = None,
    ):
        """Time ``fn`` into ``row`` (by ``timer``, default the bench's); a failure is written into
        the row, never raised, so one failing kernel does not end the run. Returns fn's result,
        None on failure."""
        result = None
        try:
            m = (timer or self.timer)(fn, warmup=warmup, iters=iters)
            result = m.result
            row.ms = m.ms
            if flops:
                row.gflops = flops / m.ms / 1e6
            if nbytes:
                row.gbps = nbytes / m.ms / 1e6
            if m.extra_bytes is not None:
                row.extra_mb = m.extra_bytes / 2**20
            if baseline is not None and baseline.ms and not baseline.error:
                row.speedup = baseline.ms / m.ms
            if check is not None:
                row.rel_err, problem = check(result)
                if problem is None and not row.rel_err <= bound:  # also catches NaN
                    problem = f"relative error {row.rel_err:.1e} above {bound:.0e}"
                if problem:
                    row.error = f"check failed: {problem}"
        except Exception as e:  # noqa: BLE001 - recorded in the table instead
            row.error = describe_error(e)
            result = None
            if isinstance(e, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
        self._add(row)
        return result

    def skip(self, row: Row, reason: str) -> None:
        row.error = f"not run: {reason}"
        self._add(row)

    def _add(self, row: Row) -> None:
        self.rows.append(row)
        units = {
            "ms": " ms",
            "gflops": " GFLOPS",
            "gbps": " GB/s",
            "speedup": " of base",
            "rel_err": " err",
        }
        cols = ["graph", "op", "impl", "size", *units, "error"]
        text = table.cells([row], cols)[0]
        print("  ".join(c + units.get(name, "") for name, c in zip(cols, text) if c), flush=True)


def ours(impl: str) -> bool:
    """Whether a row's impl is one of flashgnn's kernels: a precision (ME-BCRS) or "<format>
    <precision>" (--formats)."""
    name, _, precision = impl.rpartition(" ")
    return precision in PRECISIONS and (not name or name in SPECS)


def _csr_bytes(g: BenchGraph) -> int:
    return 4 * (g.num_nodes + 1) + 4 * g.nnz


def _mebcrs_bytes(fmt: MEBCRS) -> int:
    return 8 * (fmt.n_windows + 1) + 4 * fmt.n_vectors


# ---------------------------------------------------------------------- reporting
def summary(
    rows: list[Row], real: set[str], generated: list[str]
) -> tuple[list[str], list[list[str]]]:
    """One line per (op, precision, size) of flashgnn's kernels: geometric-mean speedup over the
    real graphs, speedup and effective GB/s on each generated graph, and how many rows failed."""
    mean = {(r.op, r.impl, r.size): r for r in table.geomean_rows(rows, real, "geomean")}
    by_graph = {(r.graph, r.op, r.impl, r.size): r for r in rows}
    keys = list(dict.fromkeys((r.op, r.impl, r.size) for r in rows if r.op in OPS and ours(r.impl)))
    header = ["op", "precision", "N/K", f"geomean x (real, {len(real)})"] + list(generated)
    header.append("failed")
    body = []
    for op, impl, size in keys:
        m = mean.get((op, impl, size))
        line = [op, impl, str(size), f"{m.speedup:.2f}x" if m else ""]
        for g in generated:
            r = by_graph.get((g, op, impl, size))
            if r is not None and r.error:
                line.append("error")
            elif r is not None and r.speedup:
                line.append(f"{r.speedup:.2f}x, {r.gbps:.0f} GB/s")
            else:
                line.append("")
        line.append(
            str(sum(1 for r in rows if (r.op, r.impl, r.size) == (op, impl, size) and r.error))
        )
        body.append(line)
    return header, body


def markdown(env: dict, summary_table, rows: list[Row], graphs: list[dict]) -> str:
    cols = table.used_columns(rows)
    graph_cols = list(dict.fromkeys(k for g in graphs for k in g))
    parts = [
        "# Kernel benchmark",
        "",
        "\n".join(f"- {k}: {v}" for k, v in env.items()),
        "",
        "Method, GFLOPS and GB/s formulas: `flashgnn/benchmarking/kernels.py` docstring. Speedup "
        "(x base) = time of the fp32 cuSPARSE baseline / time; geomean over the real graphs.",
        "",
        "## Summary",
        "",
        table.markdown_table(*summary_table),
        "",
        "## Graphs",
        "",
        table.markdown_table(
            graph_cols,
            [
                [
                    f"{g.get(c, ''):,}" if isinstance(g.get(c), int) else str(g.get(c, ""))
                    for c in graph_cols
                ]
                for g in graphs
            ],
        ),
        "",
        "## All rows",
        "",
        table.markdown_table(table.headers(cols), table.cells(rows, cols)),
        "",
    ]
    return "\n".join(parts)


def run(args) -> int:
    device = torch.device(args.device)
    if cuda_missing(device, "kernels", SLOW_CPU_RUN):
        return 2
    ops = comma_list(args.ops, OPS, "ops")
    chosen = comma_list(args.precisions, PRECISIONS, "precisions") if args.precisions else None
    sizes = _sizes(args.sizes) if args.sizes else None
    plan = {
        op: (sizes or list(DEFAULT_SIZES[op]), chosen or list(DEFAULT_PRECISIONS[op])) for op in ops
    }
    root = data_dir(args.data)
    names = resolve_names(args.graphs, root)
    warmup, iters = timed_calls(args)
    cold = kernel_timer("cold", device, warmup, iters)
    timer = cold if args.timer == "cold" else kernel_timer(args.timer, device, warmup, iters)
    others = [spec for spec in parse_formats(args.formats) if spec.name != "mebcrs"]
    bench = KernelBench(device, timer, cold, plan, args.check, args.seed, others)
    scale = QUICK_SCALE if args.quick else 1
    real, generated = set(), []
    for name in names:
        try:
            g = load_graph(name, root, scale, args.cache_dir)
        except Exception as e:  # noqa: BLE001 - recorded in the table instead
            bench.skip(Row(name, 0, "load", ""), describe_error(e))
            continue
        if g.generated:
            generated.append(g.name)
        else:
            real.add(g.name)
        print(f"== {g.name}: {g.num_nodes:,} nodes, {g.nnz:,} nonzeros", flush=True)
        try:
            bench.run_graph(g)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory for the inputs or the reference
            bench.skip(Row(g.name, g.nnz, "setup", ""), describe_error(e))
        del g

    rows = bench.rows + table.geomean_rows(bench.rows, real, "geomean real")
    summary_table = summary(bench.rows, real, generated)
    peak = timer.peak_bytes
    env = environment(cold)
    env["timer"] = TIMER_TEXT[args.timer]
    if peak is not None:
        env["peak_memory"] = f"{peak / 2**30:.2f} GiB allocated"
    if args.csv:
        table.write_csv(rows, args.csv, env, Row)
    if args.markdown:
        args.markdown.write_text(markdown(env, summary_table, rows, bench.graphs))
    failed = [r for r in bench.rows if r.error]
    print()
    for r in failed:
        print(f"FAILED {r.graph} {r.op} {r.impl} {r.size or ''}: {r.error}")
    device_line = "  ".join(
        f"{k}: {env[k]}" for k in ("gpu", "copy_bandwidth", "peak_memory") if k in env
    )
    if device_line:
        print(device_line)
    print(table.text_table(*summary_table))
    return 1 if failed else 0
