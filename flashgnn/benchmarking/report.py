"""``flashgnn bench report``: Markdown tables and PNG plots from the CSV files the other
benchmarks write, every table and plot stamped with where its numbers were measured (GPU,
driver, torch, date: the ``<csv>.json`` each benchmark writes beside its CSV).

--results DIR: the whole benchmark document (BENCHMARKS.md: how to read, how we measure, how
to reproduce, one table per benchmark and GPU) from a results folder, ``<gpu>/<benchmark>.csv``
as ``flashgnn bench <benchmark> --results DIR`` writes them (``document.py``).
Else from single files, any subset: --kernels, --layers, --training, --e2e, --ablation (the --csv of
``flashgnn bench kernels``, ``layers``, ``training``, ``e2e``, ``ablation``; the ablation's
rows are keyed by their ``vector`` column, 8 or 16).
Tables: the speedup of each configuration over the graphs (how many, geometric mean, min,
median, max) against each baseline of its benchmark: kernels per (op, precision, N/K) against
fp32 cuSPARSE, over the real graphs and on each generated graph apart; layers, training and
e2e per (model, impl, precision) against the fastest PyG fp32 and fp16 path. Kernel throughput
(GFLOPS) over the graphs. 8x1 against 16x1: per (op, precision, size) the ratios
16x1 / 8x1 of time, MMAs and bytes over the graphs (time ratio > 1: 8x1 is faster).
Plots (--plots DIR; matplotlib, ``pip install 'flashgnn[plot]'``): ``<benchmark>_speedup*.png``
(a box and the points over graphs per configuration of our code), ``kernels_throughput.png``
(GFLOPS against nnz, per op and N/K), ``vectors.png`` (16x1 / 8x1 time per op and precision).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from ..ops import PRECISIONS
from . import document, plots, table
from .ablation import AblationRow
from .graphs import GENERATED
from .kernels import OPS
from .layers import ModelRow
from .table import Row, geomean

MODEL_BENCHMARKS = ("layers", "training", "e2e")
MODEL_BASELINES = (
    ("speedup", "", "the fastest PyG fp32"),
    ("speedup_fp16", "_fp16", "the fastest PyG fp16"),
)


def add_arguments(p) -> None:
    p.add_argument("--kernels", type=Path, help="CSV of flashgnn bench kernels")
    p.add_argument("--layers", type=Path, help="CSV of flashgnn bench layers")
    p.add_argument("--training", type=Path, help="CSV of flashgnn bench training")
    p.add_argument("--e2e", type=Path, help="CSV of flashgnn bench e2e")
    p.add_argument(
        "--ablation",
        type=Path,
        help="CSV of 8x1 against 16x1 vectors (a 'vector' column of 8 or 16)",
    )
    p.add_argument(
        "--results",
        type=Path,
        help="results folder (<gpu>/<benchmark>.csv): write the benchmark document",
    )
    p.add_argument(
        "--markdown", type=Path, required=True, help="write the tables to this Markdown file"
    )
    p.add_argument("--plots", type=Path, help="write PNG plots into this folder")


# ---------------------------------------------------------------------- statistics
def spread_table(
    key_names: list[str],
    groups: dict[tuple, list[float]],
    unit: str = "x",
    extra: dict[str, dict[tuple, str]] | None = None,
) -> tuple[list[str], list[list[str]]]:
    """One line per key: the key, how many values, their geometric mean, min, median, max
    (with ``unit``), then ``extra`` columns (name -> key -> cell)."""

    def cell(v: float) -> str:
        return f"{v:.2f}x" if unit == "x" else f"{v:.4g}" if v < 1000 else f"{v:.0f}"

    header = [*key_names, "graphs", f"geomean {unit}", "min", "median", "max", *(extra or {})]
    body = [
        [
            *map(str, key),
            str(len(v)),
            cell(geomean(v)),
            cell(min(v)),
            cell(statistics.median(v)),
            cell(max(v)),
            *(column.get(key, "") for column in (extra or {}).values()),
        ]
        for key, v in groups.items()
    ]
    return header, body


def stamp(env: dict | None, source: Path) -> str:
    """'<GPU>, driver <version>, torch <version>, <date>' of a result file's environment."""
    if env is None:
        return f"{source.name}: environment not recorded (no {table.environment_path(source).name})"
    device = env.get("gpu") or f"CPU {env.get('cpu', 'unknown')}"
    driver = f", driver {env['driver']}" if "driver" in env else ""
    return (
        f"{device}{driver}, torch {env.get('torch', '?')}, {env.get('date', 'date not recorded')}"
    )


