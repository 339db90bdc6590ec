"""What a rank of full-graph training holds on its GPU, tensor by tensor, from the sizes of
its part: the estimate behind docs/TUNING.md's table, checked against the tensors a small
run holds (tests/distributed/test_memory.py). ``estimate`` is GCN's, ``attention_estimate``
AGNN's and GAT's; both give the persistent tensors, what each layer saves for the backward
and the bytes live in each phase of a step, the peak being the largest phase.

Persistent, for every model: the local graph's CSR (unless it waits on the host), the halo
plan, the features (unless in host memory) and their halo rows when they are kept, labels and
masks. GCN adds its matrix in two parts by source with their transposes (ME-BCRS: per vector
a column index, a mask byte and 8 fp32 values; a row pointer per 8 rows); AGNN and GAT run on
the local graph's own ME-BCRS and its transpose (ones as values, and the slot maps), GAT
beside them on diag(A, ..., A) for each head count above one (no values). Saved for the
backward, per layer (GCN: ``saved_bytes``): GCN keeps the bits of ReLU and dropout, the
aggregate of a layer that multiplies after aggregating, the input of a projecting layer after
the first; AGNN and GAT their [own; halo] rows and edge-sized tensors (``attention_estimate``).
Each phase of a step adds its own: an activation, the fp32 row blocks of the epilogue, the
buffers of a block of the halo exchange (bounded by their budgets), the gradients of an
attention layer's edge values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..formats.block_diagonal import padded
from .aggregation import column_bytes, columns_that_fit
from .epilogue import ROW_BLOCK_BYTES
from .projection import HOST_BLOCK_BYTES

PATTERN_BYTES_PER_VECTOR = 4 + 1  # col_idx int32, vec_mask uint8
MATRIX_BYTES_PER_VECTOR = PATTERN_BYTES_PER_VECTOR + 8 * 4  # and 8 fp32 values


@dataclass(frozen=True)
class RankSizes:
    """One rank's part. rows: own nodes; halo: remote sources read; sent: rows sent to peers
    per exchange; edges_own / edges_halo: edges (self-loops included) from own / halo
    sources; vectors_own / vectors_halo: their ME-BCRS vectors, and vectors_own_t /
    vectors_halo_t the transposes' (at IGB-like sparsity one per edge); dims: the layers'
    widths [F, hidden, ..., classes]; feature_bytes: per feature element; storage_bytes: per
    element of the hidden activations (2 where autocast runs in fp16/bf16, else 4).
    vectors_t: the vectors of the transpose of the whole local pattern [rows + halo, rows],
    which AGNN and GAT run on (None: vectors_own_t + vectors_halo_t, from which it differs by
    the window that holds both own and halo rows at most). The pattern's own vectors are
    vectors_own + vectors_halo (``vectors``): a vector is one column of a window."""

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
    vectors_t: int | None = None

    @property
    def edges(self) -> int:
        return self.edges_own + self.edges_halo

    @property
    def sources(self) -> int:
        """The local graph's source rows: [own; halo]."""
        return self.rows + self.halo

    @property
    def vectors(self) -> int:
        return self.vectors_own + self.vectors_halo

    @property
    def local_vectors_t(self) -> int:
        if self.vectors_t is None:
            return self.vectors_own_t + self.vectors_halo_t
        return self.vectors_t


