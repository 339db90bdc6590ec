"""A model of ``flashgnn.models`` run on one rank's partition: the model's own forward, with
every graph layer reading [own rows; halo rows] of its input on the local graph.

Every layer's halo rows travel through one mechanism, ``aggregation.Exchanges``: in blocks of
columns with asynchronous all-to-alls, the backward sending the halo gradients back to their
owners. Between layers the model's own steps (dropout, activations, AGNN's encoder and
decoder, GAT's head merge) run on the own rows only.

AGNN and GAT need a source's whole row before they use it (a cosine, an attention term), so
their layers take [own rows; halo rows] whole (``aggregation.with_halo``) and run the
attention on the local graph. What travels is what is cheapest: AGNN sends the rows of its
input, as its SpMM aggregates them and their norms are recomputed from them on the receiving
rank (normalised rows and norms would be one column more); GAT sends h W, projected by the
owner, where it is narrower than h (the owner projects each node once and takes back its
gradient), else h, projected on the receiving rank; its attention terms are recomputed from
the projected rows (a dot product a row) rather than sent.

GCN runs its own lean pipeline per layer, the same maths as GCNConv's: a narrowing weight
multiplies first (``projection``, the features streamed from host memory when they stay
there), the aggregation over the own and halo sources with the halo rows exchanged in blocks
of columns (``aggregation``), then the bias, ReLU and the next layer's dropout, written in the
type the next layer reads (``epilogue``). GCN's values are normalised by the degrees in the
whole graph (``src_degrees``), so they equal the single-process ones. ``overlap=True`` lets
the own sources' part run while the halo rows travel; off, each block's rows arrive first.

The graph layers' input is the features themselves for GCN's and GAT's first layer: their
halo rows are exchanged once and kept while ``partition.x`` is unchanged (an in-place change
moves its version and they are exchanged again) when they fit X_HALO_MEMORY of the GPU on
every rank (for GAT, unless it has a feature dropout: each owner draws its nodes' mask, so the
rows travel after it, in evaluation too).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn import GATConv, GCNConv
from ..nn.gat_conv import attend
from ..nn.graph_input import ZeroInDegreeError
from ..ops.agnn_one_pass import one_pass_enabled
from ..ops.gat import fused_attention
from ..ops.precision import half_storage
from ..precision_context import block_width, resolve_precision
from .aggregation import Exchanges, SplitRows, aggregate, with_halo
from .epilogue import epilogue
from .group import first_rank
from .projection import project

# the share of a GPU's memory the halo rows of the input features may keep between steps
X_HALO_MEMORY = 0.25


class FullGraphModel(nn.Module):
    """``model`` on ``partition`` (``FullGraphPartition.wrap``). ``forward(graph, x_own)``:
    graph must be ``partition.graph``, x_own [num_own, F] -> the own nodes' outputs
    [num_own, out]. ``module`` is the wrapped model (its ``state_dict`` is the single-process
    one). Collective: every rank calls forward (and backward) in step. ``exchange_columns``:
    the columns of one block of a layer's halo exchange (None: as many as fit
    ``aggregation.EXCHANGE_MEMORY``)."""

    def __init__(
        self,
        partition,
        model: nn.Module,
        overlap: bool = False,
        exchange_columns: int | None = None,
    ):
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
        self.exchange_columns = exchange_columns
        self._forward = forwards[kind]
        # time each exchange of a forward that waits for it (exchange_ms); off, no event is made
        self.time_exchanges = False
        self._features_halo = None  # (partition.x's version, x_halo)
        self._step_held_halo = False  # whether the last training step held them
        self._rows: dict = {}  # (norm, k) -> SplitRows
        # per element of the hidden activations (GCN's, AGNN's, GAT's h W), last forward
        self._activation_bytes = 4
        self._pattern_k = None  # the block width of AGNN's and GAT's local graph, last forward
        self._fused_attention = True  # GAT's attention computed inside its kernels
        for layer in model.layers:
            if not layer.allow_zero_in_degree and partition.graph.has_zero_in_degree():
                raise ZeroInDegreeError(
                    f"{type(layer).__name__}: there are 0-in-degree nodes in the graph; build "
                    "the partition with self_loops=True, or the layer with "
                    "allow_zero_in_degree=True"
                )
            if isinstance(layer, GCNConv) and layer.activation not in (None, F.relu, torch.relu):
                raise TypeError(
                    "the distributed GCN fuses ReLU with its layers: a GCNConv's activation "
                    f"must be ReLU or None, got {layer.activation!r}"
                )
        if partition.features_on_host and (
            kind is not GCN or model.layers[0].in_feats <= model.layers[0].out_feats
        ):
            raise ValueError(
                "features kept in host memory feed GCN's first projection only (a first layer "
                "narrowing them); build the partition with features='device' for this "
                f"{kind.__name__}"
            )
        self.exchanges: list[dict] = []
        group = partition.group
        src = first_rank(group)
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(t.data, src=src, group=group)
        # whether the features' halo rows fit on every rank: all exchange them, or none does
        largest = torch.tensor([partition.num_halo], device=partition.device)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=group)
        self._largest_halo = int(largest)

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
        out = self._forward(x_own)
        if self.module.training:  # GAT's feature dropout leaves them to an evaluation
            self._step_held_halo = self._features_halo is not None
        return out

    # ------------------------------------------------------------------ the models
    def _gcn(self, x: Tensor) -> Tensor:
        model, part = self.module, self.partition
        host = x is part.x and part.features_on_host
        h = x
        if model.input_dropout is not None and model.training:
            if host:
                raise ValueError(
                    "GCN's input_dropout needs the features on the device: build the "
                    "partition with features='device'"
                )
            h = model.input_dropout(x)
        layers = model.layers
        last = len(layers) - 1
        projected = False
        for i, layer in enumerate(layers):
            dropout = model.dropout.p if model.training and i < last else 0.0
            # a layer aggregating first, before one narrowing its input: its epilogue makes
            # the next layer's X W block by block, and the next input is never whole
            then = None
            if i < last and not _narrows(layer) and layer.weight is not None:
                then = layers[i + 1].weight if _narrows(layers[i + 1]) else None
            h = self._gcn_layer(
                layer,
                h,
                dropout,
                host and i == 0,
                fresh=i > 0 or h is not x,
                last=i == last,
                projected=projected,
                then=then,
            )
            projected = then is not None
        return h

    def _agnn(self, x: Tensor) -> Tensor:
        model = self.module
        self._pattern_k = block_width(resolve_precision(model.layers[0].precision))
        h = F.relu(model.encoder(model.dropout(x)))
        self._activation_bytes = h.element_size()
        for layer in model.layers:
            h = layer(self.partition.graph, self._with_halo(h))
        return model.decoder(model.dropout(h))

    def _gat(self, x: Tensor) -> Tensor:
        model, h = self.module, x
        for layer in model.layers[:-1]:
            h = self._gat_layer(layer, h)
            h = F.elu(h.flatten(1) if model.concat else h.mean(1))
        return self._gat_layer(model.layers[-1], h).mean(1)

    # ------------------------------------------------------------------ pieces
    def _exchanges(self, send: bool) -> tuple[Exchanges, list]:
        """The exchanges of one layer (``send`` False: nothing travels) and the list their
        clocks go to when timed."""
        part = self.partition
        exchanges = Exchanges(part.plan if send else None, self.overlap, self.exchange_columns)
        clocks = []
        if self.time_exchanges and exchanges.plan is not None:
            exchanges.clocks, exchanges.clock = clocks, _Clock
        return exchanges, clocks

    def _with_halo(self, h: Tensor) -> Tensor:
        """[h; halo rows of h], the halo rows exchanged in blocks of columns."""
        exchanges, clocks = self._exchanges(True)
        self._record(h, False, clocks)
        return with_halo(h, exchanges)

    def _gat_layer(self, layer: GATConv, h: Tensor) -> Tensor:
        """``layer`` on the own rows h [num_own, in_feats] -> [num_own, heads, out_feats], the
        maths of GATConv's forward. The sources' projected rows are [h W; halo rows of h W]:
        the owners project their rows and send them where they are narrower than h (fc once
        per node, the halo gradient of h W sent back), else h's halo rows travel and are
        projected here; the features' kept halo rows are projected here too. The feature
        dropout is drawn by each node's owner, once, so all its copies agree."""
        if h.shape[1] != layer.in_feats:
            raise ValueError(f"GATConv: expected {layer.in_feats} input features, got {h.shape[1]}")
        heads, width = layer.num_heads, layer.out_feats
        dropping = layer.feat_drop.training and layer.feat_drop.p > 0
        # with a feature dropout the training steps never use kept halo rows: kept after an
        # evaluation, they would only hold memory through every later step
        halo = None if layer.feat_drop.p > 0 else self._features_halo_rows(h)
        if dropping:
            h = layer.feat_drop(h)
        if halo is not None:
            self._record(h, True, [])
            ft = layer.fc(torch.cat([h, halo]))
        elif heads * width <= h.shape[1]:
            ft = self._with_halo(layer.fc(h))
        else:
            ft = layer.fc(self._with_halo(h))
        precision = resolve_precision(layer.precision)
        self._pattern_k, self._activation_bytes = block_width(precision), ft.element_size()
        self._fused_attention = fused_attention(precision, self._pattern_k)
        rst, _ = attend(
            self.partition.graph,
            ft.view(ft.shape[0], heads, width),
            None,
            layer.attn_l,
            layer.attn_r,
            layer.leaky_relu.negative_slope,
            layer.attn_drop.p if layer.attn_drop.training else 0.0,
            precision,
            replay=layer.replay,
        )
        return layer.output(rst, h)

    def exchange_ms(self) -> list[dict]:
        """The timed exchanges of the last forward (``time_exchanges``): per exchange its
        width, dtype name, rows received and ms (waits for the GPU; a layer's blocks summed)."""
        return [
            {
                "width": e["width"],
                "dtype": str(e["dtype"]).removeprefix("torch."),
                "rows_received": self.partition.num_halo,
                "ms": sum(clock.ms() for clock in e["clocks"]),
            }
            for e in self.exchanges
            if e.get("clocks")
        ]

    def _gcn_layer(
        self,
        layer: GCNConv,
        h: Tensor,
        dropout: float,
        host: bool,
        fresh: bool,
        last: bool,
        projected: bool = False,
        then: Tensor | None = None,
    ) -> Tensor:
        """``layer`` on [h; halo rows] with the whole graph's normalisation, then the next
        layer's dropout: a narrowing weight multiplies before the aggregation, which then
        exchanges h W (``host``: h is the features in host memory, streamed; ``projected``: h
        is h W already), else after it (``then``: the next layer's weight, which the epilogue
        multiplies its result by). The features' own halo rows are exchanged once instead,
        where they fit. ``fresh``: h is this forward's own tensor, which the aggregation may
        overwrite; ``last``: the model's output layer, whose gradient comes from the caller."""
        part = self.partition
        width = layer.out_feats if projected else layer.in_feats
        if h.shape[1] != width:
            raise ValueError(f"GCNConv: expected {width} input features, got {h.shape[1]}")
        precision = resolve_precision(layer.precision)
        k = block_width(precision)
        rows = self._split_rows(layer.norm, k)
        device = part.device
        dense = h.dtype
        if h.dtype != torch.float64 and torch.is_autocast_enabled(device.type):
            dense = torch.get_autocast_dtype(device.type)
        storage = half_storage(precision)
        weight, bias = layer.weight, layer.bias
        halo = self._features_halo_rows(h)
        exchanges, clocks = self._exchanges(part.world > 1 and halo is None)
        relu = layer.activation is not None
        # the next layer's input type: the storage type when the products run in it (the next
        # layer rounds to it first), else the result's own
        hidden = storage if relu and dense == storage else None
        if relu:
            self._activation_bytes = 2 if hidden is not None else 4
        if _narrows(layer):
            if not projected:
                h = project(h, weight, device, dense, host)
                if halo is not None:
                    halo = project(halo, weight, device, dense)
            self._record(h, halo is not None, clocks)
            total = aggregate(h, rows, exchanges, precision, halo, in_place=True)
            return epilogue(total, None, bias, relu, dropout, hidden, dense, reuse_grad=not last)
        if dense == storage and h.dtype != storage:
            # the SpMM reads its input in the storage type: sending it so halves the bytes
            h, fresh = h.to(storage), True
            halo = None if halo is None else halo.to(storage)
        self._record(h, halo is not None, clocks)
        total = aggregate(h, rows, exchanges, precision, halo, in_place=fresh)
        return epilogue(
            total, weight, bias, relu, dropout, hidden, dense, reuse_grad=not last, then=then
        )

    def memory_estimate(self) -> dict | None:
        """``distributed.memory``'s estimate of this rank's training step from the partition's
        sizes: GCN's (``estimate``) with the matrices built, AGNN's and GAT's
        (``attention_estimate``) with the local graph's pattern, the features' halo rows
        counted where the last training step held them (None before a forward)."""
        from .memory import attention_estimate, estimate, of_partition

        part = self.partition
        gpu = None
        if part.device.type == "cuda":
            gpu = torch.cuda.get_device_properties(part.device).total_memory
        kept_halo = self._step_held_halo
        if self._rows:
            rows = next(iter(self._rows.values()))
            vectors = {
                name: getattr(rows, name).col_idx.numel()
                for name in ("own", "own_t", "halo", "halo_t")
            }
            layers = self.module.layers
            dims = [layers[0].in_feats] + [layer.out_feats for layer in layers]
            sizes = of_partition(part, dims, self._activation_bytes, vectors)
            # on the CPU the features are in the device's memory wherever they are kept
            host = part.features_on_host and gpu is not None
            graph_on_host = part.graph.device != part.device
            return estimate(sizes, host, kept_halo, gpu, graph_on_host)
        if self._pattern_k is None:
            return None
        a = part.graph.adj(self._pattern_k)  # cached: built with the partition or the forward
        own = int((a.col_idx < part.num_own).sum())
        vectors = {"own": own, "halo": a.n_vectors - own, "t": a.transpose().fmt.n_vectors}
        dims, layers = self._attention_layers()
        sizes = of_partition(part, dims, self._activation_bytes, vectors)
        return attention_estimate(sizes, layers, kept_halo, gpu, part.device.type == "cuda")

    def _attention_layers(self) -> tuple[list[int], object]:
        """(dims, ``memory.AGNNLayers`` or ``memory.GATLayers``) of the wrapped AGNN or GAT."""
        from flashgnn.models import AGNN

        from .memory import AGNNLayers, GATLayers

        model = self.module
        if isinstance(model, AGNN):
            dims = [model.encoder.in_features, model.encoder.out_features]
            layers = AGNNLayers(len(model.layers), model.dropout.p > 0, one_pass_enabled())
            return dims + [model.decoder.out_features], layers
        first = model.layers[0]
        dims = [first.in_feats] + [layer.out_feats for layer in model.layers]
        layers = GATLayers(
            tuple(layer.num_heads for layer in model.layers),
            model.concat,
            first.feat_drop.p > 0,
            first.attn_drop.p > 0,
            any(isinstance(layer.res_fc, nn.Linear) for layer in model.layers),
            self._fused_attention,
        )
        return dims, layers

    def _record(self, h: Tensor, cached: bool, clocks: list) -> None:
        self.exchanges.append(
            {"width": h.shape[1], "dtype": h.dtype, "cached": cached, "clocks": clocks}
        )

    def _features_halo_rows(self, h: Tensor) -> Tensor | None:
        """The halo rows of ``partition.x`` when h is it and they fit X_HALO_MEMORY of the GPU
        on every rank (exchanged once, kept while x is unchanged); else None."""
        part = self.partition
        if h is not part.x or h.requires_grad or part.world == 1:
            return None
        if part.features_on_host:
            return None
        if part.device.type == "cuda":
            total = torch.cuda.get_device_properties(part.device).total_memory
            if self._largest_halo * h.shape[1] * h.element_size() > X_HALO_MEMORY * total:
                return None
        if self._features_halo is None or self._features_halo[0] != h._version:
            with torch.no_grad():
                self._features_halo = (h._version, part.plan.send(h)[0])
        return self._features_halo[1]

    def _split_rows(self, norm: str, k: int) -> SplitRows:
        """The rank's rows of GCN's matrix for ``norm`` at block width ``k``, built once."""
        key = (norm, k)
        if key not in self._rows:
            part = self.partition
            self._rows[key] = SplitRows.build(
                part.graph, part.num_own, part.src_degrees, norm, k, part.device
            )
        return self._rows[key]


def _narrows(layer: GCNConv) -> bool:
    """Whether the layer's weight narrows its input, so that X W is formed first."""
    return layer.weight is not None and layer.weight.shape[0] > layer.weight.shape[1]


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
