"""BENCHMARKS.md: the repository's benchmark document, built from a results folder
(``results.py``'s layout) by ``flashgnn bench report --results``, never written by hand.

The document holds how to read the tables, how they are measured and how to reproduce them,
then one section per benchmark with one table per GPU, each stamped with the commit, GPU,
driver, CUDA, torch and date of its run and the command that reproduces it. The tables
summarise (geometric means over graphs, flashgnn's rows against the fastest PyG path); every
row of a run stays in its CSV, which the table links.
"""

from __future__ import annotations

import datetime
import os
import statistics
from pathlib import Path

from . import reordering, table
from .ablation import AblationRow
from .ablation import summary as ablation_summary
from .accuracy import AccuracyRow
from .accuracy import failures as accuracy_failures
from .accuracy import summary as accuracy_summary
from .distributed import ScalingRow
from .distributed import summary as scaling_summary
from .drop_in import DropInRow
from .drop_in import summary as drop_in_summary
from .graphs import GENERATED
from .kernels import OPS
from .kernels import summary as kernel_summary
from .layers import HEADERS as MODEL_HEADERS
from .layers import ModelRow, step_ms
from .results import RESULTS_DIR, before_path, find
from .seeds import SeedRow, answers, backend_table
from .sparse_linear import Row as SparseLinearRow
from .sparse_linear import summary as sparse_linear_summary
from .table import Row, geomean

REPORT_COMMAND = f"flashgnn bench report --results {RESULTS_DIR} --markdown BENCHMARKS.md"
RUN_ALL = "benchmarks/run_all.sh"

INTRO = f"""\
<!-- Generated from {RESULTS_DIR}/ by `{REPORT_COMMAND}`: do not edit by hand. -->

# Benchmarks

Generated from [`{RESULTS_DIR}/`]({RESULTS_DIR}/). Each table is one run on one GPU, stamped
with its commit, GPU, driver, CUDA, torch, date and command; its CSV holds every row.

## How to read

- **x cuSPARSE** (kernel tables): the time of the same operation by cuSPARSE in fp32
  (`torch.sparse.mm` for SpMM, `torch.sparse.sampled_addmm` for SDDMM, float32 CSR), same graph,
  same N (SpMM's dense width) or K (SDDMM's), same timer, divided by flashgnn's time in the
  column's precision. Above 1x flashgnn is faster. flashgnn reads its inputs in the precision's
  storage type (fp16, bf16; float32 for tf32 and fp32) and accumulates in fp32.
- **x PyG fp32 / x PyG fp16** (layer and training tables): the step time of the fastest PyG
  path (`adj_t`, i.e. cuSPARSE; `adj_t cached`; `edge_index`, gather / scatter) for the same layer
  or model and graph, in fp32 (fp16: under autocast), divided by flashgnn's step time. The
  column "fastest PyG fp32" names that path and its time.
- **geomean**: the geometric mean of the per-graph ratios over the real graphs (the shared
  datasets); the generated power-law graphs at OGB scale (powerlaw_products: 2.4M nodes, 60M
  nonzeros; powerlaw_reddit: 233k nodes, 85M nonzeros) are shown apart, one column each.
  "lowest" is the smallest ratio over the real graphs.
- **Precisions**: fp16, bf16 and tf32 (float32 rounded) on tensor cores, fp32 on CUDA cores.
- **Which time**: kernel ratios use GPU time per call; a layer table's ratios the larger of `ms`
  (CUDA events) and `wall ms` (host clock); a training table's `ms` is an epoch by events and
  `graph ms` the epoch replayed from a CUDA graph. How each is taken: below.

## How we measure

Timers: `flashgnn/benchmarking/timing.py`; each benchmark's method: its module's docstring
(`flashgnn bench <benchmark> --help`).

- **Cold single call** (`--timer cold`, the ablation, format builds, layer `ms`, epochs): before
  each call the GPU reads four times its L2 (a cold cache) and sleeps (1 ms before a kernel, 0.2
  ms before a step) so the host enqueues the call first; CUDA events bracket it (GPU work without
  the launch path; floor about 4 us); the median of `--iters` calls after `--warmup`.
- **Back to back** (`--timer back-to-back`, the kernel tables here): as many calls in a row as
  fill about 2 ms (at most 100) captured in one CUDA graph; a sample is one replay's event time
  divided by the calls, the time is the median of the samples. Operands stay in L2 from call to
  call where they fit and the host's cost is hidden entirely: what a call costs inside a longer
  run of GPU work, such as a replayed training step.
- **Eager wall loop** (a layer table's `wall ms`): after the timed calls, `--iters` calls back to
  back, no sleep and no L2 flush, timed by the host's clock with the GPU synchronised before and
  after, per call. It includes all the host does (Python, autograd, launches): where the host is
  slower than the GPU (small graphs) this is the step's cost, which the event timer hides up to
  its sleep. With `--rounds R` a layer's rows are timed in turns, R rounds, median over rounds.
- **Replayed step** (`--cuda-graph`, `graph ms`): the whole step or epoch captured in a CUDA
  graph and replayed, timed by events: GPU time with no host launches.
- **Checks**: `--check` compares every timed kernel result with float64 torch.sparse (bounds:
  fp32 1e-5, tf32 and fp16 2e-3, bf16 1e-2; SDDMM padding slots must be 0); layers record the
  relative error of the output against PyG fp32. A failing configuration is recorded in its row
  and the run goes on.

## How to reproduce

```
{RUN_ALL}                            # every table below: about 10 minutes on one H100
{RUN_ALL} kernels layers             # some of them (kernels, layers, training, e2e, ablation)
{RUN_ALL} --compare kernels layers   # and show each new table against the one it replaces
```

Each benchmark runs with `--results {RESULTS_DIR}` (any `flashgnn bench` command takes it),
writing `{RESULTS_DIR}/<gpu>/<benchmark>.csv` and its stamp (`.csv.json`) in place of that GPU's
last run (`--compare` keeps it as `<benchmark>.before.csv`, shown under the new table); then
`{REPORT_COMMAND}` regenerates this file. Real graphs come from `$FLASHGNN_DATA` (default
`../shared/datasets`); generated graphs are made once and cached (`--cache-dir`).
"""