class Report:
    """Collects Markdown sections and plot files."""

    def __init__(self, plot_dir: Path | None):
        self.parts: list[str] = []
        self.plot_dir = plot_dir
        self.plots: list[Path] = []

    def table(self, title: str, note: str, header: list[str], body: list[list[str]]) -> None:
        self.parts += [
            f"### {title}",
            "",
            f"_{note}_",
            "",
            table.markdown_table(header, body) if body else "(no rows)",
            "",
        ]

    def plot(self, draw, name: str, *args, **kwargs) -> None:
        """``draw(*args, path=<plot folder>/name, **kwargs)`` when plots are wanted."""
        if self.plot_dir is not None:
            self.plots.append(draw(*args, path=self.plot_dir / name, **kwargs))


# ---------------------------------------------------------------------- sections
def _group(rows, key, value) -> dict[tuple, list[float]]:
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        v = value(r)
        if v and not r.error:
            groups[key(r)].append(v)
    return dict(groups)


def _generated(graph: str) -> bool:
    return graph.split("/")[0] in GENERATED


def kernels_section(rep: Report, path: Path) -> None:
    rows = [r for r in table.read_csv(path, Row) if r.op in OPS and r.nnz is not None]
    note = stamp(table.read_environment(path), path)
    ours = [r for r in rows if r.impl in PRECISIONS]

    def key(r: Row) -> tuple:
        return r.op, r.impl, r.size, r.graph if _generated(r.graph) else "real graphs"

    names = ["op", "precision", "N/K", "graphs"]
    rep.parts += [f"## Kernels (`{path.name}`)", ""]
    header, body = spread_table(names[:3] + ["on"], _group(ours, key, lambda r: r.speedup))
    rep.table("Speedup against fp32 cuSPARSE", note, header, body)
    header, body = spread_table(
        names[:3] + ["on"], _group(ours, key, lambda r: r.gflops), unit="GFLOPS"
    )
    rep.table("Throughput (GFLOPS)", note, header, body)

    real = _group(
        [r for r in ours if not _generated(r.graph)],
        lambda r: f"{r.op} {r.impl} {r.size}",
        lambda r: r.speedup,
    )
    marked: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for r in ours:
        if _generated(r.graph) and r.speedup and not r.error:
            marked[f"{r.op} {r.impl} {r.size}"].append((r.graph, r.speedup))
    if real or marked:
        labels = dict.fromkeys([*real, *marked])
        rep.plot(
            plots.distribution,
            "kernels_speedup.png",
            {k: real.get(k, []) for k in labels},
            "speedup against fp32 cuSPARSE",
            "Kernels over graphs (op precision N/K)",
            note,
            marked=dict(marked),
        )
    panels: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.gflops and not r.error:
            panels[f"{r.op} N/K={r.size}"][r.impl].append((r.nnz, r.gflops))
    if panels:
        rep.plot(
            plots.scatter,
            "kernels_throughput.png",
            panels,
            "nonzeros",
            "GFLOPS",
            "Throughput",
            note,
        )


def model_section(rep: Report, name: str, path: Path) -> None:
    rows = table.read_csv(path, ModelRow)
    note = stamp(table.read_environment(path), path)
    rep.parts += [f"## {name} (`{path.name}`)", ""]
    for column, suffix, baseline in MODEL_BASELINES:
        groups = _group(
            rows, lambda r: (r.model, r.impl, r.precision), lambda r: getattr(r, column)
        )
        if not groups:
            continue
        rep.table(
            f"Speedup against {baseline}",
            note,
            *spread_table(["model", "impl", "precision"], groups),
        )
        ours = {f"{m} {p}": v for (m, impl, p), v in groups.items() if impl == "flashgnn"}
        if ours:
            rep.plot(
                plots.distribution,
                f"{name}_speedup{suffix}.png",
                ours,
                f"speedup against {baseline}",
                f"{name}: flashgnn over graphs (model precision)",
                note,
            )
    failed = [r for r in rows if r.error]
    if failed:
        rep.parts += [
            f"Failed rows: {len(failed)} ("
            + "; ".join(f"{r.graph} {r.model} {r.impl} {r.precision}: {r.error}" for r in failed)
            + ")",
            "",
        ]


