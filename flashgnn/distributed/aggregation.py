"""GCN's aggregation on one rank's rows of a partitioned graph, holding as little as it can,
and the exchange of halo rows in blocks of columns that it and the attention layers share.

The rank's rows of A, with GCN's values (each edge's weight times the normalisation by the
degrees in the whole graph), are kept in two parts by source: A_own over the own nodes and
A_halo over the halo nodes, each in ME-BCRS with its A^T, and nothing else: no CSR, no
format holding ones beside the values, no slot maps (what moves values between layouts serves
once, when the parts are built).

``aggregate`` computes A_own h + A_halo h_halo, the halo rows of h exchanged with the peers
in blocks of columns: the own part of a block runs while its halo rows travel, the next
block's rows travel while its halo part runs, and the exchange buffers are a block's, not the
whole width's (at IGB-large scale a rank's halo of 256 half-precision columns is 31 GB). Both
parts add in fp32 and the sum is rounded once into the result, in the input's dtype. The
backward sends the halo parts' gradients back to their owners block by block the same way.
``with_halo`` gives [h; halo rows of h] through the same exchanges, for AGNN and GAT, whose
attention needs a source's every column first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..formats.mebcrs import MEBCRS, build_canonical
from ..ops.gcn_norm import gcn_norm_factor
from ..ops.spmm import _spmm

NO_TRANSPOSE = (None,) * 5
# the share of a GPU's memory the buffers of one block of columns may take (its rows sent and
# received, twice while the next block travels, its columns of h and the fp32 sums of both
# parts)
EXCHANGE_MEMORY = 0.15


@dataclass
class SparseRows:
    """What the SpMM kernels read of a matrix in ME-BCRS: row_ptr int64 [n_rows / 8 + 1],
    col_idx int32 [V], vec_mask uint8 [V], values float32 [8 V] (the matrix's own values),
    its shape and block width ``k``."""

    row_ptr: Tensor
    col_idx: Tensor
    vec_mask: Tensor
    values: Tensor
    n_rows: int
    n_cols: int
    k: int

    @classmethod
    def of(cls, fmt: MEBCRS) -> SparseRows:
        return cls(
            fmt.row_ptr, fmt.col_idx, fmt.vec_mask, fmt.values, fmt.n_rows, fmt.n_cols, fmt.k
        )

    def times(self, x: Tensor, precision: str, out_fp32: bool) -> Tensor:
        """This matrix times x [n_cols, F] in ``precision`` (fp32 accumulation): [n_rows, F],
        float32 with ``out_fp32``, else in x's dtype."""
        return _spmm(
            self.row_ptr,
            self.col_idx,
            self.vec_mask,
            self.values,
            x,
            self.n_rows,
            self.k,
            precision,
            out_fp32,
            *NO_TRANSPOSE,
        )

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def tensors(self) -> tuple[Tensor, ...]:
        return self.row_ptr, self.col_idx, self.vec_mask, self.values


@dataclass
class SplitRows:
    """A rank's rows of GCN's matrix split by source: ``own`` [num_own, num_own] and ``halo``
    [num_own, num_halo] (columns: halo nodes in the plan's order), with ``own_t`` and
    ``halo_t`` their transposes."""

    own: SparseRows
    own_t: SparseRows
    halo: SparseRows
    halo_t: SparseRows

    @classmethod
    def build(
        cls, graph, num_own: int, src_degrees: Tensor, norm: str, k: int, device=None
    ) -> SplitRows:
        """On ``device`` (default: the graph's), from ``graph``, a partition's local graph
        (rows the own nodes, sources the own nodes then the halo; on any device),
        ``src_degrees`` int64 [num_src] (the sources' out-degrees in the whole graph), GCN's
        ``norm`` and the block width ``k``. One part at a time, so that the temporaries of
        the build are a part's."""
        device = graph.device if device is None else torch.device(device)
        indptr, indices = graph.indptr.to(device), graph.indices.to(device)
        values = gcn_norm_factor(
            indptr,
            indices,
            graph.num_src_nodes,
            norm,
            torch.float32,
            out_degree=src_degrees.to(device),
        )
        if graph.edge_weight is not None:
            weight = graph.edge_weight.detach()[graph.edge_ids]
            values = values * weight.to(device=device, dtype=torch.float32)
        own = indices < num_own
        parts = []
        for mask, first, n_cols in (
            (own, 0, num_own),
            (~own, num_own, graph.num_src_nodes - num_own),
        ):
            # a row's entries of one part keep their order, so each part's CSR stays canonical
            before = torch.cumsum(mask, 0)
            part_ptr = torch.cat([before.new_zeros(1), before])[indptr]
            del before
            part_indices = indices[mask] - first
            fmt = build_canonical(part_ptr, part_indices, values[mask], n_cols, device, k)
            fmt._csr = (part_ptr, part_indices)
            parts.append((SparseRows.of(fmt), SparseRows.of(fmt.transpose().fmt)))
            del fmt, part_ptr, part_indices
        (own_rows, own_t), (halo_rows, halo_t) = parts
        return cls(own_rows, own_t, halo_rows, halo_t)

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in (self.own, self.own_t, self.halo, self.halo_t))