SECTIONS = {  # benchmark (CSV name): (title, what it measures)
    "kernels": (
        "Kernels: SpMM and SDDMM against cuSPARSE",
        """\
SpMM (A X, X of N features) and SDDMM (X Y^T sampled on A, K features) on ME-BCRS, every real
graph and the two generated ones; x cuSPARSE per precision, the geomean and the lowest ratio over
the real graphs, then each generated graph (with the effective GB/s: bytes moved / time).""",
    ),
    "format build": (
        "Format build: CSR to ME-BCRS on the GPU",
        """\
`MEBCRS.from_csr` on the device, the kernel benchmark's "build" rows: block width k = 8 (fp16,
bf16, fp32) and k = 4 (tf32), cold single calls (1 warm-up, 3 timed), never inside an op's time.
Median over the real graphs, then each generated graph.""",
    ),
    "layers": (
        "Layers: one GCN, AGNN (and GAT) layer against PyG",
        """\
One layer call, forward and backward (the gradients of the input and the weights), flashgnn
against PyG's layer with the same weights: GCNConv 128 -> 128, AGNNConv on 32 features, GATConv
64 -> 4 heads of 16; on the generated ogbn-products-scale graph and musae_github, self-loops
added. flashgnn's layers replay their kernels from CUDA graphs on graphs of up to 4M nonzeros;
"flashgnn eager" rows are the same layers with that replay off.""",
    ),
    "training": (
        "Training epochs at ogbn-products scale",
        """\
Full-graph training epochs (forward, loss, backward, Adam step) on the synthetic dataset at
ogbn-products scale (2.4M nodes, about 63M nonzeros with self-loops, 100 features): GCN 2x128
and AGNN 4x32, flashgnn against the same models built from PyG layers.""",
    ),
    "e2e": (
        "End-to-end training epochs",
        """\
Full-graph training epochs of GCN, AGNN and GAT models on real and generated graphs, flashgnn
against the same models built from PyG layers; `prep ms` builds the implementation's input once
per graph, `graph ms` replays the epoch from a CUDA graph.""",
    ),
    "accuracy": (
        "Accuracy against PyG and the papers",
        """\
Test accuracy (%) of GCN, GAT and AGNN, each config (`configs/<model>-<data>.yaml`) with its
paper's architecture and recipe, at the epoch its stopping rule keeps: mean +- std over the
seeds for each flashgnn precision and for the same network built from PyG's layers ("pyg":
GCNConv, GATConv, AGNNConv in fp32, from the same initial weights, data, seeds and training
loop), beside the paper's figure. Last columns, in points: fp32 - pyg, and the largest distance
of tf32, fp16 or bf16 from fp32. musae_facebook has no paper figure (a seeded 60/20/20 split).""",
    ),
    "pyg-drop-in": (
        "PyG drop-in layers",
        """\
`examples/pyg_drop_in.py`: PyG's example models trained with `torch_geometric.nn`, then with
`flashgnn.nn.pyg` imported in its place: test accuracy and the median epoch by the host's clock.
PyG runs in its fastest settings (GCNConv cached, on edge_index and on a CSR adj_t); x fastest
PyG: PyG's fastest epoch of the model over flashgnn's.""",
    ),
    "ablation": (
        "Ablation: 8x1 vectors against 16x1 blocks",
        """\
ME-BCRS's 8x1 vectors against a 16x1 blocked baseline (16-row windows, 16 x 8 blocks) on every
graph, fp16: on how many graphs 8x1 is faster, and the 16x1 / 8x1 ratios of time, MMAs and
bytes moved (geomeans over graphs; above 1x 8x1 is better).""",
    ),
    "seeds": (
        "Seed backends: CVSE, TCA, GCOO, HB-ELL against cuBLAS and cuSPARSE",
        """\
The seed papers' formats on DLMC ResNet-50 weights (each nonzero a V x 1 vector), the real
graphs and generated patterns, against cuBLAS dense and cuSPARSE CSR in the same storage type;
the papers' claims checked on this GPU, then one line per backend (geomeans of kernel time).""",
    ),
    "sparse-linear": (
        "SparseLinear against cuBLAS",
        """\
`flashgnn.nn.SparseLinear` (W pruned to V x 1 vectors) on the shape in the stamp, against the
dense layer (torch.matmul, cuBLAS) in the same storage type: per V and sparsity (the fraction of
W's vectors pruned), forward / forward + backward over dense by kernel time, the forward's
useful TFLOP/s in brackets, and the sparsity from which the forward beats dense.""",
    ),
    "distributed": (
        "Several GPUs: strong scaling",
        """\
One training config (in the stamp) on 1, 2, 4, ... processes, one GPU each: mean epoch time
after the first, efficiency t1 / (P tP), and for a partitioned run the bytes a training step
receives on the busiest rank against their lower bound (each halo row once each way), the
halo rows, the edge cut and the largest peak GPU memory of a rank.""",
    ),
}
SOURCE = {"format build": "kernels"}  # sections built from another benchmark's CSV
KERNEL_PRECISIONS = ("fp16", "bf16", "tf32", "fp32")


