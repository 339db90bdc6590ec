"""GCN epochs with and without the fused epilogue (``model.fused_epilogue``): GCN 3 x 256 on
the generated products-scale graph and the shared graphs, fp16 and fp32.

    python benchmarks/gcn_epoch.py --out gcn_epoch.csv [--graphs synthetic_products,cora]
        [--precisions fp16,fp32] [--quick]

An epoch is ``flashgnn train``'s step (zero_grad, forward under the precision's scope, loss on
the training nodes, backward, Adam), timed by CUDA events after warm-up epochs (the median).
SpMM ms: the summed device time of the epoch's SpMM kernels (names holding "spmm") as
torch.profiler records them, median over profiled epochs; ratio: epoch ms / SpMM ms (issue 40's
bar: <= 1.4). Peak MB: device memory allocated at the peak of the timed epochs beyond what
was allocated before the model was built. Prints a table and writes one CSV row per (graph,
precision, epilogue).
"""

import argparse
import csv
import statistics
import sys

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

from flashgnn.benchmarking.end_to_end import GENERATED, load_data
from flashgnn.benchmarking.graphs import data_dir
from flashgnn.benchmarking.timing import event_median_ms, free_device_memory
from flashgnn.benchmarking.training import on_device, training_step
from flashgnn.models import build_model

MODEL = dict(hidden_feats=256, num_layers=3, dropout=0.5)
HEADERS = ("graph", "precision", "epilogue", "epoch_ms", "spmm_ms", "ratio", "peak_mb")


def spmm_ms(step, epochs: int) -> float:
    """Median over ``epochs`` profiled calls of ``step`` of its SpMM kernels' device time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    samples = []
    for _ in range(epochs):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        samples.append(
            sum(
                e.time_range.elapsed_us()
                for e in prof.events()
                if e.device_type == DeviceType.CUDA and "spmm" in e.name.lower()
            )
            / 1e3
        )
    return statistics.median(samples)


def measure(data, precision: str, fused: bool, warmup: int, repeats: int) -> dict:
    device = data.x.device
    free_device_memory(device)
    base = torch.cuda.memory_allocated(device)
    torch.manual_seed(0)
    model = build_model(
        "gcn", data.x.shape[1], data.num_classes, precision=precision, fused_epilogue=fused, **MODEL
    ).to(device)
    step = training_step(model, data.graph, data.x, data.y, data.train_mask, precision)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    epoch = event_median_ms(step, 0, repeats)
    peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20
    spmm = spmm_ms(step, max(3, repeats // 4))
    del model, step
    return dict(
        epoch_ms=epoch, spmm_ms=spmm, ratio=epoch / spmm if spmm else float("nan"), peak_mb=peak
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", default="synthetic_products,cora")
    p.add_argument("--precisions", default="fp16,fp32")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="generated graphs at 1/16 of their nodes")
    p.add_argument("--data", default=None, help="datasets folder (default $FLASHGNN_DATA)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="CSV file to write")
    args = p.parse_args()
    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    root = data_dir(args.data)
    rows = []
    for name in args.graphs.split(","):
        if name not in GENERATED and (root is None or not (root / f"{name}.npz").exists()):
            print(f"{name}: no {name}.npz in the datasets folder, left out", file=sys.stderr)
            continue
        label, data, _ = load_data(name, root, args.quick, args.seed)
        data = on_device(data, torch.device("cuda"))
        for precision in args.precisions.split(","):
            for fused in (False, True):
                r = measure(data, precision, fused, args.warmup, args.repeats)
                rows.append(
                    dict(
                        graph=label,
                        precision=precision,
                        epilogue="fused" if fused else "separate",
                        **r,
                    )
                )
                print(
                    " ".join(
                        f"{rows[-1][h]:.2f}" if isinstance(rows[-1][h], float) else str(rows[-1][h])
                        for h in HEADERS
                    ),
                    flush=True,
                )
        del data
    widths = [max(len(h), 12) for h in HEADERS]
    print("  ".join(h.rjust(w) for h, w in zip(HEADERS, widths)))
    for r in rows:
        cells = [f"{r[h]:.2f}" if isinstance(r[h], float) else str(r[h]) for h in HEADERS]
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)))
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HEADERS)
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