def ablation_section(rep: Report, path: Path) -> None:
    rows = table.read_csv(path, AblationRow)
    note = stamp(table.read_environment(path), path)
    by = {(r.graph, r.op, r.precision, r.size, r.vector): r for r in rows if not r.error}
    pairs = [(by[k], by[(*k[:4], 16)]) for k in by if k[4] == 8 and (*k[:4], 16) in by]
    ratios: dict[str, dict[tuple, list[float]]] = {
        c: defaultdict(list) for c in ("ms", "mmas", "bytes")
    }
    for eight, sixteen in pairs:
        for column, groups in ratios.items():
            a, b = getattr(eight, column), getattr(sixteen, column)
            if a and b:
                groups[(eight.op, eight.precision, eight.size)].append(b / a)
    extra = {
        f"geomean {c} 16x1/8x1": {k: f"{geomean(v):.2f}" for k, v in ratios[c].items()}
        for c in ("mmas", "bytes")
    }
    rep.parts += [f"## 8x1 against 16x1 vectors (`{path.name}`)", ""]
    rep.table(
        "Time 16x1 / 8x1 over graphs (> 1: 8x1 faster)",
        note,
        *spread_table(["op", "precision", "size"], dict(ratios["ms"]), extra=extra),
    )
    body = [
        [
            a.graph,
            a.op,
            a.precision,
            str(a.size),
            f"{a.ms:.4g}",
            f"{b.ms:.4g}",
            f"{b.ms / a.ms:.2f}",
        ]
        for a, b in pairs
        if a.ms and b.ms
    ]
    rep.table(
        "Per graph",
        note,
        ["graph", "op", "precision", "size", "ms 8x1", "ms 16x1", "16x1 / 8x1"],
        body,
    )
    if ratios["ms"]:
        rep.plot(
            plots.distribution,
            "vectors.png",
            {" ".join(map(str, k)): v for k, v in ratios["ms"].items()},
            "time 16x1 / time 8x1",
            "8x1 against 16x1 vectors over graphs (op precision size)",
            note,
        )


def run(args) -> int:
    inputs = {name: getattr(args, name) for name in ("kernels", *MODEL_BENCHMARKS, "ablation")}
    given = {k: v for k, v in inputs.items() if v is not None}
    if args.results is not None:
        return write_document(args, given)
    if not given:
        print(
            "flashgnn bench report: give at least one of --kernels, --layers, --training, "
            "--e2e, --ablation, or --results",
            file=sys.stderr,
        )
        return 2
    absent = [str(p) for p in given.values() if not p.is_file()]
    if absent:
        print(f"flashgnn bench report: no such file: {', '.join(absent)}", file=sys.stderr)
        return 2
    why_not = plots.missing() if args.plots is not None else None
    plot_dir = None if args.plots is None or why_not else args.plots
    if plot_dir is not None:
        plot_dir.mkdir(parents=True, exist_ok=True)
    rep = Report(plot_dir)
    rep.parts += [
        "# Benchmark report",
        "",
        "Sources: " + ", ".join(f"`{p}`" for p in given.values()),
        "",
    ]
    if why_not:
        rep.parts += [why_not, ""]
        print(why_not, file=sys.stderr)
    if "kernels" in given:
        kernels_section(rep, given["kernels"])
    for name in MODEL_BENCHMARKS:
        if name in given:
            model_section(rep, name, given[name])
    if "ablation" in given:
        ablation_section(rep, given["ablation"])
    args.markdown.write_text("\n".join(rep.parts))
    print(f"wrote {args.markdown}" + "".join(f"\nwrote {p}" for p in rep.plots))
    return 0


def write_document(args, given: dict[str, Path]) -> int:
    """The benchmark document of the folder --results, written to --markdown."""
    if given or args.plots is not None:
        print(
            "flashgnn bench report: --results takes no single files and no --plots", file=sys.stderr
        )
        return 2
    if not args.results.is_dir():
        print(f"flashgnn bench report: no such folder: {args.results}", file=sys.stderr)
        return 2
    args.markdown.write_text(document.build(args.results, args.markdown.resolve().parent))
    print(f"wrote {args.markdown}")
    return 0
