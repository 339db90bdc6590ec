"""``flashgnn bench sparse-linear``: SparseLinear against a dense layer and cuSPARSE CSR.

Shapes: W [out, in] (default 4096 x 4096), x [tokens, in] (default 8192 tokens), V in {2, 4,
8}, sparsity in {0.5, 0.7, 0.8, 0.9, 0.95, 0.98}, fp16 (or bf16): the layer's weights and x in
that type. Passes: "forward", y = layer(x) without autograd, and "forward+backward", the forward
and its backward for a random dY (dX, dW and db). Implementations:
  sparse-linear   flashgnn.nn.SparseLinear (on CUDA its kernel when the tokens are many enough,
                  ops/sparse_linear.py; the backward on the generic CVSE ops).
  dense           torch.matmul(x, W^T) on the pruned W as a dense tensor (cuBLAS), and
                  F.linear's forward and backward for the second pass.
  cusparse-csr    torch.sparse.mm(W as float32 CSR, x^T in float32) (cuSPARSE SpMM, forward
                  only; the float32 baseline of ``flashgnn bench kernels``), x^T prepared
                  outside the timing, W's zeros left out.
Times: kernel_ms, the profiler's sum of the GPU activities one call launched (timing.py's
ProfilerTimer; CUDA only, empty on the CPU), and wall_ms, the host's clock over one call with
the device synchronised (timing.py's wall_median_ms). useful_tflops = 2 * tokens * nnz(W) /
time, by kernel time where there is one, else wall time; speedup_dense = the dense time of
the same pass over this row's (so > 1 is faster than dense), speedup_csr the same against
cuSPARSE. The crossover sparsity of each V is where the forward's speedup over dense reaches
1, interpolated linearly between the measured sparsities (empty when it never does).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..nn.sparse_linear import SparseLinear
from . import table
from .environment import environment
from .errors import describe_error
from .options import comma_list, cuda_missing
from .timing import ProfilerTimer, Timer, wall_median_ms

VECTORS = ("2", "4", "8")
SPARSITIES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98)
PASSES = ("forward", "forward+backward")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Row:
    impl: str
    vector: int | None
    sparsity: float | None
    step: str
    kernel_ms: float | None = None
    wall_ms: float | None = None
    useful_tflops: float | None = None
    speedup_dense: float | None = None
    speedup_csr: float | None = None
    error: str = ""

    def time(self) -> float | None:
        return self.kernel_ms if self.kernel_ms is not None else self.wall_ms


def add_arguments(p) -> None:
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--in-features", type=int, default=4096)
    p.add_argument("--out-features", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--vectors", default=",".join(VECTORS), help="comma list of 2, 4, 8")
    p.add_argument(
        "--sparsities",
        default=",".join(str(s) for s in SPARSITIES),
        help="comma list of fractions of W's vectors pruned",
    )
    p.add_argument("--precision", default="fp16", choices=tuple(DTYPES))
    p.add_argument(
        "--passes", default=",".join(PASSES), help="comma list of forward, forward+backward"
    )
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20, help="timed calls, the median is reported")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", type=Path, default=None, help="write the rows here (and a .json stamp)")


def _sparsities(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or any(not 0.0 <= v < 1.0 for v in values):
        raise ValueError(f"--sparsities: expected a comma list of numbers in [0, 1), got {text!r}")
    return sorted(values)


class _Measure:
    """Kernel time (CUDA) and wall time of a callable, on one device."""

    def __init__(self, device: torch.device, warmup: int, iters: int):
        self.device, self.warmup, self.iters = device, warmup, iters
        self.profiler = ProfilerTimer(device, warmup, iters) if device.type == "cuda" else None

    def __call__(self, fn, row: Row) -> Row:
        try:
            if self.profiler is not None:
                row.kernel_ms = self.profiler(fn).ms
            else:
                for _ in range(self.warmup):
                    fn()
            row.wall_ms = wall_median_ms(fn, self.iters, self.device)
        except Exception as e:  # noqa: BLE001 - recorded in the row
            row.error = describe_error(e)
        return row


def _forward_backward(module_call, x, grad):
    def step():
        y = module_call(x)
        y.backward(grad)
        return y

    return step


def summary(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """(headers, cells) of a run: per V and sparsity, the forward's and the forward +
    backward's speed over dense (kernel time) and the forward's useful TFLOP/s, then the
    forward's crossover sparsity per V."""
    sparse = [r for r in rows if r.impl == "sparse-linear" and not r.error]
    levels = sorted({r.sparsity for r in sparse})
    cells = []
    cross = crossovers(rows)
    for v in sorted({r.vector for r in sparse}):
        line = [f"V = {v}"]
        for s in levels:
            by_step = {r.step: r for r in sparse if r.vector == v and r.sparsity == s}
            fwd, both = by_step.get("forward"), by_step.get("forward+backward")
            line.append(
                " / ".join(
                    "-" if r is None or r.speedup_dense is None else f"{r.speedup_dense:.2f}x"
                    for r in (fwd, both)
                )
                + (
                    ""
                    if fwd is None or fwd.useful_tflops is None
                    else f" ({fwd.useful_tflops:.0f})"
                )
            )
        line.append("never" if cross.get(v) is None else f"{cross[v]:.2f}")
        cells.append(line)
    headers = ["", *(f"{s:g}" for s in levels), "crosses dense"]
    return headers, cells


