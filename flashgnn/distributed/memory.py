"""What a rank of full-graph GCN training holds on its GPU, tensor by tensor, from the sizes of
its part: the estimate behind docs/TUNING.md's table, checked against the tensors a small
run holds (tests/distributed/test_memory.py).

Persistent: the local graph's CSR (kept after GCN's matrices are built from it), the halo
plan, GCN's matrix in two parts by source with their transposes (ME-BCRS: per vector a column
index, a mask byte and 8 fp32 values; a row pointer per 8 rows), the features (unless in host
memory) and their halo rows when they are kept, labels and masks. Saved for the backward, per
layer (``saved_bytes``): the bits of ReLU and dropout, the aggregate of a layer that multiplies
after aggregating, the input of a projecting layer after the first. Transient: the fp32 row
blocks of the epilogue and one block of the halo exchange, bounded by their budgets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .aggregation import EXCHANGE_MEMORY
from .epilogue import ROW_BLOCK_BYTES
from .projection import HOST_BLOCK_BYTES

MATRIX_BYTES_PER_VECTOR = 4 + 1 + 8 * 4  # col_idx int32, vec_mask uint8, 8 fp32 values


@dataclass(frozen=True)
class RankSizes:
    """One rank's part. rows: own nodes; halo: remote sources read; sent: rows sent to peers
    per exchange; edges_own / edges_halo: edges (self-loops included) from own / halo
    sources; vectors_own / vectors_halo: their ME-BCRS vectors, and vectors_own_t /
    vectors_halo_t the transposes' (at IGB-like sparsity one per edge); dims: the layers'
    widths [F, hidden, ..., classes]; feature_bytes: per feature element; storage_bytes: per
    element of the hidden activations (2 where autocast runs in fp16/bf16, else 4)."""

    rows: int
    halo: int
    sent: int
    edges_own: int
    edges_halo: int
    vectors_own: int
    vectors_halo: int
    vectors_own_t: int
    vectors_halo_t: int
    dims: tuple[int, ...]
    feature_bytes: int = 2
    storage_bytes: int = 2
    train_rows: int = 0

    @property
    def edges(self) -> int:
        return self.edges_own + self.edges_halo


def matrix_bytes(vectors: int, rows: int) -> int:
    """A matrix's kernel arrays: its vectors' and a row pointer (int64) per window of 8 rows."""
    return MATRIX_BYTES_PER_VECTOR * vectors + 8 * (-(-rows // 8) + 1)


def persistent_bytes(s: RankSizes, features_on_host: bool, features_halo: bool) -> dict:
    """The tensors a rank keeps through training, bytes by name."""
    n, h = s.rows, s.halo
    return {
        "local graph CSR (indptr, indices, edge ids; int64)": 8 * (n + 1) + 16 * s.edges,
        "halo plan and sources' out-degrees (int64)": 8 * s.sent + 8 * (n + h),
        "GCN matrix, own sources, and its transpose": matrix_bytes(s.vectors_own, n)
        + matrix_bytes(s.vectors_own_t, n),
        "GCN matrix, halo sources, and its transpose": matrix_bytes(s.vectors_halo, n)
        + matrix_bytes(s.vectors_halo_t, h),
        "features": 0 if features_on_host else n * s.dims[0] * s.feature_bytes,
        "features' halo rows (kept)": h * s.dims[0] * s.feature_bytes if features_halo else 0,
        "labels (int64), masks, training index and labels": 8 * n + 3 * n + 16 * s.train_rows,
    }


def saved_bytes(s: RankSizes) -> dict:
    """What the forward of a training step keeps for the backward, bytes by layer: a layer
    narrowing its input (dims[i] > dims[i + 1]) projects first and keeps its input (the
    features' own storage for the first layer); the others aggregate first and keep the
    aggregate; every layer but the last keeps one bit per output element (ReLU and the next
    layer's dropout)."""
    out = {}
    layers = len(s.dims) - 1
    for i in range(layers):
        width_in, width_out = s.dims[i], s.dims[i + 1]
        kept = 0
        if width_in > width_out:
            kept += 0 if i == 0 else s.rows * width_in * s.storage_bytes
        else:
            kept += s.rows * width_in * s.storage_bytes
        if i < layers - 1:
            kept += s.rows * math.ceil(width_out / 8)
        out[f"layer {i} ({width_in} -> {width_out})"] = kept
    return out


def transient_bytes(s: RankSizes, gpu_bytes: int | None, features_on_host: bool) -> dict:
    """Bounds of what a step allocates and frees beside the saved tensors: one activation of
    the widest layer (a layer's output, or the gradient its backward overwrites in place),
    the epilogue's row blocks in their fp32 forms, a block of the halo exchange (never live
    with the row blocks), the host copies' two buffers, the logits and their gradient."""
    widest = max(s.dims[1:])
    per_column = 2 * (s.halo + s.sent) * s.storage_bytes + s.rows * (s.storage_bytes + 8)
    exchange = widest * per_column
    if gpu_bytes is not None:
        exchange = min(exchange, int(EXCHANGE_MEMORY * gpu_bytes))
    rows_fp32 = 3 * min(ROW_BLOCK_BYTES, 4 * s.rows * widest)
    return {
        "one activation (storage type)": s.rows * widest * s.storage_bytes,
        "epilogue row block (fp32 value, dropout output, mask, 16-bit copy)": rows_fp32,
        "halo exchange block (rows sent and received twice, fp32 sums)": exchange,
        "host feature blocks (two buffers)": 2 * HOST_BLOCK_BYTES if features_on_host else 0,
        "logits (fp32) and their gradient": 2 * 4 * s.rows * s.dims[-1],
    }


def estimate(
    s: RankSizes,
    features_on_host: bool = False,
    features_halo: bool = False,
    gpu_bytes: int | None = None,
) -> dict:
    """{"persistent": {...}, "saved": {...}, "transient": {...}, "peak": bytes}: the peak is
    everything persistent and saved, one activation, the larger of the epilogue blocks and
    the exchange block (they are never live together), the host buffers and the logits: an
    upper estimate, as the saved tensors are all live only at the end of the forward."""
    persistent = persistent_bytes(s, features_on_host, features_halo)
    saved = saved_bytes(s)
    t = transient_bytes(s, gpu_bytes, features_on_host)
    blocks = [v for k, v in t.items() if k.startswith(("epilogue", "halo exchange"))]
    peak = (
        sum(persistent.values()) + sum(saved.values()) + sum(t.values()) - sum(blocks) + max(blocks)
    )
    return {"persistent": persistent, "saved": saved, "transient": t, "peak": peak}


def of_partition(partition, dims, storage_bytes: int, vectors: dict | None = None) -> RankSizes:
    """The sizes of a built ``FullGraphPartition`` (``vectors``: the SplitRows' vector counts
    by part, when built; else one per edge)."""
    graph, n = partition.graph, partition.num_own
    own = int((graph.indices < n).sum())
    vectors = vectors or {}
    return RankSizes(
        rows=n,
        halo=partition.num_halo,
        sent=int(partition.plan.send_index.numel()),
        edges_own=own,
        edges_halo=graph.num_edges - own,
        vectors_own=vectors.get("own", own),
        vectors_halo=vectors.get("halo", graph.num_edges - own),
        vectors_own_t=vectors.get("own_t", own),
        vectors_halo_t=vectors.get("halo_t", graph.num_edges - own),
        dims=tuple(dims),
        feature_bytes=partition.x.element_size(),
        storage_bytes=storage_bytes,
        train_rows=int(partition.masks[0].sum()),
    )
