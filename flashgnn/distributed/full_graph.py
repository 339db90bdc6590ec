"""Full-graph training across the ranks of a process group: the graph's nodes split into one
contiguous part per rank, each rank holding its part's rows of A, features, labels and masks,
and the exchange lists of its halo.

``FullGraphPartition.build`` partitions a Dataset every rank holds; a loader that reads only
a rank's slice calls ``FullGraphPartition.from_local_rows`` with its rows and the parts'
boundaries. ``wrap(model)`` gives the module that trains on the partition
(``flashgnn.distributed.model``); ``gradients`` says how the loss and gradients combine.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from ..graph import Graph
from .group import check_device, first_rank, group_rank, group_size
from .halo import HaloPlan
from .model import FullGraphModel
from .partition import partition_nodes, renumbering
from .projection import in_host_buffer, to_host_buffer
from .shard import add_row_self_loops, local_graph, rows_of_part

SPLITS = ("train", "val", "test")
PLACEMENTS = ("auto", "device", "host")
# features="auto" keeps them in host memory when they would take more than this share of the GPU
FEATURES_DEVICE_MEMORY = 0.4


def features_on_host(placement: str, nbytes: int, device) -> bool:
    """Whether a rank's features of ``nbytes`` stay in host memory: ``placement`` "host",
    or "auto" on a CUDA device where they exceed FEATURES_DEVICE_MEMORY of its memory."""
    if placement not in PLACEMENTS:
        raise ValueError(f"features must be one of {PLACEMENTS}, got {placement!r}")
    device = torch.device(device)
    if placement != "auto":
        return placement == "host"
    if device.type != "cuda":
        return False
    return nbytes > FEATURES_DEVICE_MEMORY * torch.cuda.get_device_properties(device).total_memory


class FullGraphPartition:
    """One rank's share of a node-partitioned graph (build it with ``build`` or
    ``from_local_rows``; every rank of the group does, at once).

    Node ids: the parts are renumbered to be contiguous; rank r owns the new ids
    ``part_ptr[r] .. part_ptr[r + 1] - 1`` (``new_of_old`` / ``old_of_new``: int64 [N]
    permutations between the dataset's ids and the new ones, or None when the caller gave
    none, i.e. the ids were not renumbered).

    graph: the local bipartite Graph on ``device`` (or on the host, for GCN, which builds its
    own matrices from it once): destinations the num_own own nodes (in new id order), sources
    the own nodes then the num_halo halo nodes (remote sources of the own rows, in increasing
    new id), built from the rank's rows only; its edge weights are the graph's own (or None).
    x [num_own, F], y [num_own] (or [num_own, C]), masks (train, val, test: bool [num_own]):
    the own nodes', on ``device``, in the dtypes given; x stays in host memory when
    ``features_on_host`` (registered with CUDA for asynchronous copies).
    src_degrees: int64 [num_own + num_halo], the out-degree in the whole graph of every local
    source (what GCN's normalisation divides by); plan: the ``HaloPlan``."""

    def __init__(
        self,
        graph: Graph,
        plan: HaloPlan,
        x: Tensor,
        y: Tensor,
        masks: list[Tensor],
        part_ptr: Tensor,
        src_degrees: Tensor,
        counts: dict,
        group,
        new_of_old: Tensor | None,
        old_of_new: Tensor | None,
        features_on_host: bool = False,
        device: torch.device | None = None,
    ):
        self.graph, self.plan = graph, plan
        self.device = graph.device if device is None else torch.device(device)
        self.x, self.y, self.masks = x, y, masks
        self.features_on_host = features_on_host
        self.part_ptr = part_ptr
        self.src_degrees = src_degrees
        self._counts = counts
        self.group = group
        self.rank, self.world = group_rank(group), group_size(group)
        self.new_of_old, self.old_of_new = new_of_old, old_of_new

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        dataset,
        *,
        group=None,
        method: str = "contiguous",
        self_loops: bool = True,
        device,
        k: int | None = 8,
        seed: int = 0,
        x_dtype: torch.dtype | None = None,
        features: str = "device",
        graph_on_host: bool = False,
    ) -> FullGraphPartition:
        """Collective. Partition ``dataset`` (a ``flashgnn.data.Dataset`` every rank holds
        whole) into one part per rank of ``group`` with ``partition_nodes(method, seed)``
        (METIS runs on rank 0 and its parts are broadcast), renumber, and keep this rank's
        rows (``from_local_rows``). ``self_loops``: add a self-loop to every node without one,
        as single-process training does; ``k``: the block width whose formats of the local
        graph are built now (None: built on first use; GCN builds its own); ``x_dtype``: the
        features' dtype (None: the dataset's); ``features``: where they stay, "device",
        "host" or "auto" (``features_on_host``); ``graph_on_host``: the local graph moves to
        the host once built (GCN's matrices are built from it once; its CSR would take 16
        bytes an edge of the GPU). Pass ``x`` itself to the wrapped model: the first layers'
        halo rows of it are exchanged once."""
        world, rank = group_size(group), group_rank(group)
        device = torch.device(device)
        check_device(device, group)
        graph = dataset.graph
        if method == "metis":
            part = torch.empty(graph.num_nodes, dtype=torch.int64)
            if rank == 0:
                part = partition_nodes(graph, world, method, seed)
            part = part.to(device)
            dist.broadcast(part, src=first_rank(group), group=group)
            part = part.cpu()
        else:
            part = partition_nodes(graph, world, method, seed, device=device)
        new_of_old, old_of_new, part_ptr = renumbering(part, world)
        lo, hi = int(part_ptr[rank]), int(part_ptr[rank + 1])
        indptr, indices, weight = rows_of_part(graph, old_of_new, new_of_old, lo, hi)
        own = old_of_new[lo:hi]
        masks = [getattr(dataset, f"{s}_mask")[own] for s in SPLITS]
        return cls.from_local_rows(
            indptr,
            indices,
            dataset.x[own],
            dataset.y[own],
            masks,
            part_ptr,
            edge_weight=weight,
            group=group,
            self_loops=self_loops,
            device=device,
            k=k,
            new_of_old=new_of_old,
            old_of_new=old_of_new,
            x_dtype=x_dtype,
            features=features,
            graph_on_host=graph_on_host,
        )

    @classmethod
    def from_local_rows(
        cls,
        indptr: Tensor,
        indices: Tensor,
        x: Tensor,
        y: Tensor,
        masks: Sequence[Tensor],
        part_ptr: Tensor,
        *,
        edge_weight: Tensor | None = None,
        group=None,
        self_loops: bool = True,
        device,
        k: int | None = 8,
        new_of_old: Tensor | None = None,
        old_of_new: Tensor | None = None,
        x_dtype: torch.dtype | None = None,
        features: str = "device",
        graph_on_host: bool = False,
    ) -> FullGraphPartition:
        """Collective. This rank's partition from its rows alone.

        part_ptr: int64 [world + 1], the parts' boundaries in the renumbered ids (part_ptr[0]
        = 0, non-decreasing, part_ptr[-1] = N), the same on every rank; this rank (r) owns ids
        lo = part_ptr[r] .. hi - 1 = part_ptr[r + 1] - 1.
        indptr int64 [hi - lo + 1], indices int64 [E]: the CSR of A's rows lo .. hi - 1 (row i
        lists the renumbered sources of the in-edges of node lo + i, in any order, no
        duplicates); edge_weight: float [E] in that order, or None.
        x [hi - lo, F], y [hi - lo] or [hi - lo, C], masks: (train, val, test) bool [hi - lo].
        ``self_loops``, ``k``, ``x_dtype``, ``features``, ``graph_on_host``: as in ``build``
        (x kept in host memory is copied into registered memory unless it is there already;
        with ``graph_on_host`` no format is built: k must be None). ``new_of_old`` /
        ``old_of_new``: the renumbering, when there is one, kept for ``gather``.

        Collectives: one all-to-all of counts and one of ids (the halo's exchange lists), two
        exchanges of degrees, one all-reduce of edge counts."""
        world, rank = group_size(group), group_rank(group)
        device = torch.device(device)
        check_device(device, group)
        part_ptr = _check_part_ptr(part_ptr, world)
        lo, hi = int(part_ptr[rank]), int(part_ptr[rank + 1])
        num_own = hi - lo
        if graph_on_host and k is not None:
            raise ValueError("a graph kept on the host has no formats built: pass k=None")
        indptr, indices = _check_rows(indptr, indices, num_own, int(part_ptr[-1]))
        if edge_weight is not None:
            edge_weight = torch.as_tensor(edge_weight).cpu()
        x, y, masks = _check_node_data(x, y, masks, num_own)
        dtype = x.dtype if x_dtype is None else x_dtype
        host = features_on_host(features, x.numel() * _itemsize(dtype), device)
        if self_loops:
            indptr, indices, edge_weight = add_row_self_loops(indptr, indices, edge_weight, lo)
        graph, halo_ids = local_graph(indptr, indices, edge_weight, lo, hi, device)
        plan = HaloPlan.build(halo_ids, part_ptr, rank, group)

        local_out = torch.zeros(graph.num_src_nodes, dtype=torch.int64, device=device)
        local_out.index_add_(0, graph.indices, torch.ones_like(graph.indices))
        src_degrees = plan.gather(plan.sum_to_owners(local_out))

        cut = int((graph.indices >= num_own).sum())
        totals = torch.tensor([graph.num_edges, cut, plan.num_halo], device=device)
        dist.all_reduce(totals, group=group)
        counts = {
            "edges_local": graph.num_edges,
            "cut_edges_local": cut,
            "num_edges": int(totals[0]),
            "edge_cut": int(totals[1]),
            "halo_rows_total": int(totals[2]),
        }
        if k is not None:
            graph.adj(k).transpose()
        if graph_on_host:
            graph = graph.to("cpu")
        if not host:
            x = x.to(device=device, dtype=dtype)
        elif x.device.type != "cpu" or x.dtype != dtype or not _registered(x, device):
            x = to_host_buffer(x.cpu(), device, dtype)
        return cls(
            graph,
            plan,
            x,
            y.to(device),
            [m.to(device) for m in masks],
            part_ptr,
            src_degrees,
            counts,
            group,
            new_of_old,
            old_of_new,
            host,
            device,
        )

    # ------------------------------------------------------------------ sizes
    @property
    def num_own(self) -> int:
        return self.graph.num_dst_nodes

    @property
    def num_halo(self) -> int:
        return self.plan.num_halo

    @property
    def global_num_nodes(self) -> int:
        return int(self.part_ptr[-1])

    def stats(
        self, widths: int | Sequence[int] | None = None, dtype: torch.dtype = torch.float32
    ) -> dict:
        """This rank's exchange and partition sizes (no collective; the global counts were
        reduced when the partition was built).

        Per exchange (one per graph layer, forward; the backward moves as many rows the other
        way): ``halo_rows_received`` (= num_halo, the lower bound: every remote source read
        once), ``halo_rows_sent``, and per peer ``rows_received_from`` / ``rows_sent_to``;
        ``features_on_host``: whether the features stay in host memory.
        Partition: ``edges_local`` (edges of this rank's rows, self-loops included),
        ``cut_edges_local`` (of them, those from a remote source), ``num_edges``, ``edge_cut``
        (edges whose ends lie in different parts, over all ranks), ``halo_rows_total``.
        ``widths``: a feature width, or one per layer, adds ``exchanges``: per width, the bytes
        received and sent per exchange at ``dtype`` and the lower bound of those received."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        out = {
            "rank": self.rank,
            "world": self.world,
            "num_own": self.num_own,
            "num_halo": self.num_halo,
            "halo_rows_received": self.num_halo,
            "halo_rows_sent": int(self.plan.send_index.numel()),
            "rows_received_from": list(self.plan.recv_counts),
            "rows_sent_to": list(self.plan.send_counts),
            "features_on_host": self.features_on_host,
            **self._counts,
        }
        if widths is not None:
            widths = [widths] if isinstance(widths, int) else list(widths)
            out["exchanges"] = [
                {
                    "width": w,
                    "dtype": str(dtype).removeprefix("torch."),
                    "bytes_received": self.num_halo * w * itemsize,
                    "bytes_sent": out["halo_rows_sent"] * w * itemsize,
                    "lower_bound_bytes": self.num_halo * w * itemsize,
                }
                for w in widths
            ]
        return out

    # ------------------------------------------------------------------ use
    def gather(self, t_own: Tensor) -> Tensor:
        """Collective: the rows of every rank's ``t_own`` [num_own, ...] put together, [N, ...]
        on every rank, in the dataset's node order when the partition knows its renumbering
        (``new_of_old``), else in the new ids' order."""
        if t_own.shape[0] != self.num_own:
            raise ValueError(f"t_own must have {self.num_own} rows, got shape {tuple(t_own.shape)}")
        sizes = (self.part_ptr[1:] - self.part_ptr[:-1]).tolist()
        rows = max(sizes)
        padded = t_own.new_zeros((rows, *t_own.shape[1:]))
        padded[: self.num_own] = t_own
        pieces = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(pieces, padded.contiguous(), group=self.group)
        full = torch.cat([piece[:n] for piece, n in zip(pieces, sizes)])
        if self.new_of_old is None:
            return full
        return full.index_select(0, self.new_of_old.to(full.device))

    def wrap(
        self,
        model: torch.nn.Module,
        *,
        overlap: bool = False,
        time_exchanges: bool = False,
        exchange_columns: int | None = None,
    ) -> torch.nn.Module:
        """Collective: ``model`` (a GCN, AGNN or GAT of ``flashgnn.models``, on this
        partition's device) as a module whose ``forward(graph, x_own)`` (``graph`` must be
        ``self.graph``) returns the own nodes' outputs, each graph layer reading the halo
        rows of its input (or of its projection) from their owners. The parameters and
        buffers are broadcast from the group's first rank, so that every replica starts
        equal. ``overlap``: GCN layers aggregate the own sources while the halo rows travel,
        and every layer's next block of columns travels while one is used
        (``flashgnn.distributed.model``);
        ``time_exchanges``: the exchanges a forward waits for are timed (``exchange_ms``);
        ``exchange_columns``: the columns of a block of a layer's exchange (None: as fit)."""
        wrapped = FullGraphModel(self, model, overlap=overlap, exchange_columns=exchange_columns)
        wrapped.time_exchanges = time_exchanges
        return wrapped


