"""``flashgnn bench seeds``: the seed papers' backends side by side (ME-BCRS 8x1, CVSE V = 2/4/8,
TCA, GCOO, HB-ELL and pure 16x16 blocks) against cuBLAS dense (torch.matmul on the dense matrix)
and cuSPARSE CSR (torch.sparse.mm), on the DLMC ResNet-50 weights, the shared real graphs and
three generated patterns of equal nonzeros (clustered in 16x16 blocks, half clustered, and
scattered).

DLMC: every nonzero (i, j) becomes a V x 1 vector, rows V i .. V i + V - 1 (Chen et al.'s
construction), for each V of --vectors; a --sample of the collection spread over its sparsity
levels (0: all 320). Values are drawn uniform in [0.5, 1.5). N: --sizes (default 64, 128, 256);
X and the baselines in the precision's storage type (--precision, default fp16); GCOO runs
fp32 and is compared with fp32 baselines.
Every result is checked against float64 torch.sparse before it is timed (bounds: fp32 1e-5,
tf32 and fp16 2e-3, bf16 1e-2); a failing one is recorded with its error, not timed.
kernel ms: the median over --iters calls of the summed GPU time of the kernels one call
launches (timing.py's ProfilerTimer; on the CPU, the host's time of a call). wall ms: the
host's clock per call over --iters calls back to back (launches and host work included).
x cuBLAS / x cuSPARSE: the baseline's kernel ms / the backend's, same input, N and storage
type. build ms: the format's build from CSR on the device (cold, 1 warm-up, median of 3), never
inside kernel ms. zero fill and stored MB (HB-ELL, pure blocked, ME-BCRS, and cuSPARSE's
Blocked-ELL layout, which torch does not build: its size follows from its definition) count
values at the storage type's size.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data.dlmc import expand_rows, load_dlmc
from ..formats.hbell import HBELL
from ..formats.mebcrs import MEBCRS
from ..formats.storage import blocked_ell_storage, mebcrs_storage
from ..ops import PRECISIONS, spmm
from . import table
from .checks import ERROR_BOUND, relative_error
from .environment import environment
from .errors import describe_error
from .format_specs import SPECS, FormatSpec, parse_formats
from .graphs import data_dir, load_graph, resolve_names
from .options import add_run_arguments, comma_list, cuda_missing
from .timing import KERNEL_HEAD_START, ProfilerTimer, Timer, wall_per_call

INPUTS = ("dlmc", "graphs", "patterns")
PATTERNS = ("clustered", "mixed", "scattered")
STORAGE = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}
DTYPE_NAME = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
BLOCKED_ELL = "Blocked-ELL layout"
# The papers' claims each question is set against.
CLAIMS = {
    "cvse": "above 80/70/50% sparsity at V = 2/4/8 (Volta)",
    "tca": "6.6x over TC-GNN (RTX 3080)",
    "gcoo": "1.7x cuSPARSE on average (Pascal)",
    "hbell": "up to 3.3x over a uniform sparse tensor core (simulated V100)",
}


@dataclass
class SeedRow:
    """One backend on one input and N. ``kind``: dlmc, graph or pattern; ``vector``: the DLMC
    expansion V (1 for graphs and patterns); ``precision``: of the backend's SpMM, or the
    storage type of a baseline."""

    matrix: str
    kind: str
    sparsity: float
    vector: int
    rows: int
    cols: int
    nnz: int
    size: int | None
    backend: str
    precision: str
    kernel_ms: float | None = None
    wall_ms: float | None = None
    speedup_cublas: float | None = None
    speedup_cusparse: float | None = None
    build_ms: float | None = None
    rel_err: float | None = None
    zero_fill: float | None = None
    stored_mb: float | None = None
    error: str = ""


@dataclass
class SeedInput:
    """A matrix to run: canonical CSR (indptr int64 [rows + 1], indices int32 [nnz])."""

    name: str
    kind: str
    sparsity: float
    vector: int
    rows: int
    cols: int
    indptr: np.ndarray
    indices: np.ndarray

    @property
    def nnz(self) -> int:
        return int(self.indices.size)

    def row(self, size: int | None, backend: str, precision: str) -> SeedRow:
        return SeedRow(
            self.name,
            self.kind,
            self.sparsity,
            self.vector,
            self.rows,
            self.cols,
            self.nnz,
            size,
            backend,
            precision,
        )


def add_arguments(p) -> None:
    p.add_argument(
        "--inputs", default=",".join(INPUTS), help="comma list of dlmc, graphs, patterns (all)"
    )
    p.add_argument(
        "--backends",
        default=",".join(SPECS),
        help=f"comma list of formats: {', '.join(SPECS)} (default all)",
    )
    p.add_argument("--precision", default="fp16", choices=PRECISIONS, help="default fp16")
    p.add_argument("--sizes", default="64,128,256", help="N, comma list (default 64,128,256)")
    p.add_argument("--vectors", default="2,4,8", help="DLMC expansions V (default 2,4,8)")
    p.add_argument(
        "--sample",
        type=int,
        default=36,
        help="DLMC matrices, spread over the collection's sparsity levels (0: all; default 36)",
    )
    p.add_argument("--graphs", default="real", help="graph names, or real (default)")
    p.add_argument(
        "--pattern-size", type=int, default=4096, help="rows and columns of the generated patterns"
    )
    p.add_argument(
        "--dense-limit-gib",
        type=float,
        default=8.0,
        help="largest dense matrix cuBLAS is run on (default 8 GiB)",
    )
    p.add_argument("--csv", type=Path, help="write every row to this CSV file")
    p.add_argument("--markdown", type=Path, help="write the summary to this Markdown file")
    add_run_arguments(p)


def positive_list(text: str, option: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise ValueError(f"--{option}: expected a comma list of positive integers, got {text!r}")
    return values


def sample_positions(count: int, sample: int) -> list[int]:
    """``sample`` positions of a collection of ``count``, evenly spread (all when sample is 0 or
    at least count)."""
    if sample < 0:
        raise ValueError(f"--sample must be >= 0, got {sample}")
    if sample == 0 or sample >= count:
        return list(range(count))
    return sorted({int(i) for i in np.linspace(0, count - 1, sample).round()})


def dlmc_inputs(root: Path, sample: int, vectors: list[int]) -> list[SeedInput]:
    everything = load_dlmc(root)
    out = []
    for i in sample_positions(len(everything), sample):
        m = everything[i]
        for v in vectors:
            indptr, indices = expand_rows(m.indptr, m.indices, v)
            out.append(
                SeedInput(m.name, "dlmc", m.sparsity, v, v * m.n_rows, m.n_cols, indptr, indices)
            )
    return out


def pattern_inputs(n: int, seed: int) -> list[SeedInput]:
    """Three n x n patterns with the same nonzeros (1% density in whole blocks): clustered
    (16x16 blocks 90% full at random block positions), mixed (half of them in such blocks, half
    scattered) and scattered (uniform)."""
    rng = np.random.default_rng(seed)
    per_block = 230  # 90% of a 16x16 block
    n_b = max(n // 16, 1)
    blocks = max(int(0.01 * n * n) // per_block, 2)
    nnz = blocks * per_block

    def in_blocks(count: int) -> np.ndarray:
        where = rng.choice(n_b * n_b, count, replace=False)
        inside = np.argsort(rng.random((count, 256)), axis=1)[:, :per_block]
        r = (where // n_b)[:, None] * 16 + inside // 16
        c = (where % n_b)[:, None] * 16 + inside % 16
        keep = (r < n) & (c < n)
        return (r * n + c)[keep]

    def scattered(count: int, exclude: np.ndarray) -> np.ndarray:
        drawn = rng.choice(n * n, count + exclude.size, replace=False)
        return drawn[~np.isin(drawn, exclude)][:count]

    clustered = in_blocks(blocks)
    half = in_blocks(blocks // 2)
    positions = {
        "clustered": clustered,
        "mixed": np.concatenate([half, scattered(nnz - half.size, half)]),
        "scattered": scattered(clustered.size, np.zeros(0, np.int64)),
    }
    out = []
    for name in PATTERNS:
        pos = np.sort(positions[name])
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(pos // n, minlength=n), out=indptr[1:])
        sparsity = 1 - pos.size / (n * n)
        out.append(
            SeedInput(name, "pattern", sparsity, 1, n, n, indptr, (pos % n).astype(np.int32))
        )
    return out


def graph_inputs(root: Path | None, spec: str) -> list[SeedInput]:
    out = []
    for name in resolve_names(spec, root, generated=()):
        g = load_graph(name, root)
        n = g.num_nodes
        sparsity = 1 - g.nnz / max(n * n, 1)
        out.append(SeedInput(name, "graph", sparsity, 1, n, n, g.indptr, g.indices))
    return out


def storage_of(fmt, value_bytes: int):
    """The storage report of a built format, None where it has none."""
    if isinstance(fmt, HBELL):
        return fmt.storage(value_bytes)
    if isinstance(fmt, MEBCRS):
        return mebcrs_storage(fmt, value_bytes)
    return None


class SeedBench:
    """Runs every backend and baseline on one input after another and collects the rows."""

    def __init__(self, device, specs: list[FormatSpec], precision: str, sizes, args):
        self.device, self.specs, self.precision, self.sizes = device, specs, precision, sizes
        self.warmup = 5 if args.warmup is None else args.warmup
        self.iters = 10 if args.iters is None else args.iters
        self.seed, self.dense_limit = args.seed, args.dense_limit_gib * 2**30
        cuda = torch.device(device).type == "cuda"
        self.kernel_timer = (
            ProfilerTimer(device, self.warmup, self.iters)
            if cuda
            else Timer(device, self.warmup, self.iters)
        )
        self.build_timer = Timer(device, 1, 3, KERNEL_HEAD_START)
        self.rows: list[SeedRow] = []

    def run_input(self, inp: SeedInput) -> None:
        dev = self.device
        gen = torch.Generator(dev).manual_seed(self.seed)
        indptr = torch.from_numpy(inp.indptr).to(dev)
        indices = torch.from_numpy(np.ascontiguousarray(inp.indices)).to(dev)
        values = torch.rand(inp.nnz, generator=gen, device=dev) + 0.5
        shape = (inp.rows, inp.cols)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            csr = torch.sparse_csr_tensor(
                indptr, indices.to(torch.int64), values, shape, check_invariants=False
            )
        csr64 = csr.to(torch.float64)
        storage_bytes = STORAGE.get(self.precision, torch.float32).itemsize
        layout = blocked_ell_storage(inp.indptr, inp.indices, inp.cols, value_bytes=storage_bytes)
        blocked_row = inp.row(None, BLOCKED_ELL, self.precision)
        blocked_row.zero_fill, blocked_row.stored_mb = layout.zero_fill, layout.bytes / 2**20
        self._add(blocked_row)

        built = {}
        for spec in self.specs:
            p = spec.spmm_precision(self.precision)
            row = inp.row(None, spec.name, p)
            try:
                m = self.build_timer(
                    lambda spec=spec, p=p: spec.build(indptr, indices, values, inp.cols, dev, p)
                )
                built[spec.name] = (m.result, m.ms, p)
            except Exception as e:  # noqa: BLE001 - recorded in the table instead
                row.error = f"build failed: {describe_error(e)}"
                self._add(row)
        operands = {}  # storage dtype -> (dense or None, csr)
        for n in self.sizes:
            x = torch.randn(inp.cols, n, generator=gen, device=dev)
            ref = torch.sparse.mm(csr64, x.to(torch.float64))
            bases = {}
            for dtype in dict.fromkeys(_storage(p) for _, _, p in built.values()):
                if dtype not in operands:
                    operands[dtype] = self._baseline_operands(csr, dtype, shape)
                bases[dtype] = self._baselines(inp, n, x.to(dtype), ref, *operands[dtype])
            for spec in self.specs:
                if spec.name not in built:
                    continue
                fmt, build_ms, p = built[spec.name]
                xs = x.to(_storage(p))
                row = inp.row(n, spec.name, p)
                row.build_ms = build_ms
                report = storage_of(fmt, storage_bytes)
                if report is not None:
                    row.zero_fill, row.stored_mb = report.zero_fill, report.bytes / 2**20
                self._measure(row, lambda fmt=fmt, xs=xs, p=p: spmm(fmt, xs, p), ref, p)
                cublas, cusparse = bases[_storage(p)]
                if row.kernel_ms and not row.error:
                    if cublas.kernel_ms and not cublas.error:
                        row.speedup_cublas = cublas.kernel_ms / row.kernel_ms
                    if cusparse.kernel_ms and not cusparse.error:
                        row.speedup_cusparse = cusparse.kernel_ms / row.kernel_ms
        del csr, csr64, built, operands
        if torch.device(dev).type == "cuda":
            torch.cuda.empty_cache()

    def _baseline_operands(self, csr, dtype, shape):
        dense_bytes = shape[0] * shape[1] * dtype.itemsize
        dense = csr.to(dtype).to_dense() if dense_bytes <= self.dense_limit else None
        return dense, csr.to(dtype)

    def _baselines(self, inp: SeedInput, n: int, xs, ref, dense, csr) -> tuple[SeedRow, SeedRow]:
        name = DTYPE_NAME[xs.dtype]
        cublas = inp.row(n, f"cuBLAS {name}", name)
        if dense is None:
            cublas.error = (
                f"not run: the dense matrix is above --dense-limit-gib {self.dense_limit}"
            )
            self._add(cublas)
        else:
            self._measure(cublas, lambda: torch.matmul(dense, xs), ref, name)
        cusparse = inp.row(n, f"cuSPARSE {name}", name)
        self._measure(cusparse, lambda: torch.sparse.mm(csr, xs), ref, name)
        return cublas, cusparse

    def _measure(self, row: SeedRow, fn, ref, precision: str) -> None:
        """Check ``fn()`` against ``ref``, then time it into ``row``; a failure is written into
        the row, never raised."""
        try:
            with torch.no_grad():
                row.rel_err = relative_error(fn(), ref)
                bound = ERROR_BOUND[precision]
                if not row.rel_err <= bound:  # also catches NaN
                    row.error = f"check failed: relative error {row.rel_err:.1e} above {bound:.0e}"
                else:
                    row.kernel_ms = self.kernel_timer(fn).ms
                    row.wall_ms = wall_per_call(fn, self.iters, self.device)
        except Exception as e:  # noqa: BLE001 - recorded in the table instead
            row.error = describe_error(e)
            if isinstance(e, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
        self._add(row)

    def _add(self, row: SeedRow) -> None:
        self.rows.append(row)
        cells = [
            row.matrix,
            f"V={row.vector}",
            f"N={row.size}" if row.size else "",
            row.backend,
            f"{row.kernel_ms:.4g} ms" if row.kernel_ms else "",
            f"{row.speedup_cublas:.2f}x cuBLAS" if row.speedup_cublas else "",
            f"{row.speedup_cusparse:.2f}x cuSPARSE" if row.speedup_cusparse else "",
            f"fill {row.zero_fill:.2f}" if row.zero_fill is not None else "",
            row.error,
        ]
        print("  ".join(c for c in cells if c), flush=True)


def _storage(precision: str) -> torch.dtype:
    return STORAGE.get(precision, torch.float32)


# ---------------------------------------------------------------------- the questions
def _geomean(values) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def crossover(points) -> str:
    """Where a backend overtakes a baseline over sparsity levels: ``points`` (sparsity,
    speedup); the geomean per level, and the lowest level from which every level at or above
    it is >= 1x."""
    levels: dict[float, list[float]] = defaultdict(list)
    for s, x in points:
        if x:
            levels[s].append(x)
    if not levels:
        return ""
    order = sorted(levels)
    means = {s: _geomean(levels[s]) for s in order}
    first = None
    for s in reversed(order):
        if means[s] < 1:
            break
        first = s
    if first is None:
        return f"never (up to {order[-1]:g})"
    if first == order[0]:
        return f"at every level (from {first:g})"
    return f"from {first:g}"


def _ok(rows: list[SeedRow]) -> list[SeedRow]:
    return [r for r in rows if not r.error and r.kernel_ms and r.size]


def _paired(rows, a: str, b: str, kinds) -> list[tuple[SeedRow, SeedRow]]:
    """(row of backend a, row of backend b) on the same input, V and N."""
    by = {(r.matrix, r.vector, r.size, r.backend): r for r in _ok(rows) if r.kind in kinds}
    return [
        (r, by[(k[0], k[1], k[2], b)])
        for k, r in by.items()
        if k[3] == a and (k[0], k[1], k[2], b) in by
    ]


def backend_table(rows: list[SeedRow]) -> tuple[list[str], list[list[str]]]:
    """One line per backend: geomean x cuBLAS and x cuSPARSE on DLMC and on the graphs, the
    crossover with cuBLAS on DLMC per N, the median build ms, and failed rows."""
    ok = _ok(rows)
    backends = list(dict.fromkeys(r.backend for r in rows if r.backend in SPECS))
    sizes = sorted({r.size for r in ok})
    header = [
        "backend",
        "x cuBLAS (DLMC)",
        "x cuSPARSE (DLMC)",
        "x cuSPARSE (graphs)",
        "crosses cuBLAS (DLMC, N = " + "/".join(map(str, sizes)) + ")",
        "build ms (median)",
        "failed",
    ]
    body = []
    for b in backends:
        mine = [r for r in ok if r.backend == b]
        dlmc = [r for r in mine if r.kind == "dlmc"]
        graphs = [r for r in mine if r.kind == "graph"]
        # CVSE at V is measured on the weights expanded by the same V, as in Chen et al.
        own_v = SPECS[b].kwargs.get("vector")
        cross = [
            crossover(
                (r.sparsity, r.speedup_cublas)
                for r in dlmc
                if r.size == n and (own_v is None or r.vector == own_v)
            )
            for n in sizes
        ]
        builds = [r.build_ms for r in mine if r.build_ms]
        body.append(
            [
                b,
                _x(_geomean(r.speedup_cublas for r in dlmc)),
                _x(_geomean(r.speedup_cusparse for r in dlmc)),
                _x(_geomean(r.speedup_cusparse for r in graphs)),
                " / ".join(c or "-" for c in cross),
                f"{statistics.median(builds):.3g}" if builds else "",
                str(sum(1 for r in rows if r.backend == b and r.error)),
            ]
        )
    return header, body


def answers(rows: list[SeedRow]) -> list[str]:
    """The issue's four questions, one line each, from the rows (blank where not measured)."""
    ok = _ok(rows)
    lines = []
    cvse = []
    for v in (2, 4, 8):
        pts = [
            (r.sparsity, r.speedup_cublas)
            for r in ok
            if r.backend == f"cvse{v}" and r.kind == "dlmc" and r.vector == v
        ]
        if pts:
            cvse.append(f"V={v}: {crossover(pts)}")
    if cvse:
        lines.append(f"CVSE crosses cuBLAS {'; '.join(cvse)} (paper: {CLAIMS['cvse']}).")
    pairs = _paired(rows, "tca", "mebcrs", ("dlmc", "graph"))
    if pairs:
        bare = _geomean(t.kernel_ms / m.kernel_ms for t, m in pairs)
        built = _geomean(
            (t.kernel_ms + (t.build_ms or 0)) / (m.kernel_ms + (m.build_ms or 0)) for t, m in pairs
        )
        lines.append(
            f"TCA / 8x1 time: {bare:.2f}x kernel only, {built:.2f}x with one build each "
            f"(> 1: TCA slower; paper: {CLAIMS['tca']})."
        )
    gcoo = [r for r in ok if r.backend == "gcoo" and r.kind == "graph"]
    if gcoo:
        wins = sum(1 for r in gcoo if (r.speedup_cusparse or 0) >= 1)
        lines.append(
            f"GCOO x cuSPARSE fp32 on the graphs: "
            f"{_x(_geomean(r.speedup_cusparse for r in gcoo))} geomean, >= 1x in {wins} of "
            f"{len(gcoo)} (paper: {CLAIMS['gcoo']})."
        )
    hb = []
    for name in PATTERNS:
        eight = _paired([r for r in rows if r.matrix == name], "mebcrs", "hbell", ("pattern",))
        blocked = _paired([r for r in rows if r.matrix == name], "blocked", "hbell", ("pattern",))
        if eight or blocked:
            hb.append(
                f"{name}: 8x1 {_x(_geomean(a.kernel_ms / h.kernel_ms for a, h in eight))}, "
                f"blocked {_x(_geomean(a.kernel_ms / h.kernel_ms for a, h in blocked))}"
            )
    if hb:
        lines.append(
            f"HB-ELL's time saved (other / HB-ELL) {'; '.join(hb)} (paper: {CLAIMS['hbell']})."
        )
    return lines