def build(results: Path, base: Path) -> str:
    """The document for the results folder ``results``; links are relative to ``base`` (the
    folder the document is written to). ValueError for a CSV no section renders."""
    found = find(results)
    unknown = sorted({f"{slug}/{name}.csv" for slug, name, _ in found if name not in SECTIONS})
    if unknown:
        raise ValueError(
            f"no section of the report renders {', '.join(unknown)} (benchmarks: "
            f"{', '.join(n for n in SECTIONS if n not in SOURCE)})"
        )
    parts = [INTRO]
    for name, (title, about) in SECTIONS.items():
        runs = [path for _, bench, path in found if bench == SOURCE.get(name, name)]
        if not runs:
            continue
        parts += [f"## {title}", "", about, ""]
        for path in runs:
            env = table.read_environment(path) or {}
            lines = stamp(env, path, base)
            if name in SOURCE:  # the run's note is in its own section
                lines = lines[:3]
            parts += [f"### {env.get('gpu', path.parent.name)}", "", *lines, ""]
            parts += [*RENDER[name](path), ""]
            before = before_path(path)
            if name in CHANGE and before.is_file():
                parts += [
                    *earlier(table.read_environment(before) or {}, before, base),
                    "",
                    *CHANGE[name](before, path),
                    "",
                ]
    return "\n".join(parts).rstrip("\n") + "\n"