def _check_part_ptr(part_ptr, world: int) -> Tensor:
    part_ptr = torch.as_tensor(part_ptr).cpu()
    if part_ptr.dtype != torch.int64 or part_ptr.shape != (world + 1,):
        raise ValueError(
            f"part_ptr must be int64 [world + 1 = {world + 1}], got {part_ptr.dtype} "
            f"{tuple(part_ptr.shape)}"
        )
    if int(part_ptr[0]) != 0 or bool((part_ptr[1:] < part_ptr[:-1]).any()):
        raise ValueError(f"part_ptr must start at 0 and be non-decreasing, got {part_ptr.tolist()}")
    return part_ptr


def _check_rows(indptr, indices, num_own: int, num_nodes: int) -> tuple[Tensor, Tensor]:
    indptr, indices = torch.as_tensor(indptr).cpu(), torch.as_tensor(indices).cpu()
    if indptr.dtype != torch.int64 or indices.dtype != torch.int64:
        raise TypeError(f"indptr and indices must be int64, got {indptr.dtype}, {indices.dtype}")
    if indptr.shape != (num_own + 1,) or indices.dim() != 1:
        raise ValueError(
            f"indptr must have num_own + 1 = {num_own + 1} entries (one row per own node) and "
            f"indices be 1-D, got {tuple(indptr.shape)} and {tuple(indices.shape)}"
        )
    if (
        int(indptr[0]) != 0
        or int(indptr[-1]) != indices.numel()
        or bool((indptr[1:] < indptr[:-1]).any())
    ):
        raise ValueError("indptr must start at 0, be non-decreasing and end at len(indices)")
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= num_nodes):
        raise ValueError(f"indices must be node ids in [0, {num_nodes})")
    return indptr, indices


def _check_node_data(x, y, masks, num_own: int):
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[0] != num_own:
        raise ValueError(f"x must be a tensor [num_own = {num_own}, F], got {_shape(x)}")
    if not isinstance(y, Tensor) or y.dim() not in (1, 2) or y.shape[0] != num_own:
        raise ValueError(f"y must be a tensor [num_own = {num_own}(, C)], got {_shape(y)}")
    masks = list(masks)
    if len(masks) != len(SPLITS):
        raise ValueError(f"masks must be (train, val, test), got {len(masks)} masks")
    for name, m in zip(SPLITS, masks):
        if not isinstance(m, Tensor) or m.dtype != torch.bool or m.shape != (num_own,):
            raise ValueError(f"the {name} mask must be bool [{num_own}], got {_shape(m)}")
    return x, y, masks


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _registered(x: Tensor, device: torch.device) -> bool:
    """Whether CPU tensor x can be copied to ``device`` asynchronously as it is (any CPU
    tensor when ``device`` is not CUDA)."""
    return device.type != "cuda" or in_host_buffer(x)


def _shape(t) -> str:
    return f"{t.dtype} {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
