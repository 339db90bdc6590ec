"""Sweep of SparseLinear's forward kernels (flashgnn/_cuda/sparse_linear.py's variants) on the
GPU, beside cuBLAS dense (torch.matmul on the pruned weight as a dense tensor), in one process.

W [out, in] pruned to V x 1 vectors by magnitude (SparseLinear), x [tokens, in] random; by
default 4096 x 4096, 8192 tokens, fp16, V = 8 at sparsities 0.8, 0.9, 0.95 and 0.98, V = 2 and
4 at 0.9 and bf16 once (V = 8 at 0.9, a few variants). Every variant's output is checked
against float64 F.linear on the pruned weight (relative Frobenius error, fp16 <= 2e-3, bf16 <=
1e-2); a variant that fails or errs is marked and never chosen. Times: the profiler's kernel
time of one call (flashgnn.benchmarking.timing.ProfilerTimer: every kernel the call launches,
the transpose or cast of x and the per-call fragment gather included, median over --iters
calls), and of the forward kernel alone in one more profiled call. Columns: x cuBLAS = the
dense time over the variant's; TFLOP/s = 2 tokens nnz(W) / time (useful work); for window
variants the chunk rows U, the fill (vectors / k16 slots) and the mean bank wavefronts of an
8-row ldmatrix phase the plan implies (1 = conflict-free). Then dX = dY W of the backward at
V = 8, fp16, each sparsity: "cvse-spmm", the backward's path today (W's values moved into W^T's
CVSE, flashgnn.ops.spmm on it), and the forward's kernels on W^T's pattern (``through``, what
ops/sparse_linear.py's DX_KERNEL switches on), beside cuBLAS's dense dY W. The end: the best
variant per configuration and the FORWARD_RULE rows that would choose it.

    PYTHONPATH=$PWD python benchmarks/sparse_linear_sweep.py [--quick] [--variants a,b]
        [--sparsities 0.9,0.95] [--csv out.csv]
"""

import argparse
import sys
import time

import common  # noqa: F401  (puts the checkout on sys.path)
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from flashgnn._cuda import sparse_linear as sl
from flashgnn.benchmarking.timing import ProfilerTimer, device_time_ms
from flashgnn.nn import SparseLinear
from flashgnn.ops import spmm
from flashgnn.ops.sparse_linear import weight_formats

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BOUND = {"fp16": 2e-3, "bf16": 1e-2}
SHAPES = {shape.name: shape for shape in sl.WINDOW_SHAPES}


def window(shape: str, list_vectors: int = 16, steps: str = "balance") -> sl.Variant:
    return sl.Variant("window", shape=SHAPES[shape], list_vectors=list_vectors, steps=steps)


