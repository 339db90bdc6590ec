"""Launchers of the sparse linear layer's forward (kernels/sparse_linear.cu), fp16 and bf16,
the plans its kernels walk, and the rule choosing the kernel and its shape per layer
(``FORWARD_RULE``).

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ..tensor_cache import TensorCache, built_for_reuse, tensor_version
from .runtime import allow_shared_memory, launch, operand, ptr, shared_memory_limits
from .sources import register
from .spmm import STORAGE, TAG

KERNEL_PRECISIONS = ("fp16", "bf16")
VECTORS = (2, 4, 8)
_PRECISION_ID = {"fp16": 0, "bf16": 1}
TOKEN_TILES = (1, 2, 4)  # MT: a block's tokens in m16 tiles (16, 32 or 64 tokens)
STAGE_ELEMENTS = 8192  # chunk rows x block tokens staged at once (kernels/sparse_linear.cu)
WARPS, WARP_STRIPS = 8, 8
BLOCK_STRIPS = WARPS * WARP_STRIPS
ZERO_ROWS = 8
# The smallest mean count of a strip's vectors in one chunk at which a block takes more tokens
# (and so shorter chunks): below it, padding each (strip, chunk) list to whole k16 steps costs
# more MMAs than a wider token tile saves in B fragment loads.
MIN_LIST_VECTORS = 16
MAX_GRID_Y = 65535


def _forward_name(precision: str, mt: int, out_dtype: torch.dtype) -> str:
    return f"fg::sl::sparse_linear_forward<{_PRECISION_ID[precision]}, {mt}, {TAG[out_dtype]}>"


def _transpose_name(in_dtype: torch.dtype, precision: str) -> str:
    return f"fg::sl::transpose_tokens<{TAG[in_dtype]}, {_PRECISION_ID[precision]}>"


class WindowShape(NamedTuple):
    """The compile-time shape of sparse_linear_window: blocks of ``warps`` warps x
    ``warp_strips`` strips and 16 * ``token_tiles`` tokens, at least ``blocks_per_sm`` blocks
    an SM; ``direct``: x read token-major and transposed in registers (else X^T written by
    transpose_tokens first)."""

    token_tiles: int
    warp_strips: int
    warps: int
    blocks_per_sm: int
    direct: bool

    @property
    def name(self) -> str:
        return (
            f"w{self.token_tiles}x{self.warp_strips}x{self.warps}"
            + ("" if self.blocks_per_sm == 1 else f"b{self.blocks_per_sm}")
            + ("" if self.direct else "-xt")
        )

    @property
    def tokens(self) -> int:
        return 16 * self.token_tiles

    @property
    def block_strips(self) -> int:
        return self.warps * self.warp_strips

    @property
    def row_bytes(self) -> int:
        """Bytes between staged rows (16 tokens' worth per m16 tile and a padding piece)."""
        return 16 * (2 * self.token_tiles + 1)

    def max_chunk_rows(self) -> int:
        """The most rows of a chunk: DIRECT holds a chunk of x in registers while a window
        computes, HELD_WORDS words a lane at one block an SM."""
        if not self.direct:
            return MAX_CHUNK_ROWS
        units = HELD_WORDS // 4 // self.blocks_per_sm  # 8 tokens x 32 features a warp
        return min(MAX_CHUNK_ROWS, 256 * units * self.warps // self.tokens)

    def shared_bytes(self, chunk_rows: int, cap: int) -> int:
        """Dynamic shared memory of a launch: three chunk slots and 8 zero rows, two plan
        buffers of ``cap`` steps."""
        return (3 * chunk_rows + 8) * self.row_bytes + 2 * cap * STEP_BYTES


STEP_BYTES = 288  # a window step's record: 16 u16 row codes, 32 lanes x 8 bytes of B fragment
HELD_WORDS = 32  # kernels/sparse_linear.cu
MAX_CHUNK_ROWS = 4096
# Every instantiated shape of sparse_linear_window (benchmarks/sparse_linear_sweep.py times them)
WINDOW_SHAPES = (
    WindowShape(4, 8, 8, 1, True),
    WindowShape(4, 8, 8, 1, False),
    WindowShape(2, 16, 8, 1, True),
    WindowShape(8, 4, 8, 1, True),
    WindowShape(4, 4, 8, 2, True),
)
_OUT_TYPE = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}


def _window_name(precision: str, shape: WindowShape) -> str:
    return (
        f"fg::sl::sparse_linear_window<{_PRECISION_ID[precision]}, {shape.token_tiles}, "
        f"{shape.warp_strips}, {shape.warps}, {shape.blocks_per_sm}, "
        f"{'true' if shape.direct else 'false'}>"
    )


SOURCE = register(
    "sparse_linear.cu",
    [_forward_name(p, mt, d) for p in _PRECISION_ID for mt in TOKEN_TILES for d in TAG]
    + [_transpose_name(d, p) for d in TAG for p in _PRECISION_ID]
    + [_window_name(p, shape) for p in _PRECISION_ID for shape in WINDOW_SHAPES],
)


class Variant(NamedTuple):
    """How a forward runs. ``kernel`` "chunk": sparse_linear_forward with ``token_tiles`` (0:
    ``choose_token_tiles``). "window": sparse_linear_window of ``shape``, with chunks of about
    ``list_vectors`` of a strip's vectors (``window_chunk_rows``) and windows taking vectors
    as ``steps`` says (``window_assignment``)."""

    kernel: str
    token_tiles: int = 0
    shape: WindowShape | None = None
    list_vectors: int = 16
    steps: str = "balance"

    @property
    def name(self) -> str:
        if self.kernel == "chunk":
            return f"chunk-mt{self.token_tiles}" if self.token_tiles else "chunk"
        suffix = "" if self.steps == "balance" else f"-{self.steps}"
        return f"{self.shape.name}-v{self.list_vectors}{suffix}"


CHUNK = Variant("chunk")
# The forward's selection: (largest density of W's vectors, fewest tokens, variant) rows, the
# first that a call meets (density = vectors / (strips x in); later rows catch the rest). The
# window kernel wins at every density swept (docs/TUNING.md, "SparseLinear"): read from a
# transposed x with ~16-vector chunks below 7.5%, direct x with ~32-vector chunks to 15%.
FORWARD_RULE: tuple[tuple[float, int, Variant], ...] = (
    (0.075, 0, Variant("window", shape=WINDOW_SHAPES[1], list_vectors=16)),
    (0.15, 0, Variant("window", shape=WINDOW_SHAPES[0], list_vectors=32)),
    (1.0, 0, Variant("window", shape=WINDOW_SHAPES[1], list_vectors=32)),
)


def choose_variant(n_vectors: int, n_strips: int, n_in: int, n_tokens: int) -> Variant:
    """The variant FORWARD_RULE gives a layer of ``n_vectors`` vectors in ``n_strips`` strips
    over ``n_in`` inputs, for ``n_tokens`` tokens."""
    density = n_vectors / max(n_strips * n_in, 1)
    for max_density, min_tokens, variant in FORWARD_RULE:
        if density <= max_density and n_tokens >= min_tokens:
            return variant
    return FORWARD_RULE[-1][2]


class Plan(NamedTuple):
    """The step tables of one pattern and token tile (kernels/sparse_linear.cu's header):
    offs int32 [groups * 8 * n_chunks * 8 + 1], rows int32 [steps * 16], frag_index int64
    [steps * 128] (a value slot of W, or W's slot count for a zero), on W's device."""

    offs: torch.Tensor
    rows: torch.Tensor
    frag_index: torch.Tensor
    token_tiles: int
    n_chunks: int
    n_groups: int


def chunk_rows(token_tiles: int) -> int:
    """U, the input features of a staged chunk, for blocks of 16 * token_tiles tokens."""
    return STAGE_ELEMENTS // (16 * token_tiles)


def choose_token_tiles(n_vectors: int, n_strips: int, n_in: int) -> int:
    """MT for a pattern: the widest token tile whose chunks still hold MIN_LIST_VECTORS
    vectors per strip on average."""
    density = n_vectors / max(n_strips * n_in, 1)
    for mt in sorted(TOKEN_TILES, reverse=True):
        if density * chunk_rows(mt) >= MIN_LIST_VECTORS:
            return mt
    return min(TOKEN_TILES)


# the unset bits of each 8-bit mask, ascending (padding slots take a group's missing residues)
_UNSET = np.array(
    [[b for b in range(8) if not m >> b & 1] + [0] * bin(m).count("1") for m in range(256)],
    dtype=np.int64,
)


def _frag_index(slot_vector: np.ndarray, vector: int, n_vec: int) -> np.ndarray:
    """int64 [steps * 128]: the value slot of each B fragment element of steps whose 16 k slots
    hold the vectors ``slot_vector`` [steps * 16] (-1: padding), W's slot count for a zero.
    Lane 4g + t, element e: k = 2t + (e & 1) + 8 (e >> 1), strip row n = g."""
    lane = np.arange(32)
    k = 2 * (lane & 3)[:, None] + (np.arange(4) & 1)[None, :] + 8 * (np.arange(4) >> 1)[None, :]
    n = (lane >> 2)[:, None]
    vec = slot_vector.reshape(-1, 16)[:, k]  # [steps, 32, 4]
    return np.where((vec >= 0) & (n < vector), vec * vector + n, vector * n_vec).reshape(-1)


def build_plan(
    row_ptr: torch.Tensor, col_idx: torch.Tensor, n_in: int, vector: int, token_tiles: int
) -> Plan:
    """The plan of a CVSE pattern (row_ptr int32 [n_strips + 1], col_idx int32 [n_vectors],
    strips of ``vector`` rows, ``n_in`` columns) for blocks of 16 * token_tiles tokens: one
    host pass of numpy (the pattern is read back once)."""
    u = chunk_rows(token_tiles)
    rp = row_ptr.cpu().numpy().astype(np.int64)
    col = col_idx.cpu().numpy().astype(np.int64)
    n_strips, n_vec = rp.size - 1, col.size
    n_chunks = -(-n_in // u)
    n_groups = max(1, -(-n_strips // BLOCK_STRIPS))
    strip = np.repeat(np.arange(n_strips, dtype=np.int64), np.diff(rp))
    local = col % u
    within = strip % BLOCK_STRIPS
    # list of each vector: (group, warp, chunk, strip of the warp), the kernel's step order
    lists = (
        (strip // BLOCK_STRIPS * WARPS + within // WARP_STRIPS) * n_chunks + col // u
    ) * WARP_STRIPS + within % WARP_STRIPS
    n_lists = n_groups * WARPS * n_chunks * WARP_STRIPS
    count = np.bincount(lists, minlength=n_lists)
    steps = -(-count // 16)
    offs = np.zeros(n_lists + 1, dtype=np.int64)
    offs[1:] = np.cumsum(steps)
    n_steps = int(offs[-1])
    if n_steps * 128 >= 2**62 or n_steps >= 2**31:
        raise ValueError("sparse_linear: the pattern has too many vectors for one plan")
    # a list's vectors by residue (row mod 8), dealt round-robin over its 8-slot groups, so
    # that a group holds distinct residues where the list allows
    order = np.lexsort((col, local & 7, lists))
    ordered = lists[order]
    first = np.zeros(n_lists, dtype=np.int64)
    first[1:] = np.cumsum(count)[:-1]
    rank = np.arange(n_vec, dtype=np.int64) - first[ordered]
    groups = 2 * steps[ordered]
    position = offs[ordered] * 16 + (rank % groups) * 8 + rank // groups
    slot_vector = np.full(n_steps * 16, -1, dtype=np.int64)
    slot_vector[position] = order
    rows = np.zeros(n_steps * 16, dtype=np.int64)
    rows[position] = local[order]
    # padding slots: zero rows of the residues their group lacks
    real = (slot_vector >= 0).reshape(-1, 8)
    bits = np.where(real, 1 << (rows.reshape(-1, 8) & 7), 0)
    mask = np.bitwise_or.reduce(bits, axis=1)
    filled = real.sum(1)
    pad_rank = np.arange(8)[None, :] - filled[:, None]
    padding = u + _UNSET[mask[:, None], np.clip(pad_rank, 0, 7)]
    rows = np.where(real, rows.reshape(-1, 8), padding).reshape(-1)
    frag_index = _frag_index(slot_vector, vector, n_vec)
    device = row_ptr.device
    return Plan(
        torch.from_numpy(offs.astype(np.int32)).to(device),
        torch.from_numpy(rows.astype(np.int32)).to(device),
        torch.from_numpy(frag_index).to(device),
        token_tiles,
        n_chunks,
        n_groups,
    )


_PLANS = TensorCache()  # col_idx -> (row_ptr, {key: Plan or WindowPlan})


def _cached(row_ptr: torch.Tensor, col_idx: torch.Tensor, key: tuple, build):
    """``build()``, cached under ``key`` while the pattern tensors live unchanged."""
    hit = _PLANS.get(col_idx)
    if hit is None or hit[0] is not row_ptr:
        hit = _PLANS.set(col_idx, (row_ptr, {}))
    key = (*key, tensor_version(row_ptr))
    plan = hit[1].get(key)
    if plan is None:
        plan = hit[1][key] = built_for_reuse(build)
    return plan


def plan_for(
    row_ptr: torch.Tensor, col_idx: torch.Tensor, n_in: int, vector: int, token_tiles: int
) -> Plan:
    """``build_plan``, cached while the pattern tensors live unchanged."""
    return _cached(
        row_ptr,
        col_idx,
        ("chunk", n_in, vector, token_tiles),
        lambda: build_plan(row_ptr, col_idx, n_in, vector, token_tiles),
    )


class WindowPlan(NamedTuple):
    """The steps of one pattern for sparse_linear_window (kernels/sparse_linear.cu): offs int32
    [n_groups * n_chunks * block strips + 1], the first step of each (group, window, warp,
    strip) list; rows int16 [steps, 16], each step's row codes (u16 bits); frag_index int32
    [steps * 128] (a value slot of W, or W's slot count for a zero), the B fragments in record
    order; cap, the most steps of one (group, window); on W's device. ``records`` caches the
    step records of a values tensor (``window_records``)."""

    offs: torch.Tensor
    rows: torch.Tensor
    frag_index: torch.Tensor
    shape: WindowShape
    chunk_rows: int
    n_chunks: int
    n_groups: int
    cap: int
    records: TensorCache


STEP_MODES = ("chunk", "fill", "balance")


def window_assignment(
    row_ptr: np.ndarray, col: np.ndarray, n_in: int, chunk_rows: int, steps: str
) -> np.ndarray:
    """int64 [n_vectors]: the window of each vector (row_ptr int64 [n_strips + 1], col int64
    [n_vectors], columns ascending in a strip). Window w takes a strip's vectors of chunk w that
    window w - 1 left; ``steps`` says what else (STEP_MODES): "chunk", nothing; "fill", as many
    vectors of chunk w + 1 as fill its last k16 step, those whose residue (column mod 8) the
    window holds fewest of; "balance", of those only vectors whose residue the window holds
    fewer of than its 8-row groups, so that each group can hold distinct residues (conflict-free
    ldmatrix phases), leaving the rest of the step to padding. Strips advance together, a
    window a pass."""
    if steps not in STEP_MODES:
        raise ValueError(f"sparse_linear: steps must be one of {STEP_MODES}, got {steps!r}")
    n_chunks = -(-n_in // chunk_rows)
    n_strips = row_ptr.size - 1
    strip = np.repeat(np.arange(n_strips, dtype=np.int64), np.diff(row_ptr))
    residue = col & 7
    chunk = col // chunk_rows
    by_chunk = np.argsort(chunk, kind="stable")  # each chunk's vectors by (strip, column)
    bounds = np.searchsorted(chunk[by_chunk], np.arange(n_chunks + 1))
    window = np.full(col.size, -1, dtype=np.int64)
    for w in range(n_chunks):
        left = by_chunk[bounds[w] : bounds[w + 1]]
        left = left[window[left] < 0]
        window[left] = w
        if steps == "chunk" or w + 1 >= n_chunks:
            continue
        held = np.bincount(strip[left], minlength=n_strips)
        need, groups = -held % 16, 2 * -(-held // 16)
        cand = by_chunk[bounds[w + 1] : bounds[w + 2]]
        cand = cand[need[strip[cand]] > 0]
        if not cand.size:
            continue
        cand = cand[np.argsort(strip[cand] * 8 + residue[cand], kind="stable")]
        group = strip[cand] * 8 + residue[cand]
        occurrence = np.arange(cand.size) - np.searchsorted(group, group)
        key = np.bincount(strip[left] * 8 + residue[left], minlength=n_strips * 8)[group]
        key += occurrence  # the residue's count in the window once this vector joins it
        if steps == "balance":
            fits = key < groups[strip[cand]]
            cand, key = cand[fits], key[fits]
        cand = cand[np.lexsort((col[cand], key, strip[cand]))]
        rank = np.arange(cand.size) - np.searchsorted(strip[cand], strip[cand])
        window[cand[rank < need[strip[cand]]]] = w
    return window


def build_window_plan(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    n_in: int,
    vector: int,
    shape: WindowShape,
    chunk_rows: int,
    steps: str = "balance",
) -> WindowPlan:
    """The window plan of a CVSE pattern (row_ptr int32 [n_strips + 1], col_idx int32
    [n_vectors], columns ascending in a strip, strips of ``vector`` rows, ``n_in`` columns) for
    ``shape`` and chunks of ``chunk_rows`` (a multiple of 32) input features, windows taking
    vectors as ``steps`` says (``window_assignment``): one host pass of numpy."""
    if chunk_rows % 32 or not 32 <= chunk_rows <= MAX_CHUNK_ROWS:
        raise ValueError(
            f"sparse_linear: chunk_rows must be a multiple of 32 in [32, {MAX_CHUNK_ROWS}], "
            f"got {chunk_rows}"
        )
    u = chunk_rows
    rp = row_ptr.cpu().numpy().astype(np.int64)
    col = col_idx.cpu().numpy().astype(np.int64)
    n_strips, n_vec = rp.size - 1, col.size
    n_chunks = -(-n_in // u)
    per_block, per_warp = shape.block_strips, shape.warp_strips
    n_groups = max(1, -(-n_strips // per_block))
    window = window_assignment(rp, col, n_in, u, steps)
    strip = np.repeat(np.arange(n_strips, dtype=np.int64), np.diff(rp))
    within = strip % per_block
    lists = (
        (strip // per_block * n_chunks + window) * shape.warps + within // per_warp
    ) * per_warp + within % per_warp  # a list: one strip's vectors in one window
    n_lists = n_groups * n_chunks * per_block
    count = -(-np.bincount(lists, minlength=n_lists) // 16)
    offs = np.zeros(n_lists + 1, dtype=np.int64)
    offs[1:] = np.cumsum(count)
    n_steps = int(offs[-1])
    if n_steps * 128 >= 2**31 or vector * n_vec >= 2**31:
        raise ValueError("sparse_linear: the pattern has too many vectors for one plan")
    cap = int(count.reshape(-1, per_block).sum(1).max()) if n_lists else 0
    # a list's vectors by residue, dealt round-robin over its 8-row groups (two a step), so
    # that a group holds distinct residues where the list allows
    order = np.lexsort((col, col & 7, lists))
    ordered = lists[order]
    rank = np.arange(n_vec, dtype=np.int64) - np.searchsorted(ordered, ordered)
    groups = 2 * count[ordered]
    position = offs[ordered] * 16 + (rank % groups) * 8 + rank // groups
    slot_vector = np.full(n_steps * 16, -1, dtype=np.int64)
    slot_vector[position] = order
    rows = np.zeros(n_steps * 16, dtype=np.int64)
    rows[position] = col[order] - window[order] * u
    real = (slot_vector >= 0).reshape(-1, 8)
    bits = np.where(real, 1 << (rows.reshape(-1, 8) & 7), 0)
    mask = np.bitwise_or.reduce(bits, axis=1)
    pad_rank = np.arange(8)[None, :] - real.sum(1)[:, None]
    padding = 2 * u + _UNSET[mask[:, None], np.clip(pad_rank, 0, 7)]
    rows = np.where(real, rows.reshape(-1, 8), padding).reshape(-1)
    frag_index = _frag_index(slot_vector, vector, n_vec)
    device = row_ptr.device
    return WindowPlan(
        torch.from_numpy(offs.astype(np.int32)).to(device),
        torch.from_numpy(rows.astype(np.uint16).view(np.int16).reshape(-1, 16)).to(device),
        torch.from_numpy(frag_index.astype(np.int32)).to(device),
        shape,
        u,
        n_chunks,
        n_groups,
        cap,
        TensorCache(),
    )


def window_chunk_rows(variant: Variant, density: float, n_in: int) -> int:
    """The chunk rows a window variant aims at: about ``list_vectors`` / density (a strip's
    mean vectors per chunk near ``list_vectors``), a multiple of 32, at least 32, at most the
    shape's bound and ``n_in`` rounded up."""
    u = variant.list_vectors / max(density, 1e-9)
    u = int(round(u / 32)) * 32
    return max(32, min(u, variant.shape.max_chunk_rows(), -(-max(n_in, 1) // 32) * 32))


def window_plan_for(
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    n_in: int,
    vector: int,
    variant: Variant,
    shared_limit: int,
) -> WindowPlan:
    """The window plan of ``variant`` (cached while the pattern tensors live unchanged): chunks
    of ``window_chunk_rows``, halved until the launch's shared memory fits ``shared_limit``
    bytes. ValueError when not even 32 rows fit."""
    shape = variant.shape
    density = col_idx.numel() / max((row_ptr.numel() - 1) * n_in, 1)
    u = window_chunk_rows(variant, density, n_in)

    def build():
        rows = u
        while True:
            plan = build_window_plan(row_ptr, col_idx, n_in, vector, shape, rows, variant.steps)
            if shape.shared_bytes(rows, plan.cap) <= shared_limit:
                return plan
            if rows == 32:
                raise ValueError(
                    f"sparse_linear: {variant.name} needs "
                    f"{shape.shared_bytes(rows, plan.cap)} bytes of shared memory, the device "
                    f"allows {shared_limit}"
                )
            rows = max(32, rows // 64 * 32)

    key = ("window", n_in, vector, shape, u, variant.steps, shared_limit)
    return _cached(row_ptr, col_idx, key, build)


def pattern_values(
    frag_index: torch.Tensor,
    values: torch.Tensor,
    storage: torch.dtype,
    through: torch.Tensor | None = None,
) -> torch.Tensor:
    """``values`` (any float type) rounded to ``storage`` at the slots ``frag_index`` names (the
    pattern's slot count: a zero). ``through``: int64 [the pattern's slots], the slot of
    ``values`` each pattern slot holds (``values``' size: a zero), for a pattern whose values
    are moved from another's (W^T's from W's, for dX)."""
    padded = torch.cat([values.detach().to(storage), values.new_zeros(1, dtype=storage)])
    if through is not None:
        moved = torch.cat([through, through.new_full((1,), values.numel())])
        frag_index = moved.index_select(0, frag_index)
    return padded.index_select(0, frag_index)


def window_records(
    plan: WindowPlan,
    values: torch.Tensor,
    storage: torch.dtype,
    through: torch.Tensor | None = None,
) -> torch.Tensor:
    """The step records of ``plan`` for the ``values`` (``pattern_values``): int16 [steps,
    144], 16 row codes then the B fragments, built once per values tensor and version (and
    ``through`` tensor)."""
    hit = plan.records.get(values)
    if hit is None:
        hit = plan.records.set(values, {})
    key = (storage, None if through is None else id(through))
    entry = hit.get(key)
    if entry is None or entry[0] is not through:  # the id of a freed tensor may come back

        def build():
            frags = pattern_values(plan.frag_index, values, storage, through)
            return torch.cat([plan.rows, frags.view(torch.int16).view(-1, 128)], 1).contiguous()

        entry = hit[key] = (through, built_for_reuse(build))
    return entry[1]


def _check(x, values, bias, row_ptr, col_idx, n_out: int, vector: int, precision: str, through):
    if precision not in KERNEL_PRECISIONS:
        raise ValueError(
            f"sparse_linear: the kernel computes fp16 and bf16, got precision {precision!r}"
        )
    if isinstance(vector, bool) or vector not in VECTORS:
        raise ValueError(f"sparse_linear: vector must be one of {VECTORS}, got {vector!r}")
    if x.dim() != 2 or x.dtype not in TAG:
        raise ValueError(
            f"sparse_linear: x must be 2-D float16/bfloat16/float32, got {x.dtype} {tuple(x.shape)}"
        )
    if row_ptr.dtype != torch.int32 or col_idx.dtype != torch.int32:
        raise ValueError("sparse_linear: row_ptr and col_idx must be int32 (CVSE)")
    n_strips = -(-n_out // vector)
    if row_ptr.shape != (n_strips + 1,):
        raise ValueError(
            f"sparse_linear: row_ptr must have {n_strips + 1} entries for {n_out} outputs in "
            f"strips of {vector}, got {tuple(row_ptr.shape)}"
        )
    slots = vector * col_idx.numel()
    if through is None and (values.shape != (slots,) or not values.is_floating_point()):
        raise ValueError(
            f"sparse_linear: values must be float [{slots}], got {values.dtype} "
            f"{tuple(values.shape)}"
        )
    if through is not None and (
        through.shape != (slots,) or through.dtype != torch.int64 or values.dim() != 1
    ):
        raise ValueError(
            f"sparse_linear: through must be int64 [{slots}] over 1-D values, got "
            f"{through.dtype} {tuple(through.shape)} and values {tuple(values.shape)}"
        )
    if bias is not None and (bias.shape != (n_out,) or not bias.is_floating_point()):
        raise ValueError(f"sparse_linear: bias must be float [{n_out}], got {tuple(bias.shape)}")
    tensors = [x, values, row_ptr, col_idx] + [t for t in (bias, through) if t is not None]
    if any(t.device.type != "cuda" or t.device != x.device for t in tensors):
        raise ValueError("sparse_linear: every tensor must be on one CUDA device")
    groups = -(-n_strips // BLOCK_STRIPS)
    if groups > MAX_GRID_Y or x.shape[1] >= 2**31 - 32 or x.shape[0] >= 2**31 - 64:
        raise ValueError("sparse_linear: the layer is too large for the kernel's grid")


def sparse_linear_cuda(
    x: torch.Tensor,
    values: torch.Tensor,
    bias: torch.Tensor | None,
    row_ptr: torch.Tensor,
    col_idx: torch.Tensor,
    n_out: int,
    vector: int,
    precision: str,
    token_tiles: int | None = None,
    variant: Variant | None = None,
    through: torch.Tensor | None = None,
) -> torch.Tensor:
    """y = x W^T + b on tensor cores, fp32 accumulation. W [n_out, in]: CVSE pattern row_ptr
    int32 [ceil(n_out / V) + 1], col_idx int32 [n_vectors], values [V * n_vectors] (any float
    type, rounded to the precision); x [T, in] float16, bfloat16 or float32 (rounded to the
    precision); bias [n_out] or None. Returns [T, n_out] in x's dtype. ``variant`` chooses the
    kernel (default: ``choose_variant``); ``token_tiles`` (1, 2 or 4) runs the chunk kernel
    with that token tile. ``through`` (``pattern_values``): values are another pattern's, moved
    into this one's slots by it (dX = dY W on W^T's pattern with W's values)."""
    _check(x, values, bias, row_ptr, col_idx, n_out, vector, precision, through)
    n_tokens, n_in = x.shape
    y = torch.empty(n_tokens, n_out, dtype=x.dtype, device=x.device)
    if n_tokens == 0 or n_out == 0:
        return y
    if variant is None:
        variant = (
            Variant("chunk", token_tiles)
            if token_tiles
            else choose_variant(col_idx.numel(), row_ptr.numel() - 1, n_in, n_tokens)
        )
    b = None if bias is None else operand(bias.detach(), torch.float32)
    if variant.kernel == "window":
        _window_forward(x, values, b, row_ptr, col_idx, y, vector, precision, variant, through)
        return y
    if variant.kernel != "chunk":
        raise ValueError(
            f"sparse_linear: kernel must be 'chunk' or 'window', got {variant.kernel!r}"
        )
    mt = variant.token_tiles or choose_token_tiles(col_idx.numel(), row_ptr.numel() - 1, n_in)
    if mt not in TOKEN_TILES:
        raise ValueError(f"sparse_linear: token_tiles must be one of {TOKEN_TILES}, got {mt}")
    plan = plan_for(row_ptr, col_idx, n_in, vector, mt)
    storage = STORAGE[precision]
    xt, tokens_pad = _transposed(x, precision)
    frags = pattern_values(plan.frag_index, values, storage, through)
    launch(
        SOURCE,
        _forward_name(precision, mt, x.dtype),
        x.device,
        (-(-n_tokens // (16 * mt)), plan.n_groups),
        (32 * WARPS,),
        ptr(plan.offs),
        ptr(plan.rows),
        ptr(frags),
        0 if b is None else ptr(b),
        ptr(xt),
        ptr(y),
        plan.n_chunks,
        n_tokens,
        tokens_pad,
        n_in,
        n_out,
        vector,
    )
    return y


def _transposed(x: torch.Tensor, precision: str) -> tuple[torch.Tensor, int]:
    """(X^T [in, tokens_pad] in the precision's storage type, tokens padded with zeros to a
    multiple of 8; tokens_pad) by transpose_tokens."""
    n_tokens, n_in = x.shape
    tokens_pad = -(-n_tokens // 8) * 8
    xs = operand(x, x.dtype)
    xt = torch.empty(n_in, tokens_pad, dtype=STORAGE[precision], device=x.device)
    if n_in:
        launch(
            SOURCE,
            _transpose_name(x.dtype, precision),
            x.device,
            (-(-tokens_pad // 32), -(-n_in // 32)),
            (256,),
            ptr(xs),
            ptr(xt),
            n_tokens,
            n_in,
            tokens_pad,
        )
    return xt, tokens_pad


def window_shared_limit(shape: WindowShape, device: torch.device) -> int:
    """The shared memory one block of ``shape`` may take on ``device``: the opt-in limit, and
    at two or more blocks an SM their share of the SM (less 1 KB each that the SM reserves)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    per_block, per_sm = shared_memory_limits(index)
    if shape.blocks_per_sm == 1:
        return per_block
    return min(per_block, per_sm // shape.blocks_per_sm - 1024)


def _window_forward(x, values, b, row_ptr, col_idx, y, vector, precision, variant, through):
    shape = variant.shape
    if shape not in WINDOW_SHAPES:
        raise ValueError(f"sparse_linear: {shape} is not an instantiated window shape")
    n_tokens, n_in = x.shape
    n_out = y.shape[1]
    storage = STORAGE[precision]
    plan = window_plan_for(
        row_ptr, col_idx, n_in, vector, variant, window_shared_limit(shape, x.device)
    )
    blocks = plan.n_groups * -(-n_tokens // shape.tokens)
    if blocks >= 2**31:
        raise ValueError("sparse_linear: the layer is too large for the kernel's grid")
    records = window_records(plan, values, storage, through)
    if shape.direct:
        xs, stride = operand(x, storage), n_in
        aligned = n_in % 2 == 0 and xs.data_ptr() % 4 == 0
    else:
        xs, stride = _transposed(x, precision)
        aligned = True
    name = _window_name(precision, shape)
    shmem = shape.shared_bytes(plan.chunk_rows, plan.cap)
    allow_shared_memory(SOURCE, name, x.device, shmem)
    launch(
        SOURCE,
        name,
        x.device,
        (blocks,),
        (32 * shape.warps,),
        ptr(plan.offs),
        ptr(records),
        0 if b is None else ptr(b),
        ptr(xs),
        ptr(y),
        _OUT_TYPE[y.dtype],
        plan.n_groups,
        plan.n_chunks,
        plan.chunk_rows,
        plan.cap,
        n_tokens,
        stride,
        n_in,
        n_out,
        vector,
        int(aligned),
        shmem=shmem,
    )