def storage_table(rows: list[SeedRow]) -> tuple[list[str], list[list[str]]]:
    """Zero fill and stored MB per layout and input kind: the median over the inputs."""
    layouts = ("hbell", "blocked", "mebcrs", BLOCKED_ELL)
    groups: dict[tuple, list[SeedRow]] = defaultdict(list)
    seen = set()
    for r in rows:
        key = (r.matrix, r.vector, r.backend)
        if r.backend in layouts and r.zero_fill is not None and key not in seen:
            seen.add(key)
            groups[(r.kind if r.kind != "pattern" else r.matrix, r.backend)].append(r)
    header = ["inputs", *(f"{name} fill / MB" for name in layouts)]
    body = []
    for kind in dict.fromkeys(k for k, _ in groups):
        line = [kind]
        for name in layouts:
            g = groups.get((kind, name), [])
            line.append(
                f"{statistics.median(r.zero_fill for r in g):.2f} / "
                f"{statistics.median(r.stored_mb for r in g):.3g}"
                if g
                else ""
            )
        body.append(line)
    return header, body


def markdown(env: dict, rows: list[SeedRow]) -> str:
    parts = [
        "# Seed backends",
        "",
        "\n".join(f"- {k}: {v}" for k, v in env.items()),
        "",
        "Method: `flashgnn/benchmarking/seeds.py` docstring.",
        "",
        *(f"- {line}" for line in answers(rows)),
        "",
        table.markdown_table(*backend_table(rows)),
        "",
        table.markdown_table(*storage_table(rows)),
        "",
    ]
    return "\n".join(parts)