VARIANTS = [
    sl.Variant("chunk"),  # the kernel and rule before the sweep: the baseline
    sl.Variant("chunk", 4),
    window("w4x8x8"),
    window("w4x8x8", steps="fill"),
    window("w4x8x8", steps="chunk"),
    window("w4x8x8", 8),
    window("w4x8x8", 32),
    window("w4x8x8-xt"),
    window("w4x8x8-xt", 32),  # DIRECT holds at most 256 rows: larger chunks only here
    window("w2x16x8"),
    window("w8x4x8"),
    window("w4x4x8b2"),
]
QUICK = ["chunk", "w4x8x8-v16", "w4x8x8-v16-fill", "w4x8x8-xt-v16", "w2x16x8-v16", "w8x4x8-v16"]
# V = 2, 4 and bf16 run these (or those of --variants among them)
SIDE = ["chunk", "w4x8x8-v16", "w4x8x8-xt-v16", "w2x16x8-v16"]
# dX runs these on W^T's pattern (or those of --variants among them)
DX = ["chunk", "w4x8x8-v16", "w4x8x8-xt-v16", "w2x16x8-v16", "w8x4x8-v16"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--in-features", type=int, default=4096)
    p.add_argument("--out-features", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--sparsities", default="0.8,0.9,0.95,0.98")
    p.add_argument("--side-sparsity", type=float, default=0.9, help="V = 2, 4 and bf16 run here")
    p.add_argument("--variants", default="", help="comma list of variant names (default: all)")
    p.add_argument("--quick", action="store_true", help="0.9 and 0.95, a few variants, no V 2/4")
    p.add_argument("--no-side", action="store_true", help="skip V = 2, 4 and bf16")
    p.add_argument("--no-dx", action="store_true", help="skip dX = dY W")
    p.add_argument("--budget-s", type=float, default=170.0, help="start no job after this")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", default=None)
    return p.parse_args(argv)


def main_kernel_ms(fn) -> float:
    """Device time of the product's kernel alone (the sparse linear kernels, or the SpMM's) in
    one call."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = ("sparse_linear_forward", "sparse_linear_window", "spmm")
    events = [e for e in prof.events() if any(n in e.name for n in names)]
    return device_time_ms(events)


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return (torch.linalg.vector_norm(y.double() - ref) / torch.linalg.vector_norm(ref)).item()


def plan_stats(layer: SparseLinear, variant: sl.Variant, n_in: int, device) -> dict:
    """U, fill and mean ldmatrix wavefronts of the plan a window variant ran (cached)."""
    plan = sl.window_plan_for(
        layer.row_ptr,
        layer.col_idx,
        n_in,
        layer.vector,
        variant,
        sl.window_shared_limit(variant.shape, device),
    )
    steps = plan.rows.shape[0]
    residues = (plan.rows.long() & 7).view(-1, 8)
    counts = torch.nn.functional.one_hot(residues, 8).sum(1)
    return {
        "U": plan.chunk_rows,
        "fill": layer.col_idx.numel() / max(16 * steps, 1),
        "wf": counts.max(1).values.float().mean().item() if steps else 0.0,
    }


def measure(row, call, timer, dense_ms, useful, ref, bound):
    """Time ``call`` into ``row`` and check its result against ``ref``; an error is recorded."""
    try:
        m = timer(call)
        row["us"] = m.ms * 1e3
        row["main_us"] = main_kernel_ms(call) * 1e3
        row["speedup"] = dense_ms / m.ms
        row["tflops"] = useful / (m.ms * 1e9)
        row["err"] = rel_err(m.result, ref)
        row["ok"] = bool(torch.isfinite(m.result).all()) and row["err"] <= bound
    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
        row["ok"] = False
        row["error"] = f"{type(e).__name__}: {e}"[:200]
    return row


def dense_row(rows, vector, sparsity, dtype, dense_ms, useful):
    rows.append(
        dict(
            variant="cublas",
            V=vector,
            sparsity=sparsity,
            dtype=dtype,
            us=dense_ms * 1e3,
            main_us=dense_ms * 1e3,
            speedup=1.0,
            tflops=useful / (dense_ms * 1e9),
            err=0.0,
            ok=True,
        )
    )
    print_row(rows[-1])


def run_config(args, rows, variants, vector, sparsity, precision, x, timer):
    device = x.device
    dtype = DTYPES[precision]
    torch.manual_seed(args.seed)
    layer = SparseLinear(
        args.in_features,
        args.out_features,
        sparsity=sparsity,
        vector=vector,
        precision=precision,
        device=device,
        dtype=dtype,
    )
    w = layer.weight.detach()
    nnz = int((w != 0).sum())
    ref = F.linear(x.double(), w.double(), layer.bias.detach().double())
    dense = timer(lambda: torch.matmul(x, w.t())).ms
    values = layer.values.detach()
    bias = layer.bias.detach()
    useful = 2 * args.tokens * nnz
    dense_row(rows, vector, sparsity, precision, dense, useful)
    for variant in variants:
        row = dict(variant=variant.name, V=vector, sparsity=sparsity, dtype=precision)

        def call(variant=variant):
            return sl.sparse_linear_cuda(
                x,
                values,
                bias,
                layer.row_ptr,
                layer.col_idx,
                args.out_features,
                vector,
                precision,
                variant=variant,
            )

        measure(row, call, timer, dense, useful, ref, BOUND[precision])
        if variant.kernel == "window" and "error" not in row:
            row.update(plan_stats(layer, variant, args.in_features, device))
        rows.append(row)
        print_row(row)


def run_dx(args, rows, variants, sparsity, timer):
    """dX = dY W at V = 8, fp16: the backward's CVSE SpMM and the kernels on W^T's pattern."""
    device = torch.device("cuda")
    torch.manual_seed(args.seed)
    n_in, n_out = args.in_features, args.out_features
    layer = SparseLinear(
        n_in,
        n_out,
        sparsity=sparsity,
        vector=8,
        precision="fp16",
        device=device,
        dtype=torch.float16,
    )
    w = layer.weight.detach()
    grad = torch.randn(args.tokens, n_out, device=device, dtype=torch.float16)
    ref = grad.double() @ w.double()
    dense = timer(lambda: torch.matmul(grad, w)).ms
    values = layer.values.detach()
    f = weight_formats(layer.row_ptr, layer.col_idx, layer.vec_mask, n_out, n_in, 8)
    useful = 2 * args.tokens * int((w != 0).sum())
    dense_row(rows, 8, sparsity, "dX-fp16", dense, useful)

    def cvse():
        moved = torch.cat([values, values.new_zeros(1)])[f.t_index]
        return spmm(f.wt, grad.t(), "fp16", values=moved).t()

    calls = [("cvse-spmm", cvse)] + [
        (
            v.name,
            lambda v=v: sl.sparse_linear_cuda(
                grad,
                values,
                None,
                f.wt.row_ptr,
                f.wt.col_idx,
                n_in,
                8,
                "fp16",
                variant=v,
                through=f.t_index,
            ),
        )
        for v in variants
    ]
    for name, call in calls:
        row = dict(variant=name, V=8, sparsity=sparsity, dtype="dX-fp16")
        rows.append(measure(row, call, timer, dense, useful, ref, BOUND["fp16"]))
        print_row(row)


def print_row(r):
    if "error" in r:
        print(
            f"{r['variant']:<22} V={r['V']} s={r['sparsity']:<5} {r['dtype']}  ERROR {r['error']}"
        )
        return
    extra = ""
    if "U" in r:
        extra = f"  U={r['U']:<4} fill={r['fill']:.3f} wf={r['wf']:.2f}"
    flag = "" if r["ok"] else "  FAILED CHECK"
    print(
        f"{r['variant']:<22} V={r['V']} s={r['sparsity']:<5} {r['dtype']}  {r['us']:9.1f} us "
        f"(kernel {r['main_us']:8.1f})  x{r['speedup']:5.2f} cuBLAS  {r['tflops']:6.1f} TFLOP/s  "
        f"err {r['err']:.1e}{extra}{flag}",
        flush=True,
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("sparse_linear_sweep: needs a CUDA device", file=sys.stderr)
        return 2
    start = time.perf_counter()
    device = torch.device("cuda")
    by_name = {v.name: v for v in VARIANTS}
    names = [n for n in args.variants.split(",") if n] or (QUICK if args.quick else list(by_name))
    unknown = [n for n in names if n not in by_name]
    if unknown:
        print(f"unknown variants {unknown}; known: {', '.join(by_name)}", file=sys.stderr)
        return 2
    variants = [by_name[n] for n in names]
    side = [by_name[n] for n in SIDE if n in names]
    sparsities = [float(s) for s in args.sparsities.split(",")] if not args.quick else [0.9, 0.95]
    print(
        f"{torch.cuda.get_device_name(device)}, W {args.out_features} x {args.in_features}, "
        f"{args.tokens} tokens, variants: {', '.join(names)}",
        flush=True,
    )
    timer = ProfilerTimer(device, args.warmup, args.iters)
    gen = torch.Generator(device).manual_seed(args.seed)
    xs = {
        p: torch.randn(args.tokens, args.in_features, device=device, dtype=DTYPES[p], generator=gen)
        for p in ("fp16", "bf16")
    }
    # by importance, so that a run cut short by --budget-s still answers the bar
    jobs = [(run_config, (variants, 8, s, "fp16", xs["fp16"])) for s in sparsities]
    if not args.quick and not args.no_dx:
        dx = [by_name[n] for n in DX if n in names]
        jobs += [(run_dx, (dx, s)) for s in sparsities]
    if not args.quick and not args.no_side:
        jobs += [(run_config, (side, v, args.side_sparsity, "fp16", xs["fp16"])) for v in (2, 4)]
        jobs += [(run_config, (side, 8, args.side_sparsity, "bf16", xs["bf16"]))]
    rows: list[dict] = []
    for job, job_args in jobs:
        if time.perf_counter() - start > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: {job.__name__}{job_args[1:3]} skipped")
            continue
        job(args, rows, *job_args, timer)
    summary(rows)
    if args.csv:
        import csv

        keys = sorted({k for r in rows for k in r})
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, keys)
            writer.writeheader()
            writer.writerows(rows)
    print(f"sweep took {time.perf_counter() - start:.0f} s")
    return 0 if all(r["ok"] for r in rows) else 1


def summary(rows):
    print("\nbest per configuration (checked variants only):")
    configs = sorted({(r["dtype"], r["V"], r["sparsity"]) for r in rows})
    rule = []
    for dtype, v, s in configs:
        mine = [r for r in rows if (r["dtype"], r["V"], r["sparsity"]) == (dtype, v, s)]
        ok = [r for r in mine if r["ok"] and r["variant"] != "cublas"]
        today = "cvse-spmm" if dtype.startswith("dX") else "chunk"
        base = next((r for r in mine if r["variant"] == today and r["ok"]), None)
        if not ok:
            print(f"  {dtype} V={v} s={s}: no variant passed")
            continue
        best = min(ok, key=lambda r: r["us"])
        gain = f", x{base['us'] / best['us']:.2f} over {today}" if base else ""
        print(
            f"  {dtype} V={v} s={s}: {best['variant']} {best['us']:.1f} us, "
            f"x{best['speedup']:.2f} cuBLAS, {best['tflops']:.1f} TFLOP/s{gain}"
        )
        if dtype == "fp16" and v == 8:
            rule.append((s, best["variant"]))
    failed = [r for r in rows if not r["ok"]]
    for r in failed:
        print(
            f"  FAILED {r['variant']} V={r['V']} s={r['sparsity']} {r['dtype']}: "
            + (r["error"] if "error" in r else f"err {r['err']:.2e}")
        )
    if rule:
        print(
            "\nFORWARD_RULE rows choosing the best fp16 V = 8 variant (density = 1 - sparsity; "
            "set the bounds between the measured points):"
        )
        for s, name in rule:
            print(f"  density <= {1 - s + 1e-9:.3f}: {name}")


if __name__ == "__main__":
    sys.exit(main())