# ---------------------------------------------------------------------- stamps
def stamp(env: dict, path: Path, base: Path) -> list[str]:
    """The lines that say where and how a run was measured."""
    link = _link(path, base)
    if not env:
        return [f"Environment not recorded; every row: [`{link}`]({link})."]
    device = env.get("gpu") or f"CPU {env.get('cpu', 'unknown')}"
    details = ", ".join(
        f"{label} {env[key]}"
        for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "torch"))
        if key in env
    )
    if details:
        device += f" ({details})"
    lines = [
        (
            f"Commit `{short(env.get('commit', 'unknown'))}`, {device}, "
            f"{when(env.get('date', 'date not recorded'))}; every row: [`{link}`]({link})."
        ),
        "",
        f"Command: `{env.get('command', 'not recorded')}`",
    ]
    if "timer" in env:
        lines[-1] += f"; timer: {env['timer'].split(':')[0]}"
    if "note" in env:
        lines += ["", env["note"]]
    return lines


def earlier(env: dict, path: Path, base: Path) -> list[str]:
    """The line that introduces the comparison with the run kept in ``path``."""
    link = _link(path, base)
    return [
        (
            f"Against the run before it (commit `{short(env.get('commit', 'unknown'))}`, "
            f"{env.get('gpu', 'GPU not recorded')}, {when(env.get('date', 'date not recorded'))}, "
            f"`{env.get('command', 'command not recorded')}`; every row: [`{link}`]({link})), "
            "before -> now:"
        )
    ]


