"""What a rank of full-graph GCN training holds on its GPU, tensor by tensor, from the sizes of
its part: the estimate behind docs/TUNING.md's table, checked against the tensors a small
run holds (tests/distributed/test_memory.py).

Persistent: the local graph's CSR (unless it waits on the host), the halo plan, GCN's matrix
in two parts by source with their transposes (ME-BCRS: per vector a column index, a mask byte
and 8 fp32 values; a row pointer per 8 rows), the features (unless in host memory) and their
halo rows when they are kept, labels and masks. Saved for the backward, per layer
(``saved_bytes``): the bits of ReLU and dropout, the aggregate of a layer that multiplies
after aggregating, the input of a projecting layer after the first. Each phase of a step
(``phase_bytes``) adds its own: an activation, the fp32 row blocks of the epilogue or a block
of the halo exchange, bounded by their budgets; the peak is the largest phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .aggregation import column_bytes, columns_that_fit
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


def persistent_bytes(
    s: RankSizes, features_on_host: bool, features_halo: bool, graph_on_host: bool = False
) -> dict:
    """The tensors a rank keeps through training, bytes by name."""
    n, h = s.rows, s.halo
    return {
        "local graph CSR (indptr, indices, edge ids; int64)": 0
        if graph_on_host
        else 8 * (n + 1) + 16 * s.edges,
        "halo plan and sources' out-degrees (int64)": 8 * s.sent + 8 * (n + h),
        "GCN matrix, own sources, and its transpose": matrix_bytes(s.vectors_own, n)
        + matrix_bytes(s.vectors_own_t, n),
        "GCN matrix, halo sources, and its transpose": matrix_bytes(s.vectors_halo, n)
        + matrix_bytes(s.vectors_halo_t, h),
        "features": 0 if features_on_host else n * s.dims[0] * s.feature_bytes,
        "features' halo rows (kept)": h * s.dims[0] * s.feature_bytes if features_halo else 0,
        "labels (int64), masks, training index and labels": 8 * n + 3 * n + 16 * s.train_rows,
    }


def _narrows(s: RankSizes, i: int) -> bool:
    return s.dims[i] > s.dims[i + 1]


def _fused(s: RankSizes, i: int) -> bool:
    """Whether layer i's X W is made by the previous layer's epilogue (that layer aggregates
    first, this one narrows): its input is never whole."""
    return i > 0 and _narrows(s, i) and not _narrows(s, i - 1)


def _layer_saved(s: RankSizes, i: int) -> int:
    width_in, width_out = s.dims[i], s.dims[i + 1]
    layers = len(s.dims) - 1
    kept = 0
    if not _narrows(s, i):  # aggregation first: the aggregate is kept for dW
        kept += s.rows * width_in * s.storage_bytes
    elif i > 0 and not _fused(s, i):  # X W first: X kept for dW (the features: stored)
        kept += s.rows * width_in * s.storage_bytes
    if i < layers - 1:  # ReLU and the next dropout: one bit per element
        kept += s.rows * math.ceil(width_out / 8)
    return kept


def saved_bytes(s: RankSizes) -> dict:
    """What the forward of a training step keeps for the backward, bytes by layer: a layer
    narrowing its input (dims[i] > dims[i + 1]) projects first and keeps its input (the
    features' own storage for the first layer; nothing where the previous layer's epilogue
    makes X W); the others aggregate first and keep the aggregate; every layer but the last
    keeps one bit per output element (ReLU and the next layer's dropout)."""
    return {
        f"layer {i} ({s.dims[i]} -> {s.dims[i + 1]})": _layer_saved(s, i)
        for i in range(len(s.dims) - 1)
    }


def _aggregation_block(s: RankSizes, width: int, exchanged: bool, gpu_bytes) -> int:
    """What a layer's aggregation of ``width`` columns allocates besides its result: a
    block's halo rows (sent and received, the next block's in flight), its columns of the
    input and the fp32 sums of both parts (``aggregation.block_columns``); without exchange
    the whole width at once, the halo part's sum included where there is a halo."""
    if not exchanged:
        return s.rows * width * 4 * (2 if s.halo else 1)
    per_column = column_bytes(s.halo + s.sent, s.rows, s.storage_bytes)
    columns = width if gpu_bytes is None else columns_that_fit(width, per_column, gpu_bytes)
    return columns * per_column


def phase_bytes(
    s: RankSizes,
    features_on_host: bool = False,
    features_halo: bool = False,
    gpu_bytes: int | None = None,
    graph_on_host: bool = False,
) -> dict:
    """Bytes live in each phase of a training step, by phase: the persistent tensors, the
    saved tensors of the layers the phase follows (forward) or has not yet passed (backward),
    and the phase's own. Forward, per layer: its aggregation (the projected or input
    activation it overwrites in place, the exchange block, the features' halo projected
    where it is kept) and its epilogue (its input when not kept, its output, the fp32 row
    blocks). Backward: the same, the incoming gradient overwritten in place, a projection's
    input gradient beside its kept input, and the logits and their gradient throughout."""
    persistent = sum(persistent_bytes(s, features_on_host, features_halo, graph_on_host).values())
    layers = len(s.dims) - 1
    logits = 2 * 4 * s.rows * s.dims[-1]
    host = 2 * HOST_BLOCK_BYTES if features_on_host else 0
    out = {}
    before = 0  # saved by the layers before this one
    for i in range(layers):
        width_in, width_out = s.dims[i], s.dims[i + 1]
        narrows = _narrows(s, i)
        width = width_out if narrows else width_in  # of the aggregation
        exchanged = s.halo > 0 and not (i == 0 and features_halo)
        block = _aggregation_block(s, width, exchanged, gpu_bytes)
        if i == 0 and features_halo and narrows:
            block += s.halo * width * s.storage_bytes  # the kept halo rows times W
        activation = s.rows * width * s.storage_bytes
        saved = _layer_saved(s, i)
        fusing = i < layers - 1 and _fused(s, i + 1)  # the epilogue makes the next X W
        width_made = s.dims[i + 2] if fusing else width_out
        out_bytes = s.rows * width_made * (4 if i == layers - 1 else s.storage_bytes)
        rows = 3 * min(ROW_BLOCK_BYTES, 4 * s.rows * width_out)
        unkept = activation if narrows else 0  # a projected aggregate is not kept
        stream = host if i == 0 else 0
        # a projection's input, kept until its backward (after the aggregation's)
        projected_input = 0
        if narrows and i > 0 and not _fused(s, i):
            projected_input = s.rows * width_in * s.storage_bytes
        # the aggregate's gradient: written over the incoming one unless their shapes differ
        gradient = activation if fusing else max(out_bytes, activation)
        forward = persistent + before
        backward = persistent + before + logits  # the logits live through the backward
        out[f"forward layer {i}: aggregation"] = (
            forward + projected_input + activation + block + stream
        )
        out[f"forward layer {i}: epilogue"] = forward + saved + unkept + out_bytes + rows
        out[f"backward layer {i}: epilogue"] = (
            backward + saved + gradient + (out_bytes if fusing else 0) + rows
        )
        out[f"backward layer {i}: aggregation"] = backward + projected_input + activation + block
        if narrows and not _fused(s, i):
            out[f"backward layer {i}: projection"] = (
                backward + 2 * projected_input + activation + stream
            )
        before += saved
    return out


def estimate(
    s: RankSizes,
    features_on_host: bool = False,
    features_halo: bool = False,
    gpu_bytes: int | None = None,
    graph_on_host: bool = False,
) -> dict:
    """{"persistent": {...}, "saved": {...}, "phases": {...}, "peak": bytes, "peak_phase":
    name}: the peak is the largest phase (``phase_bytes``)."""
    phases = phase_bytes(s, features_on_host, features_halo, gpu_bytes, graph_on_host)
    peak_phase = max(phases, key=phases.get)
    return {
        "persistent": persistent_bytes(s, features_on_host, features_halo, graph_on_host),
        "saved": saved_bytes(s),
        "phases": phases,
        "peak": phases[peak_phase],
        "peak_phase": peak_phase,
    }


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