def column_bytes(travelling_rows: int, own_rows: int, itemsize: int) -> int:
    """Bytes one exchanged column costs: its travelling rows (sent and received) twice, the
    next block's being in flight, and its own rows' input and fp32 sums."""
    return 2 * travelling_rows * itemsize + own_rows * (itemsize + 8)


def columns_that_fit(width: int, per_column: int, gpu_bytes: int) -> int:
    """The most columns of ``width`` (a multiple of 8, or all) whose block buffers of
    ``per_column`` bytes each fit EXCHANGE_MEMORY of a GPU of ``gpu_bytes``."""
    fit = int(EXCHANGE_MEMORY * gpu_bytes) // max(per_column, 1)
    return width if fit >= width else max(8, fit // 8 * 8)


def block_columns(width: int, plan, num_own: int, itemsize: int, device, columns) -> int:
    """Columns of one exchanged block: ``columns`` when given, else the most (a multiple of
    8, or all) whose buffers fit EXCHANGE_MEMORY of the GPU (all on the CPU, and all where
    nothing travels: ``plan`` None)."""
    if plan is None:
        return width
    if columns is not None:
        return max(1, min(int(columns), width))
    if device.type != "cuda":
        return width
    per_column = column_bytes(plan.num_halo + int(plan.send_index.numel()), num_own, itemsize)
    return columns_that_fit(
        width, per_column, torch.cuda.get_device_properties(device).total_memory
    )


class Exchanges:
    """How one aggregation exchanges: the plan (None: the rank has no peers), whether the own
    part runs while the rows travel (``overlap``), the columns of a block (None: as many as
    fit) and, when timed, the list its exchanges' clocks go to (a clock from a block's send to
    its arrival on the compute stream, not made while the own part overlaps it)."""

    def __init__(self, plan, overlap: bool, columns: int | None = None, clocks=None, clock=None):
        self.plan, self.overlap, self.columns = plan, overlap, columns
        self.clocks, self.clock = clocks, clock

    def start(self, block: Tensor):
        """Send the rows of ``block`` [num_own, w] that peers need; (halo rows, work, buffer,
        clock or None)."""
        clock = None
        if self.clocks is not None and not self.overlap:
            clock = self.clock(block.device)
        return (*self.plan.send(block, async_op=True), clock)

    def wait(self, pending) -> Tensor:
        halo, work, _, clock = pending
        if work is not None:
            work.wait()
        if clock is not None:
            self.clocks.append(clock.stop())
        return halo


def aggregate(
    h_own: Tensor,
    rows: SplitRows,
    exchanges: Exchanges,
    precision: str,
    h_halo: Tensor | None = None,
    in_place: bool = False,
) -> Tensor:
    """A_own h_own + A_halo h_halo, [num_own, F] in h_own's dtype (the parts' fp32 sum rounded
    once), differentiable in h_own and h_halo. h_own [num_own, F]; h_halo [num_halo, F], or None
    to take the halo rows of h_own from the peers (``exchanges``; collective: every rank calls
    it, in the same order). ``in_place``: the result is written into h_own (which then must not
    be needed elsewhere), and the backward writes h_own's gradient into the incoming one."""
    return _Aggregate.apply(h_own, h_halo, rows, exchanges, precision, in_place)


def _blocks(width: int, columns: int) -> list[tuple[int, int]]:
    return [(c, min(c + columns, width)) for c in range(0, width, columns)]


def _take(t: Tensor, block: tuple[int, int], whole: bool) -> Tensor:
    return t if whole else t[:, block[0] : block[1]].contiguous()


def _columns(t: Tensor, block: tuple[int, int]) -> Tensor:
    """A view of the block's columns (what is sent: the send buffer gathers its rows)."""
    return t[:, block[0] : block[1]]


def with_halo(h_own: Tensor, exchanges: Exchanges) -> Tensor:
    """Collective. [h_own; halo rows of h_own], [num_own + num_halo, F] in h_own's dtype: the
    source rows of the rank's local graph, for a layer that needs every column of a row before
    it can use it (attention). h_own [num_own, F]; the halo rows travel in blocks of columns
    through ``exchanges`` (with ``overlap``, the next block travels while one is put in
    place), so the exchange buffers are a block's. Differentiable: the backward sends the halo
    rows' gradients back to their owners block by block and adds them to h_own's."""
    return _WithHalo.apply(h_own, exchanges)


class _WithHalo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h_own, exchanges):
        plan = exchanges.plan
        num_own, width = h_own.shape
        out = h_own.new_empty((num_own + plan.num_halo, width))
        out[:num_own] = h_own
        columns = block_columns(
            width, plan, num_own, h_own.element_size(), h_own.device, exchanges.columns
        )
        blocks = _blocks(width, columns)
        pending = exchanges.start(_columns(h_own, blocks[0])) if blocks else None
        for j, block in enumerate(blocks):
            halo = exchanges.wait(pending)
            following = _columns(h_own, blocks[j + 1]) if j + 1 < len(blocks) else None
            pending = None
            if following is not None and exchanges.overlap:
                pending = exchanges.start(following)
            out[num_own:, block[0] : block[1]] = halo
            del halo
            if following is not None and pending is None:
                pending = exchanges.start(following)
        ctx.plan, ctx.blocks, ctx.num_own = plan, blocks, num_own
        return out

    @staticmethod
    def backward(ctx, grad):
        plan, blocks, num_own = ctx.plan, ctx.blocks, ctx.num_own
        d_own = grad[:num_own].clone(memory_format=torch.contiguous_format)
        # collective: every rank sends its halo rows' gradients back, block by block, the next
        # block leaving before the one received is added into the owners' rows
        back = plan.send_back(_columns(grad[num_own:], blocks[0]), True) if blocks else None
        for j, block in enumerate(blocks):
            received, work, _ = back
            back = None
            if j + 1 < len(blocks):
                back = plan.send_back(_columns(grad[num_own:], blocks[j + 1]), True)
            if work is not None:
                work.wait()
            plan.add_to_owners(d_own[:, block[0] : block[1]], received)
            del received
        return d_own, None


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h_own, h_halo, rows, exchanges, precision, in_place):
        plan = exchanges.plan if h_halo is None else None
        num_own, width = h_own.shape
        itemsize = h_own.element_size()
        columns = block_columns(width, plan, num_own, itemsize, h_own.device, exchanges.columns)
        blocks = _blocks(width, columns)
        whole = len(blocks) == 1
        wide = h_own.dtype != torch.float64  # sums in fp32 (float64 stays)
        out = h_own if in_place else torch.empty_like(h_own)
        pending = None
        for j, block in enumerate(blocks):
            if plan is not None and pending is None:
                pending = exchanges.start(_columns(h_own, block))
            x = _take(h_own, block, whole)
            halo = None
            if pending is not None and not exchanges.overlap:
                # one exchange at a time, nothing beside it: each is timed alone
                halo, pending = exchanges.wait(pending), None
            total = rows.own.times(x, precision, wide)
            del x
            if plan is not None:
                if pending is not None:
                    halo, pending = exchanges.wait(pending), None
                if j + 1 < len(blocks) and exchanges.overlap:
                    pending = exchanges.start(_columns(h_own, blocks[j + 1]))
            else:
                halo = None if h_halo is None else _take(h_halo, block, whole)
            if halo is not None and rows.halo.n_cols:
                total += rows.halo.times(halo, precision, wide)
            del halo
            (out if whole else out[:, block[0] : block[1]]).copy_(total)
            del total
        if in_place:
            ctx.mark_dirty(h_own)
        ctx.rows, ctx.plan, ctx.precision, ctx.columns = rows, plan, precision, columns
        ctx.in_place, ctx.dtype = in_place, h_own.dtype
        ctx.halo_shape = None if h_halo is None else h_halo.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        rows, plan, precision = ctx.rows, ctx.plan, ctx.precision
        need_own, need_halo = ctx.needs_input_grad[:2]
        if not need_own and not need_halo and plan is None:
            return None, None, None, None, None, None
        num_own, width = grad.shape
        blocks = _blocks(width, ctx.columns)
        whole = len(blocks) == 1
        dtype = ctx.dtype
        fp32 = dtype == torch.float32
        reuse = ctx.in_place and grad.is_contiguous() and grad.dtype == dtype
        d_own = grad if reuse else grad.new_empty((num_own, width), dtype=dtype)
        d_halo = None
        if need_halo:
            d_halo = grad.new_empty(ctx.halo_shape, dtype=dtype)
        for block in blocks:
            g = _take(grad, block, whole)
            back = None
            if plan is not None:  # collective: every rank sends its halo part's gradient back
                part = rows.halo_t.times(g, precision, fp32).to(dtype)
                back = plan.send_back(part, async_op=True)
                del part
            elif d_halo is not None:
                part = rows.halo_t.times(g, precision, fp32)
                (d_halo if whole else d_halo[:, block[0] : block[1]]).copy_(part)
                del part
            total = rows.own_t.times(g, precision, dtype != torch.float64)
            del g
            if back is not None:
                received, work, _ = back
                if work is not None:
                    work.wait()
                plan.add_to_owners(total, received.to(total.dtype))
                del received, back
            (d_own if whole else d_own[:, block[0] : block[1]]).copy_(total)
            del total
        return (d_own if need_own else None), d_halo, None, None, None, None