def crossovers(rows: list[Row]) -> dict[int, float | None]:
    """The forward's crossover sparsity against dense per V (module docstring)."""
    out = {}
    sparse = [r for r in rows if r.impl == "sparse-linear" and r.step == "forward"]
    for v in sorted({r.vector for r in sparse}):
        points = sorted(
            (r.sparsity, r.speedup_dense)
            for r in sparse
            if r.vector == v and r.speedup_dense is not None
        )
        out[v] = None
        for (s0, a0), (s1, a1) in zip([(None, None)] + points, points):
            if a1 >= 1.0:
                out[v] = s1 if s0 is None or a0 == a1 else s0 + (1.0 - a0) * (s1 - s0) / (a1 - a0)
                break
    return out


def run(args) -> int:
    device = torch.device(args.device)
    if cuda_missing(device, "sparse-linear"):
        return 2
    vectors = [int(v) for v in comma_list(args.vectors, VECTORS, "vectors")]
    sparsities = _sparsities(args.sparsities)
    passes = comma_list(args.passes, PASSES, "passes")
    dtype = DTYPES[args.precision]
    n_in, n_out, n_tokens = args.in_features, args.out_features, args.tokens
    torch.manual_seed(args.seed)
    measure = _Measure(device, args.warmup, args.iters)
    x = torch.randn(n_tokens, n_in, device=device, dtype=dtype)
    grad = torch.randn(n_tokens, n_out, device=device, dtype=dtype)
    rows: list[Row] = []
    dense_time: dict[str, float | None] = {}
    for p in passes:
        w = torch.randn(n_out, n_in, device=device, dtype=dtype)
        if p == "forward":
            fn = lambda: torch.matmul(x, w.t())  # noqa: E731
        else:
            wg = w.requires_grad_()
            xg = x.clone().requires_grad_()
            fn = _forward_backward(lambda t: F.linear(t, wg), xg, grad)
        row = measure(fn, Row("dense", None, None, p))
        dense_time[p] = row.time()
        row.useful_tflops = _tflops(n_tokens * n_out * n_in, row.time(), p)
        rows.append(row)
    for vector in vectors:
        for sparsity in sparsities:
            layer = SparseLinear(
                n_in,
                n_out,
                sparsity=sparsity,
                vector=vector,
                precision=args.precision,
                device=device,
                dtype=dtype,
            )
            nnz = int(layer.weight_format().nnz)
            csr_time = None
            if "forward" in passes:
                csr = measure(
                    *_cusparse(layer, x), Row("cusparse-csr", vector, sparsity, "forward")
                )
                csr_time = csr.time()
                csr.useful_tflops = _tflops(n_tokens * nnz, csr_time, "forward")
                csr.speedup_dense = _ratio(dense_time.get("forward"), csr_time)
                rows.append(csr)
            for p in passes:
                if p == "forward":

                    def fn(layer=layer):
                        with torch.no_grad():
                            return layer(x)
                else:
                    xg = x.clone().requires_grad_()
                    fn = _forward_backward(layer, xg, grad)
                row = measure(fn, Row("sparse-linear", vector, sparsity, p))
                row.useful_tflops = _tflops(n_tokens * nnz, row.time(), p)
                row.speedup_dense = _ratio(dense_time.get(p), row.time())
                if p == "forward":
                    row.speedup_csr = _ratio(csr_time, row.time())
                rows.append(row)
                print(_line(row), flush=True)
            del layer
    cross = crossovers(rows)
    for v, s in cross.items():
        print(f"V = {v}: forward crosses dense at sparsity {'never' if s is None else f'{s:.3f}'}")
    if args.csv:
        env = environment(Timer(device, 1, 3))
        env["shape"] = f"W {n_out} x {n_in}, {n_tokens} tokens, {args.precision}"
        env["timer"] = "profiler: summed kernel time per call; wall: host clock per call"
        table.write_csv(rows, args.csv, env, Row)
    failed = [r for r in rows if r.error]
    for r in failed:
        print(f"FAILED {r.impl} V={r.vector} sparsity={r.sparsity} {r.step}: {r.error}")
    return 1 if failed else 0


def _cusparse(layer: SparseLinear, x: torch.Tensor):
    """The cuSPARSE product of W as CSR and x^T, as a callable."""
    csr = layer.weight.detach().float().to_sparse_csr()
    xt = x.t().float().contiguous()
    return ((lambda: torch.sparse.mm(csr, xt)),)


def _tflops(products: int, ms: float | None, p: str) -> float | None:
    """Useful TFLOP/s: 2 per product, three products' worth for forward+backward."""
    if ms is None or ms <= 0:
        return None
    return 2 * products * (3 if p == "forward+backward" else 1) / (ms * 1e9)


def _ratio(base: float | None, ms: float | None) -> float | None:
    return None if base is None or ms is None or ms <= 0 else base / ms


def _line(r: Row) -> str:
    t = r.time()
    text = f"{r.impl} V={r.vector} sparsity={r.sparsity} {r.step}: "
    if r.error:
        return text + f"FAILED {r.error}"
    return text + f"{t:.3f} ms, x{r.speedup_dense:.2f} dense" if t and r.speedup_dense else text
