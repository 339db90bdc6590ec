"""Launchers of the sparse linear layer's forward (kernels/sparse_linear.cu), fp16 and bf16,
and the plan its kernel walks.

Importing this module needs no GPU and no cuda-python: kernels compile at their first launch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ..tensor_cache import TensorCache, built_for_reuse, tensor_version
from .runtime import launch, operand, ptr
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


SOURCE = register(
    "sparse_linear.cu",
    [_forward_name(p, mt, d) for p in _PRECISION_ID for mt in TOKEN_TILES for d in TAG]
    + [_transpose_name(d, p) for d in TAG for p in _PRECISION_ID],
)


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
    # lane 4g + t, element e: k = 2t + (e & 1) + 8 (e >> 1), strip row n = g
    lane = np.arange(32)
    k = 2 * (lane & 3)[:, None] + (np.arange(4) & 1)[None, :] + 8 * (np.arange(4) >> 1)[None, :]
    n = (lane >> 2)[:, None]
    vec = slot_vector.reshape(-1, 16)[:, k]  # [steps, 32, 4]
    frag_index = np.where((vec >= 0) & (n < vector), vec * vector + n, vector * n_vec)
    device = row_ptr.device
    return Plan(
        torch.from_numpy(offs.astype(np.int32)).to(device),
        torch.from_numpy(rows.astype(np.int32)).to(device),
        torch.from_numpy(frag_index.reshape(-1)).to(device),
        token_tiles,
        n_chunks,
        n_groups,
    )


_PLANS = TensorCache()  # col_idx -> (row_ptr, {(n_in, vector, token_tiles, version): Plan})


def plan_for(
    row_ptr: torch.Tensor, col_idx: torch.Tensor, n_in: int, vector: int, token_tiles: int
) -> Plan:
    """``build_plan``, cached while the pattern tensors live unchanged."""
    hit = _PLANS.get(col_idx)
    if hit is None or hit[0] is not row_ptr:
        hit = _PLANS.set(col_idx, (row_ptr, {}))
    key = (n_in, vector, token_tiles, tensor_version(row_ptr))
    plan = hit[1].get(key)
    if plan is None:
        plan = hit[1][key] = built_for_reuse(
            lambda: build_plan(row_ptr, col_idx, n_in, vector, token_tiles)
        )
    return plan


def _check(x, values, bias, row_ptr, col_idx, n_out: int, vector: int, precision: str):
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
    if values.shape != (vector * col_idx.numel(),) or not values.is_floating_point():
        raise ValueError(
            f"sparse_linear: values must be float [{vector * col_idx.numel()}], got "
            f"{values.dtype} {tuple(values.shape)}"
        )
    if bias is not None and (bias.shape != (n_out,) or not bias.is_floating_point()):
        raise ValueError(f"sparse_linear: bias must be float [{n_out}], got {tuple(bias.shape)}")
    tensors = [x, values, row_ptr, col_idx] + ([] if bias is None else [bias])
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
) -> torch.Tensor:
    """y = x W^T + b on tensor cores, fp32 accumulation. W [n_out, in]: CVSE pattern row_ptr
    int32 [ceil(n_out / V) + 1], col_idx int32 [n_vectors], values [V * n_vectors] (any float
    type, rounded to the precision); x [T, in] float16,
    bfloat16 or float32 (rounded to the precision); bias [n_out] or None. Returns [T, n_out] in
    x's dtype. ``token_tiles`` (1, 2 or 4) overrides the block's tokens / 16."""
    _check(x, values, bias, row_ptr, col_idx, n_out, vector, precision)
    n_tokens, n_in = x.shape
    y = torch.empty(n_tokens, n_out, dtype=x.dtype, device=x.device)
    if n_tokens == 0 or n_out == 0:
        return y
    mt = token_tiles or choose_token_tiles(col_idx.numel(), row_ptr.numel() - 1, n_in)
    if mt not in TOKEN_TILES:
        raise ValueError(f"sparse_linear: token_tiles must be one of {TOKEN_TILES}, got {mt}")
    plan = plan_for(row_ptr, col_idx, n_in, vector, mt)
    storage = STORAGE[precision]
    tokens_pad = -(-n_tokens // 8) * 8
    xs = operand(x, x.dtype)
    xt = torch.empty(n_in, tokens_pad, dtype=storage, device=x.device)
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
    padded = torch.cat([values.detach().to(storage), values.new_zeros(1, dtype=storage)])
    frags = padded[plan.frag_index]
    b = None if bias is None else operand(bias.detach(), torch.float32)
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
