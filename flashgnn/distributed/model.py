"""A model of ``flashgnn.models`` run on one rank's partition: the model's own forward, with
every graph layer reading [own rows; halo rows] of its input on the local graph.

What each layer needs from remote nodes is its input's rows, so the exchange happens before
the layer: GCN aggregates them; AGNN's cosine attention reads their rows (normalised on the
receiving rank); GAT projects them with ``fc`` on the receiving rank for its attention terms
and messages. Between layers the model's own steps (dropout, activations, AGNN's encoder and
decoder, GAT's head merge) run on the own rows only.

GCN's normalisation divides by the out-degree of each source in the whole graph, which a
rank's rows do not show for its halo: the layer's values come from the partition's global
degrees (``src_degrees``), so they equal the single-process ones. ``overlap=True`` splits
the local graph by source: a GCN layer aggregates the own sources while the halo rows travel,
then adds the halo sources' part.

The graph layers' input is the features themselves for GCN's and GAT's first layer: their
halo rows are exchanged once and kept while ``partition.x`` is unchanged (an in-place change
moves its version and they are exchanged again).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn import GCNConv
from ..nn.graph_input import ZeroInDegreeError, check_graph_input, value_dtype
from ..ops import graph_conv
from ..ops.gcn_norm import gcn_norm_factor
from ..ops.precision import half_storage
from ..ops.replay import NodeReplay
from ..precision_context import block_width, resolve_precision
from .group import first_rank
from .halo import exchange, start_exchange
from .shard import split_by_source

# the share of a GPU's memory the halo rows of the input features may keep between steps
X_HALO_MEMORY = 0.25


class FullGraphModel(nn.Module):
    """``model`` on ``partition`` (``FullGraphPartition.wrap``). ``forward(graph, x_own)``:
    graph must be ``partition.graph``, x_own [num_own, F] -> the own nodes' outputs
    [num_own, out]. ``module`` is the wrapped model (its ``state_dict`` is the single-process
    one). Collective: every rank calls forward (and backward) in step."""

    def __init__(self, partition, model: nn.Module, overlap: bool = False):
        super().__init__()
        from flashgnn.models import AGNN, GAT, GCN

        forwards = {GCN: self._gcn, AGNN: self._agnn, GAT: self._gat}
        kind = next((cls for cls in forwards if isinstance(model, cls)), None)
        if kind is None:
            raise TypeError(
                f"distributed full-graph training runs GCN, AGNN and GAT of flashgnn.models, "
                f"got {type(model).__name__}"
            )
        self.module = model
        self.partition = partition
        self.overlap = bool(overlap)
        self._forward = forwards[kind]
        # time each exchange of a forward that waits for it (exchange_ms); off, no event is made
        self.time_exchanges = False
        self._x_halo = None  # (partition.x's version, [x_own; x_halo])
        self._values: dict = {}
        self._halo_replay: dict[int, NodeReplay] = {}  # the halo parts' replay, per layer
        self._split = None
        for layer in model.layers:
            if (
                isinstance(layer, GCNConv)
                and not layer.allow_zero_in_degree
                and partition.graph.has_zero_in_degree()
            ):
                raise ZeroInDegreeError(
                    "GCNConv: there are 0-in-degree nodes in the graph; build the partition "
                    "with self_loops=True, or the layer with allow_zero_in_degree=True"
                )
        self.exchanges: list[dict] = []
        src = first_rank(partition.group)
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(t.data, src=src, group=partition.group)

    def forward(self, graph, x_own: Tensor) -> Tensor:
        if graph is not self.partition.graph:
            raise ValueError(
                "a distributed model runs on its partition's local graph: pass partition.graph"
            )
        if (
            not isinstance(x_own, Tensor)
            or x_own.dim() != 2
            or x_own.shape[0] != (self.partition.num_own)
        ):
            raise ValueError(
                f"x_own must be the own nodes' features [{self.partition.num_own}, F], got "
                f"{tuple(x_own.shape) if isinstance(x_own, Tensor) else type(x_own).__name__}"
            )
        self.exchanges = []
        return self._forward(x_own)

    # ------------------------------------------------------------------ the models
    def _gcn(self, x: Tensor) -> Tensor:
        model, h = self.module, x
        for i, layer in enumerate(model.layers):
            if i > 0:
                h = model.dropout(h)
            elif model.input_dropout is not None:
                h = model.input_dropout(h)
            h = self._gcn_layer(i, layer, h)
        return h

    def _agnn(self, x: Tensor) -> Tensor:
        model = self.module
        h = F.relu(model.encoder(model.dropout(x)))
        for layer in model.layers:
            h = layer(self.partition.graph, self._exchange(h))
        return model.decoder(model.dropout(h))

    def _gat(self, x: Tensor) -> Tensor:
        model, h, graph = self.module, x, self.partition.graph
        for layer in model.layers[:-1]:
            h = layer(graph, self._exchange(h))
            h = F.elu(h.flatten(1) if model.concat else h.mean(1))
        return model.layers[-1](graph, self._exchange(h)).mean(1)

    # ------------------------------------------------------------------ pieces
    def _exchange(self, h: Tensor) -> Tensor:
        """[h; halo rows of h]; for ``partition.x`` itself (no gradient), kept from the last
        exchange while it is unchanged."""
        part = self.partition
        cached = h is part.x and not h.requires_grad
        self.exchanges.append({"width": h.shape[1], "dtype": h.dtype, "cached": cached})
        if not cached:
            if not self.time_exchanges:
                return exchange(h, part.plan)
            start = _Clock(h.device)
            out = exchange(h, part.plan)
            self.exchanges[-1]["clock"] = start.stop()
            return out
        if self._x_halo is None or self._x_halo[0] != h._version:
            with torch.no_grad():
                self._x_halo = (h._version, exchange(h, part.plan))
        return self._x_halo[1]

    def exchange_ms(self) -> list[dict]:
        """The timed exchanges of the last forward (``time_exchanges``): per exchange its
        width, dtype name, rows received and ms (waits for the GPU)."""
        return [
            {
                "width": e["width"],
                "dtype": str(e["dtype"]).removeprefix("torch."),
                "rows_received": self.partition.num_halo,
                "ms": e["clock"].ms(),
            }
            for e in self.exchanges
            if "clock" in e
        ]

    def _gcn_layer(self, i: int, layer: GCNConv, h: Tensor) -> Tensor:
        """``layer`` (a GCNConv) on [h; halo rows], with the normalisation of the whole graph.
        A layer whose weight narrows the features sends h W instead of h (A (h W) is the
        order GCNConv computes then anyway), unless h is the partition's features and their
        halo fits the memory kept for it (exchanged once, not every step)."""
        part = self.partition
        precision = resolve_precision(layer.precision)
        k = block_width(precision)
        cached = h is part.x and not h.requires_grad
        weight = layer.weight
        if weight is not None and weight.shape[0] > weight.shape[1]:
            if not (cached and self._x_halo_fits(h)):
                h, weight, cached = _project(h, weight), None, False
        storage = half_storage(precision)
        if storage is not None and h.dtype == torch.float32 and not cached:
            # the SpMM rounds its input to the precision's storage type first: sending it
            # rounded halves the bytes and changes nothing
            h = h.to(storage)
        dtype = value_dtype(h)
        if not self.overlap or cached or part.num_halo == 0:
            feat = self._exchange(h)
            check_graph_input(part.graph, feat, feat.shape[1], True, "GCNConv", False)
            values = self._gcn_values("local", layer.norm, k, dtype)
            out = graph_conv(
                part.graph.adj(k),
                feat,
                weight,
                layer.bias,
                precision,
                values=values,
                replay=layer.replay,
            )
        else:
            own_part, halo_part = self._split_graphs()
            check_graph_input(own_part, h, h.shape[1], True, "GCNConv", False)
            self.exchanges.append({"width": h.shape[1], "dtype": h.dtype, "cached": False})
            pending = start_exchange(h, part.plan)
            out = graph_conv(
                own_part.adj(k),
                h,
                weight,
                None,
                precision,
                values=self._gcn_values("own", layer.norm, k, dtype),
                replay=layer.replay,
            )
            out = out + graph_conv(
                halo_part.adj(k),
                pending.wait(),
                weight,
                layer.bias,
                precision,
                values=self._gcn_values("halo", layer.norm, k, dtype),
                replay=self._halo_part_replay(i, layer),
            )
        return layer.activation(out) if layer.activation is not None else out

    def _x_halo_fits(self, x: Tensor) -> bool:
        """Whether the halo rows of the features fit in X_HALO_MEMORY of the GPU (always on
        the CPU)."""
        if x.device.type != "cuda":
            return True
        total = torch.cuda.get_device_properties(x.device).total_memory
        return self.partition.num_halo * x.shape[1] * x.element_size() <= X_HALO_MEMORY * total

    def _halo_part_replay(self, i: int, layer: GCNConv) -> NodeReplay:
        """The replay state of layer i's halo part, enabled as the layer's own is now."""
        replay = self._halo_replay.setdefault(i, NodeReplay())
        replay.enabled = layer.replay.enabled
        return replay

    def _split_graphs(self):
        if self._split is None:
            self._split = split_by_source(self.partition.graph, self.partition.num_own)
        return self._split[:2]

    def _gcn_values(self, which: str, norm: str, k: int, dtype: torch.dtype) -> Tensor:
        """GCN's values of the local graph ("local") or of its own- or halo-source part, in
        that graph's ``adj(k)`` layout: each edge's weight times the normalisation by the
        destination's in-degree and the source's out-degree in the whole graph."""
        key = (which, norm, k, dtype)
        if key not in self._values:
            graph = self.partition.graph
            factor = gcn_norm_factor(
                graph.indptr,
                graph.indices,
                graph.num_src_nodes,
                norm,
                dtype,
                out_degree=self.partition.src_degrees,
            )
            per_edge = factor[graph.csr_pos()]  # edge-id order
            if graph.edge_weight is not None:
                per_edge = per_edge * graph.edge_weight.detach().to(dtype)
            if which == "local":
                values = graph.edge_values(per_edge, k)
            else:
                own_part, halo_part = self._split_graphs()
                mask = self._split[2]
                target, chosen = (own_part, mask) if which == "own" else (halo_part, ~mask)
                values = target.edge_values(per_edge[chosen], k)
            self._values[key] = values
        return self._values[key]


class _Clock:
    """The time from its creation to ``stop()`` on ``device``'s current stream (CUDA events),
    or by the host's clock on the CPU, where gloo's collectives return when done."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.start.record()
        else:
            self.start = time.perf_counter()

    def stop(self) -> _Clock:
        if self.cuda:
            self.end.record()
        else:
            self.end = time.perf_counter()
        return self

    def ms(self) -> float:
        if self.cuda:
            self.end.synchronize()
            return self.start.elapsed_time(self.end)
        return 1e3 * (self.end - self.start)


def _project(h: Tensor, weight: Tensor) -> Tensor:
    """h W as graph_conv computes it: in autocast's dtype when autocast is on, else h's."""
    if torch.is_autocast_enabled(h.device.type):
        return torch.mm(h, weight)
    return torch.mm(h, weight.to(h.dtype))