def _link(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def short(commit: str) -> str:
    """A commit hash shortened to 7 digits, its "-dirty" mark kept."""
    head, dirty, _ = commit.partition("-dirty")
    return (head[:7] if all(c in "0123456789abcdef" for c in head) else head) + dirty


def when(date: str) -> str:
    """An ISO date as "YYYY-MM-DD HH:MM UTC" (without the zone when the date names none)."""
    try:
        t = datetime.datetime.fromisoformat(date)
    except ValueError:
        return date
    if "T" not in date:
        return t.date().isoformat()
    if t.tzinfo is None:
        return t.strftime("%Y-%m-%d %H:%M")
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# ---------------------------------------------------------------------- tables
def _generated(graph: str) -> bool:
    return graph.split("/")[0] in GENERATED


def kernels_table(path: Path) -> list[str]:
    """x cuSPARSE per (op, precision, N/K): ``kernels.summary`` with the lowest real graph."""
    rows = [r for r in table.read_csv(path, Row) if r.nnz is not None]
    ours = [r for r in rows if r.op in OPS and r.impl in KERNEL_PRECISIONS]
    real = {r.graph for r in ours if not _generated(r.graph)}
    generated = list(dict.fromkeys(r.graph for r in ours if _generated(r.graph)))
    header, body = kernel_summary(rows, real, generated)
    lowest: dict[tuple, float] = {}
    for r in ours:
        if r.graph in real and r.speedup and not r.error:
            key = (r.op, r.impl, str(r.size))
            lowest[key] = min(lowest.get(key, r.speedup), r.speedup)
    header = [*header[:3], f"x cuSPARSE: geomean ({len(real)} real)", "lowest (real)", *header[4:]]
    body = [
        [*line[:4], f"{lowest[key]:.2f}x" if (key := tuple(line[:3])) in lowest else "", *line[4:]]
        for line in body
    ]
    return [table.markdown_table(header, body), "", check_line([r for r in rows if r.op in OPS])]


def kernel_speedups(path: Path) -> dict[tuple, dict[str, float]]:
    """(op, precision, N/K) -> graph -> x cuSPARSE of every successful row of ours."""
    out: dict[tuple, dict[str, float]] = {}
    for r in table.read_csv(path, Row):
        ours = r.nnz is not None and r.op in OPS and r.impl in KERNEL_PRECISIONS
        if ours and r.speedup and not r.error:
            out.setdefault((r.op, r.impl, r.size), {})[r.graph] = r.speedup
    return out


def kernels_change(before: Path, now: Path) -> list[str]:
    """x cuSPARSE before -> now per (op, precision, N/K): the geomean over the real graphs both
    runs measured, then each generated graph."""
    old, new = kernel_speedups(before), kernel_speedups(now)
    keys = [k for k in new if k in old]
    graphs = {g for k in keys for g in new[k] if g in old[k]}
    real = sorted(g for g in graphs if not _generated(g))
    generated = sorted(g for g in graphs if _generated(g))
    header = ["op", "precision", "N/K", f"geomean x (real, {len(real)})", *generated]

    def change(k, names):
        pairs = [(old[k][g], new[k][g]) for g in names if g in old[k] and g in new[k]]
        if not pairs:
            return ""
        return f"{geomean(a for a, _ in pairs):.2f}x -> {geomean(b for _, b in pairs):.2f}x"

    body = [
        [
            op,
            impl,
            str(size),
            change((op, impl, size), real),
            *(change((op, impl, size), [g]) for g in generated),
        ]
        for op, impl, size in keys
    ]
    return [table.markdown_table(header, body)]


def check_line(rows: list[Row]) -> str:
    checked = [r for r in rows if r.rel_err is not None]
    failed = sum(1 for r in rows if r.error)
    if not checked:
        return f"Not checked against float64 (run without `--check`); failed rows: {failed}."
    return (
        f"{len(checked)} of {len(rows)} results checked against float64 `torch.sparse`; "
        f"failed rows: {failed}."
    )


def format_build_table(path: Path) -> list[str]:
    """Build ms per block width and nonzeros per second: the median over the real graphs, then
    each generated graph."""
    builds = [r for r in table.read_csv(path, Row) if r.op == "build" and r.ms and not r.error]
    widths = list(dict.fromkeys(r.impl for r in builds))
    groups: dict[str, list[Row]] = {}
    for r in builds:
        groups.setdefault("generated" if _generated(r.graph) else "real", []).append(r)
    header = [
        "graphs",
        "nonzeros",
        *(f"{k} ms" for k in widths),
        *(f"{k} nonzeros/s" for k in widths),
    ]
    body = []
    real = groups.get("real", [])
    if real:

        def median(values):
            return statistics.median(values) if values else None

        graphs = {r.graph for r in real}
        ms = {k: median([r.ms for r in real if r.impl == k]) for k in widths}
        rate = {k: median([r.nnz / r.ms * 1e3 for r in real if r.impl == k]) for k in widths}
        nnz = median([r.nnz for r in real if r.impl == widths[0]])
        body.append(
            [
                f"{len(graphs)} real: median",
                f"{nnz:,.0f}",
                *(_ms(ms[k]) for k in widths),
                *(_rate(rate[k]) for k in widths),
            ]
        )
    for graph in dict.fromkeys(r.graph for r in groups.get("generated", [])):
        by = {r.impl: r for r in groups["generated"] if r.graph == graph}
        first = next(iter(by.values()))
        body.append(
            [
                graph,
                f"{first.nnz:,}",
                *(_ms(by[k].ms if k in by else None) for k in widths),
                *(_rate(by[k].nnz / by[k].ms * 1e3 if k in by else None) for k in widths),
            ]
        )
    return [table.markdown_table(header, body)]


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _rate(v: float | None) -> str:
    return "" if v is None else f"{v / 1e9:.2f}G"


def model_table(path: Path) -> list[str]:
    """flashgnn's rows of a layer, training or e2e run: their times, the ratios against PyG
    and the fastest PyG fp32 path; then PyG's failed rows, in a line."""
    rows = table.read_csv(path, ModelRow)
    fastest: dict[tuple, tuple[float, str]] = {}
    for r in rows:
        t = step_ms(r)
        if r.impl.startswith("PyG") and r.precision == "fp32" and t:
            key = (r.graph, r.model)
            if key not in fastest or t < fastest[key][0]:
                fastest[key] = (t, r.impl.removeprefix("PyG "))
    ours = [r for r in rows if r.impl.startswith("flashgnn")]
    columns = [
        c
        for c in (
            "ms",
            "wall_ms",
            "prep_ms",
            "graph_ms",
            "speedup",
            "speedup_fp16",
            "graph_speedup",
            "peak_mb",
            "error",
        )
        if any(getattr(r, c) not in (None, "") for r in ours)
    ]
    header = ["graph", "model", "impl", "precision", *(MODEL_HEADERS.get(c, c) for c in columns)]

    def cell(r: ModelRow, column: str) -> str:  # every ratio as "1.23x"
        return table.cell("speedup" if column.endswith("speedup") else column, getattr(r, column))

    def pyg(r: ModelRow) -> list[str]:  # the fastest PyG fp32 cell, where PyG ran
        t, impl = fastest.get((r.graph, r.model), (None, ""))
        return [f"{table.cell('ms', t)} ms ({impl})" if t else ""] if fastest else []

    header += ["fastest PyG fp32"] if fastest else []
    body = [
        [r.graph, r.model, r.impl, r.precision, *(cell(r, c) for c in columns), *pyg(r)]
        for r in ours
    ]
    lines = [table.markdown_table(header, body)]
    failed = [r for r in rows if r.error and not r.impl.startswith("flashgnn")]
    if failed:
        lines += [
            "",
            "PyG rows with an error (the CSV has it): "
            + "; ".join(
                f"{r.graph} {r.model} {r.impl} {r.precision} ({r.error.split(':')[0]})"
                for r in failed
            )
            + ".",
        ]
    return lines


def model_change(before: Path, now: Path) -> list[str]:
    """flashgnn's step time and x PyG fp32 before -> now, per row both runs measured."""
    old = {(r.graph, r.model, r.impl, r.precision): r for r in table.read_csv(before, ModelRow)}
    body = []
    for r in table.read_csv(now, ModelRow):
        o = old.get((r.graph, r.model, r.impl, r.precision))
        if r.impl.startswith("flashgnn") and o is not None:
            ms = " -> ".join(table.cell("ms", step_ms(x)) for x in (o, r))
            ratio = " -> ".join(table.cell("speedup", x.speedup) for x in (o, r))
            body.append([r.graph, r.model, r.impl, r.precision, ms, ratio])
    header = ["graph", "model", "impl", "precision", "step ms", "x PyG fp32"]
    return [table.markdown_table(header, body)]


def accuracy_table(path: Path) -> list[str]:
    """``accuracy.summary`` of the run, then the configs that failed."""
    rows = table.read_csv(path, AccuracyRow)
    failed = accuracy_failures(rows)
    return [
        table.markdown_table(*accuracy_summary(rows)),
        *(["", "Failed: " + "; ".join(failed) + "."] if failed else []),
    ]


def drop_in_table(path: Path) -> list[str]:
    """``drop_in.summary`` of the run."""
    return [table.markdown_table(*drop_in_summary(table.read_csv(path, DropInRow)))]


def ablation_table(path: Path) -> list[str]:
    """``ablation.summary`` of the run."""
    return [table.markdown_table(*ablation_summary(table.read_csv(path, AblationRow)))]


def seeds_table(path: Path) -> list[str]:
    """The answers to the seed papers' claims, then ``seeds.backend_table`` of the run."""
    rows = table.read_csv(path, SeedRow)
    return [
        *(f"- {line}" for line in answers(rows)),
        "",
        table.markdown_table(*backend_table(rows)),
    ]


def sparse_linear_table(path: Path) -> list[str]:
    """``sparse_linear.summary`` of the run."""
    return [table.markdown_table(*sparse_linear_summary(table.read_csv(path, SparseLinearRow)))]


def distributed_table(path: Path) -> list[str]:
    """``distributed.summary`` of the run."""
    return [table.markdown_table(*scaling_summary(table.read_csv(path, ScalingRow)))]


CHANGE = {
    "kernels": kernels_change,
    "layers": model_change,
    "training": model_change,
    "e2e": model_change,
}
RENDER = {
    "kernels": kernels_table,
    "format build": format_build_table,
    "layers": model_table,
    "training": model_table,
    "e2e": model_table,
    "accuracy": accuracy_table,
    "pyg-drop-in": drop_in_table,
    "ablation": ablation_table,
    "seeds": seeds_table,
    "sparse-linear": sparse_linear_table,
    "distributed": distributed_table,
}

# benchmarks whose module holds its own section
SECTIONS["reorder"] = reordering.SECTION
RENDER["reorder"] = reordering.table_lines