def run(args) -> int:
    device = torch.device(args.device)
    if cuda_missing(device, "seeds"):
        return 2
    kinds = comma_list(args.inputs, INPUTS, "inputs")
    specs = parse_formats(args.backends, "backends")
    sizes = positive_list(args.sizes, "sizes")
    vectors = positive_list(args.vectors, "vectors")
    root = data_dir(args.data)
    inputs: list[SeedInput] = []
    if "dlmc" in kinds:
        if root is None:
            raise ValueError("--inputs dlmc needs the datasets folder: set FLASHGNN_DATA or --data")
        inputs += dlmc_inputs(root, args.sample, vectors)
    if "graphs" in kinds:
        inputs += graph_inputs(root, args.graphs)
    if "patterns" in kinds:
        inputs += pattern_inputs(args.pattern_size, args.seed)
    bench = SeedBench(device, specs, args.precision, sizes, args)
    for inp in inputs:
        print(f"== {inp.name} V={inp.vector}: {inp.rows} x {inp.cols}, {inp.nnz:,}", flush=True)
        try:
            bench.run_input(inp)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory for the reference
            row = inp.row(None, "setup", args.precision)
            row.error = describe_error(e)
            bench._add(row)
    env = environment(bench.build_timer)
    env["timer"] = "profiler: summed kernel time per call; wall: host clock per call"
    if args.csv:
        table.write_csv(bench.rows, args.csv, env, SeedRow)
    if args.markdown:
        args.markdown.write_text(markdown(env, bench.rows))
    print()
    for line in answers(bench.rows):
        print(line)
    print(table.text_table(*backend_table(bench.rows)))
    print(table.text_table(*storage_table(bench.rows)))
    failed = [r for r in bench.rows if r.error]
    for r in failed:
        print(f"FAILED {r.matrix} V={r.vector} N={r.size} {r.backend}: {r.error}")
    return 1 if failed else 0