def matrix_bytes(vectors: int, rows: int) -> int:
    """A matrix's kernel arrays: its vectors' and a row pointer (int64) per window of 8 rows."""
    return MATRIX_BYTES_PER_VECTOR * vectors + 8 * (-(-rows // 8) + 1)


def _node_bytes(
    s: RankSizes, features_on_host: bool, features_halo: bool, graph_on_host: bool
) -> dict:
    """What every model's rank keeps besides its graph formats, bytes by name: the local
    graph's CSR, the halo plan, the features, labels and masks."""
    n, h = s.rows, s.halo
    return {
        "local graph CSR (indptr, indices, edge ids; int64)": 0
        if graph_on_host
        else 8 * (n + 1) + 16 * s.edges,
        "halo plan and sources' out-degrees (int64)": 8 * s.sent + 8 * (n + h),
        "features": 0 if features_on_host else n * s.dims[0] * s.feature_bytes,
        "features' halo rows (kept)": h * s.dims[0] * s.feature_bytes if features_halo else 0,
        "labels (int64), masks, training index and labels": 8 * n + 3 * n + 16 * s.train_rows,
    }


def persistent_bytes(
    s: RankSizes, features_on_host: bool, features_halo: bool, graph_on_host: bool = False
) -> dict:
    """The tensors a GCN rank keeps through training, bytes by name."""
    n, h = s.rows, s.halo
    return {
        **_node_bytes(s, features_on_host, features_halo, graph_on_host),
        "GCN matrix, own sources, and its transpose": matrix_bytes(s.vectors_own, n)
        + matrix_bytes(s.vectors_own_t, n),
        "GCN matrix, halo sources, and its transpose": matrix_bytes(s.vectors_halo, n)
        + matrix_bytes(s.vectors_halo_t, h),
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
    """GCN's: {"persistent": {...}, "saved": {...}, "phases": {...}, "peak": bytes,
    "peak_phase": name}: the peak is the largest phase (``phase_bytes``)."""
    return _summary(
        persistent_bytes(s, features_on_host, features_halo, graph_on_host),
        saved_bytes(s),
        phase_bytes(s, features_on_host, features_halo, gpu_bytes, graph_on_host),
    )


def _summary(persistent: dict, saved: dict, phases: dict) -> dict:
    peak_phase = max(phases, key=phases.get)
    return {
        "persistent": persistent,
        "saved": saved,
        "phases": phases,
        "peak": phases[peak_phase],
        "peak_phase": peak_phase,
    }


# ------------------------------------------------------------------ AGNN and GAT


@dataclass(frozen=True)
class AGNNLayers:
    """An AGNN step as its estimate reads it, ``RankSizes.dims`` being [F, hidden, classes]:
    ``layers`` AGNNConv layers; ``dropout``: whether its dropouts draw (p > 0: the masks are
    kept); ``one_pass``: whether the attention runs in one pass (``ops.agnn_one_pass``: each
    row's max and sum are kept instead of the cosines and P)."""

    layers: int
    dropout: bool = True
    one_pass: bool = False

    def __post_init__(self):
        _check_count("AGNNLayers.layers", self.layers)


@dataclass(frozen=True)
class GATLayers:
    """A GAT step as its estimate reads it, ``RankSizes.dims`` being [F, width_0, ...,
    classes], each layer's output width per head: ``heads`` per layer; ``concat``: the hidden
    layers' heads are concatenated (else averaged); ``feat_drop`` / ``attn_drop``: whether
    those dropouts draw; ``residual``: the layers after the first add a projection of their
    input (GATConv's res_fc); ``fused``: the attention is computed inside the SpMMs and the
    gradient SDDMM from each row's record, as the tensor-core kernels (fp16, bf16, tf32) do
    (``ops.gat``), so that without attention dropout no edge-sized tensor is stored."""

    heads: tuple[int, ...]
    concat: bool = True
    feat_drop: bool = True
    attn_drop: bool = True
    residual: bool = False
    fused: bool = True

    def __post_init__(self):
        if not isinstance(self.heads, tuple) or not self.heads:
            raise ValueError(f"GATLayers.heads must be a non-empty tuple, got {self.heads!r}")
        for heads in self.heads:
            _check_count("GATLayers.heads", heads)


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def attention_estimate(
    s: RankSizes,
    model: AGNNLayers | GATLayers,
    features_halo: bool = False,
    gpu_bytes: int | None = None,
    cuda: bool = True,
) -> dict:
    """AGNN's or GAT's estimate, as ``estimate``'s: {"persistent", "saved", "phases", "peak",
    "peak_phase"}. ``features_halo``: the features' halo rows are kept (by GAT without a
    feature dropout, whose first layer projects them);
    ``gpu_bytes``: the GPU's memory, which bounds a block of the halo exchange (None:
    the whole width); ``cuda``: the step runs the CUDA kernels, which keep fp32 norms, row
    records and contiguous score terms, and 1-byte dropout masks; the CPU's reference keeps
    the norms and masks in the activations' type and GAT's P always. Eager steps: a layer
    replaying its kernels from CUDA graphs (``ops.replay``, small graphs only) also keeps
    their static buffers."""
    if isinstance(model, AGNNLayers):
        if len(s.dims) != 3:
            raise ValueError(f"AGNN's dims are [F, hidden, classes], got {s.dims}")
        saved = _agnn_saved(s, model, cuda)
        phases = _agnn_phases(s, model, cuda, gpu_bytes, saved)
    elif isinstance(model, GATLayers):
        if len(s.dims) != len(model.heads) + 1:
            raise ValueError(
                f"GAT's dims are [F, then each layer's width per head], one more than its "
                f"{len(model.heads)} layers' heads, got {s.dims}"
            )
        parts = _gat_parts(s, model, features_halo, cuda)
        saved = {
            f"layer {i} ({p.width_in} -> {p.heads} x {p.width})": p.saved
            for i, p in enumerate(parts)
        }
        phases = _gat_phases(s, model, parts, gpu_bytes, cuda)
    else:
        raise TypeError(f"model must be AGNNLayers or GATLayers, got {type(model).__name__}")
    persistent = _attention_persistent(s, model, features_halo)
    total = sum(persistent.values())
    return _summary(persistent, saved, {name: total + b for name, b in phases.items()})


def _attention_persistent(s: RankSizes, model, features_halo: bool) -> dict:
    """The node data, and the local graph's ME-BCRS as ``Graph.adj`` caches it (ones as
    values, perm: the slot of each CSR position) with its transpose (perm, the slot of A each
    of its slots reads, its CSR row pointers); for GAT, ``Graph.adj_heads``' diag(A, ..., A)
    of each head count above one and its transpose, the same arrays per copy without values."""
    n, src, e = s.rows, s.sources, s.edges
    out = _node_bytes(s, False, features_halo, False)
    out["local graph's ME-BCRS and its transpose"] = (
        matrix_bytes(s.vectors, n) + matrix_bytes(s.local_vectors_t, src) + 24 * e + 8 * (src + 1)
    )
    for heads in sorted({h for h in getattr(model, "heads", ()) if h > 1}):
        rows, cols = heads * padded(n), heads * padded(src)
        out[f"diag(A, ..., A) of {heads} heads and its transpose"] = (
            PATTERN_BYTES_PER_VECTOR * heads * (s.vectors + s.local_vectors_t)
            + 8 * (rows // 8 + 1)
            + 8 * (cols // 8 + 1)
            + 24 * heads * e
            + 8 * (cols + 1)
            + 2 * 4  # each copy's values: one fp32 zero, read through a stride of 0
        )
    return out


def _halo_blocks(s: RankSizes, width: int, itemsize: int, gpu_bytes: int | None) -> int:
    """The buffers of ``aggregation.with_halo``'s exchange of ``width`` columns, or of its
    backward: a block's rows sent and received, twice while the next block travels, the
    block's columns as ``aggregation.block_columns`` chooses them."""
    travelling = s.halo + s.sent
    per_column = column_bytes(travelling, s.rows, itemsize)
    columns = width if gpu_bytes is None else columns_that_fit(width, per_column, gpu_bytes)
    return 2 * travelling * itemsize * columns


def _agnn_saved(s: RankSizes, m: AGNNLayers, cuda: bool) -> dict:
    """What AGNN's forward keeps, bytes by layer: the encoder, its input (dropped, in the
    storage type: the features themselves otherwise) and ReLU's output; each AGNNConv its
    [own; halo] rows and their normalised copy, the norms (fp32 on CUDA, else the rows'
    type), and the cosines and P (8 fp32 slots per vector each; one pass: each row's max and
    sum); the decoder its dropped input and the dropout's mask."""
    n, src, b = s.rows, s.sources, s.storage_bytes
    f, d, c = s.dims
    encoder = n * d * b
    if m.dropout or s.feature_bytes != b:
        encoder += n * f * b
    layer = 2 * src * d * b + src * (4 if cuda else b)
    layer += 2 * 4 * n if m.one_pass else 2 * 32 * s.vectors
    decoder = n * d * b + (n * d * (1 if cuda else b) if m.dropout else 0)
    return {
        f"encoder ({f} -> {d})": encoder,
        **{f"AGNNConv {i} ({d})": layer for i in range(m.layers)},
        f"decoder ({d} -> {c})": decoder,
    }


def _agnn_phases(s: RankSizes, m: AGNNLayers, cuda: bool, gpu_bytes, saved: dict) -> dict:
    """Bytes live in each phase of an AGNN step besides the persistent tensors: the saved
    tensors of the layers the phase follows (forward) or has not yet passed (backward), and
    the phase's own. Forward: the encoder's Linear output (and the dropout's mask on CUDA);
    per AGNNConv, the previous layer's output, the halo exchange's blocks, the SpMM's fp32
    result and its cast; the logits. Backward: per AGNNConv the incoming gradient and the
    largest set of the edge-sized gradients, P^T and the fp32 row gradients live at once
    (``ops.agnn._backward_body``, the cosines and P computed again in one pass); the
    exchange's gradient of [own; halo] rows and of the own rows, and its blocks."""
    n, src, b = s.rows, s.sources, s.storage_bytes
    f, d, c = s.dims
    v, vt = 32 * s.vectors, 32 * s.local_vectors_t  # an fp32 value per slot
    encoder, *layers, decoder = saved.values()
    layer = layers[0]
    blocks = _halo_blocks(s, d, b, gpu_bytes)
    logits = 2 * 4 * n * c
    own, rows = n * d, src * d
    dropped = 0
    if m.dropout:
        dropped = (n * f * s.feature_bytes if s.feature_bytes != b else 0) + (n * f if cuda else 0)
    out = {"forward encoder": encoder + own * b + dropped}
    before = encoder
    for i in range(m.layers):
        previous = own * b if i else 0  # referenced until the layer returns (layer 0: saved)
        out[f"forward AGNNConv {i}: exchange"] = before + previous + rows * b + blocks
        out[f"forward AGNNConv {i}: attention"] = before + layer + previous + own * (4 + b)
        before += layer
    out["forward decoder"] = before + decoder + logits
    out["backward decoder"] = before + decoder + logits + 2 * own * b
    gradients = max(
        2 * v,
        v + vt + 4 * rows,
        2 * v + 4 * rows,
        v + vt + 4 * rows + 4 * own,
        vt + 8 * rows + 4 * own,
        (8 + b) * rows,
    )
    if m.one_pass:
        gradients += 2 * v
    for i in reversed(range(m.layers)):
        out[f"backward AGNNConv {i}: attention"] = before + logits + own * b + gradients
        before -= layer
        out[f"backward AGNNConv {i}: exchange"] = before + logits + (rows + own) * b + blocks
    out["backward encoder"] = encoder + logits + 2 * own * b
    return out


@dataclass(frozen=True)
class _GATLayer:
    """One GAT layer's sizes and what its forward keeps, by tensor (bytes)."""

    width_in: int
    heads: int
    width: int
    input_bytes: int  # of its input: the features', then fp32 (ELU of a sum with the bias)
    narrows: bool  # heads * width <= width_in: h W is formed before the exchange
    kept: bool  # the features' kept halo rows are projected
    rows: int  # of diag(A, ..., A)'s blocks together (A itself for one head)
    cols: int
    mask: int  # the feature dropout's, where its input takes a gradient
    fc_input: int  # fc's input in the storage type, unless the features themselves
    residual: int  # res_fc's input (autocast's own copy, or a tensor not kept otherwise)
    projected: int  # h W, head-major
    terms: int  # the score terms, fp32, and on CUDA the rows' records
    edges: int  # P and the attention dropout's mask
    elu: int  # ELU's input, fp32, of a layer before the last

    @property
    def saved(self) -> int:
        return (
            self.mask
            + self.fc_input
            + self.residual
            + self.projected
            + self.terms
            + self.edges
            + self.elu
        )


def _gat_parts(s: RankSizes, m: GATLayers, features_halo: bool, cuda: bool) -> list[_GATLayer]:
    """Each GAT layer's sizes and what its forward keeps (``nn.gat_conv.attend``,
    ``ops.gat``): the feature dropout's mask (bool on CUDA, the noise on the CPU); fc's input,
    [own; halo] rows where it widens or projects the kept halo, else the own rows; h W
    head-major [heads * padded(sources), width]; the score terms [heads, columns, 2] fp32 (el
    a view of them; er copied out where the blocks' rows and columns differ) and on CUDA
    their contiguous copies and 16 bytes of record per row; P (8 fp32 slots per vector and
    head) unless the kernels compute it where it is read, and the dropout's 1-byte mask; the
    input of the ELU that follows a hidden layer."""
    n, src, b = s.rows, s.sources, s.storage_bytes
    parts = []
    width_in = s.dims[0]
    last = len(m.heads) - 1
    for i, heads in enumerate(m.heads):
        width = s.dims[i + 1]
        input_bytes = s.feature_bytes if i == 0 else 4
        narrows = heads * width <= width_in
        kept = i == 0 and features_halo and not m.feat_drop  # a dropout's rows travel
        mask = n * width_in * (1 if cuda else input_bytes) if m.feat_drop and i else 0
        if kept or not narrows:
            fc_input = src * width_in * b
        else:  # the features themselves when fc reads them undropped and in its type
            undropped = i == 0 and not m.feat_drop and input_bytes == b
            fc_input = 0 if undropped else n * width_in * b
        residual = 0
        if m.residual and i and width_in != heads * width and not (narrows and input_bytes == b):
            residual = n * width_in * b
        rows = heads * padded(n) if heads > 1 else n
        cols = heads * padded(src) if heads > 1 else src
        terms = 8 * cols
        if cuda:
            terms += 4 * rows + 4 * cols + 16 * heads * padded(n)
        elif heads > 1 and padded(n) != padded(src):
            terms += 4 * rows
        edges = 32 * heads * s.vectors if m.attn_drop or not cuda else 0
        edges += 8 * heads * s.vectors if m.attn_drop else 0
        width_out = heads * width if m.concat else width
        parts.append(
            _GATLayer(
                width_in=width_in,
                heads=heads,
                width=width,
                input_bytes=input_bytes,
                narrows=narrows,
                kept=kept,
                rows=rows,
                cols=cols,
                mask=mask,
                fc_input=fc_input,
                residual=residual,
                projected=cols * width * b,
                terms=terms,
                edges=edges,
                elu=4 * n * width_out if i < last else 0,
            )
        )
        width_in = width_out
    return parts


def _gat_phases(s: RankSizes, m: GATLayers, parts: list, gpu_bytes, cuda: bool) -> dict:
    """Bytes live in each phase of a GAT step besides the persistent tensors, as in
    ``_agnn_phases``. Forward, per layer: its input (after the first: the previous ELU's,
    referenced until the layer returns) and the dropped copy, then [own; halo] rows with the
    exchange's blocks, or h W and the kept rows' projection; the attention: h W in both
    layouts, the dropped or unkept P, the aggregate. Backward: the attention's gradient in,
    P^T and the gradients of P and of the scores (none on the fused kernels without
    attention dropout) beside the gradient of h W; the projection's: the two gradients of h
    W, the input's gradient and its cast, the exchange's gradient and blocks."""
    n, src, b = s.rows, s.sources, s.storage_bytes
    logits = 2 * 4 * n * s.dims[-1]
    out = {}
    before = 0
    for i, p in enumerate(parts):
        ib, width_in, hw = p.input_bytes, p.width_in, p.heads * p.width
        inputs = n * width_in * ib if i else 0
        if m.feat_drop and not (p.narrows and ib == b):  # else the dropped rows are fc's input
            inputs += n * width_in * ib
        ft = src * hw * b
        if p.kept:  # [own; halo] rows put together (cast: fc's input), and projected
            sources = src * width_in * (s.feature_bytes if s.feature_bytes != b else 0) + ft
        elif p.narrows:  # h W, then [own; halo] rows of it
            sources = n * hw * b + ft + _halo_blocks(s, hw, b, gpu_bytes)
        else:  # the exchange's blocks, then fc's output beside its input (cast: fc's)
            blocks = _halo_blocks(s, width_in, ib, gpu_bytes)
            sources = src * width_in * (ib if ib != b else 0) + max(blocks, ft)
        out[f"forward layer {i}: [own; halo] rows"] = (
            before + p.mask + p.fc_input + inputs + sources
        )
        v = 32 * p.heads * s.vectors
        unkept = v if m.attn_drop or (cuda and not m.fused) else 0  # dropped, or written only
        aggregate = p.rows * p.width * b
        out[f"forward layer {i}: attention"] = (
            before + p.saved - p.elu + inputs + ft + unkept + aggregate
        )
        before += p.saved
    for i in reversed(range(len(parts))):
        p = parts[i]
        before -= p.saved
        ib, width_in, hw = p.input_bytes, p.width_in, p.heads * p.width
        v, vt = 32 * p.heads * s.vectors, 32 * p.heads * s.local_vectors_t
        grad_ft = p.cols * p.width * b
        gradients = grad_ft
        if not (cuda and m.fused and not m.attn_drop):
            dropped = v if m.attn_drop else 0  # P times the mask, before its move into A^T
            gradients = max(dropped + vt, vt + grad_ft, 2 * v + grad_ft)
        out[f"backward layer {i}: attention"] = (
            before + p.saved - p.elu + logits + p.rows * p.width * b + gradients
        )
        moments = [2 * grad_ft]
        if p.narrows and not p.kept:
            moments.append(grad_ft + n * hw * b + _halo_blocks(s, hw, b, gpu_bytes))
            if i:
                moments.append(n * hw * b + n * width_in * (b + ib))
        elif i:
            cast = src * width_in * ib if ib != b else 0
            moments.append(grad_ft + src * width_in * b + cast)
            moments.append(
                src * width_in * ib + n * width_in * ib + _halo_blocks(s, width_in, ib, gpu_bytes)
            )
        out[f"backward layer {i}: projection"] = (
            before + p.mask + p.fc_input + p.residual + logits + max(moments)
        )
    return out


def of_partition(partition, dims, storage_bytes: int, vectors: dict | None = None) -> RankSizes:
    """The sizes of a built ``FullGraphPartition`` (``vectors``: the SplitRows' vector counts
    by part, "own", "halo", "own_t", "halo_t", and "t", the whole local pattern's transpose's,
    where known; else one per edge)."""
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
        vectors_t=vectors.get("t"),
    )
