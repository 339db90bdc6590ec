"""Layers with torch_geometric's constructors, parameter names and ``forward(x, edge_index)``
signatures, over flashgnn's ops: a PyG model switches by its import
(``from flashgnn.nn import pyg as gnn``), and ``load_state_dict`` of a PyG layer works.

``edge_index`` is an int64 [2, E] tensor (row 0 = sources, row 1 = targets; messages flow
source -> target, PyG's default) or a torch sparse ``adj_t`` [N, N] (COO or CSR, row =
target). The layers add self-loops as PyG's do. The Graph of an edge_index (and so its
ME-BCRS formats) is built once and reused while the same tensor comes back unmodified
(same object, same version counter); the cache holds it weakly, so it goes with the tensor.
Each edge_index must be duplicate-free (``torch_geometric.utils.coalesce`` merges duplicates).

Precision: ``precision=None`` (default) takes the ``flashgnn.precision`` context, as the
DGL-style layers do; ``torch.autocast`` applies to the dense projections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..graph import Graph, _check_node_ids
from ..ops import agnn_propagate, graph_conv
from ..ops.precision import check_precision
from ..ops.replay import NodeReplay
from ..precision_context import block_width, resolve_precision
from ..tensor_cache import TensorCache, built_for_reuse
from .gat_conv import attend
from .graph_input import value_dtype

_SPARSE = (torch.sparse_coo, torch.sparse_csr)


@dataclass
class _Edges:
    """The edges a PyG layer propagates over for one input, with self-loops added as asked.

    graph: their Graph; edge_index: int64 [2, E'] in PyG's order (the input's edges, less its
    self-loops when loops are added, then one loop per node 0 .. N-1); keep: int64 positions
    of the input edges kept; loop_pos, loop_node: positions and nodes of the input's own
    self-loops (empty when loops are not added); weight: the values of a sparse adj_t in input
    order, else None; derived: what layers compute from these edges alone, by key."""

    graph: Graph
    edge_index: torch.Tensor
    keep: torch.Tensor
    loop_pos: torch.Tensor
    loop_node: torch.Tensor
    weight: torch.Tensor | None
    derived: dict = field(default_factory=dict)


# edge_index (or adj_t) -> {(num_nodes, add_self_loops): _Edges}, weak in the tensor
_EDGES = TensorCache()


def _input_edges(edge_index, n: int, layer: str):
    """(src, dst, values or None) int64 [E] of ``edge_index`` on ``n`` nodes, checked."""
    if edge_index.layout in _SPARSE:
        if edge_index.shape != (n, n):
            raise ValueError(
                f"{layer}: adj_t must have shape ({n}, {n}) for {n} nodes, "
                f"got {tuple(edge_index.shape)}"
            )
        coo = edge_index.to_sparse_coo().coalesce()
        dst, src = coo.indices()
        values = coo.values()
        if values.dim() != 1:
            raise ValueError(f"{layer}: adj_t must hold one value per entry")
        # a copy: a view of the values would keep adj_t, and so its cache entry, alive
        values = values.detach()
        values = values.clone() if values.is_floating_point() else values.to(torch.float32)
        return src, dst, values
    if edge_index.layout != torch.strided:
        raise ValueError(
            f"{layer}: unsupported sparse layout {edge_index.layout}; use torch.sparse_coo or "
            "torch.sparse_csr"
        )
    if edge_index.dtype == torch.bool or edge_index.is_floating_point() or edge_index.is_complex():
        raise TypeError(f"{layer}: edge_index must hold integer node ids, got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(
            f"{layer}: edge_index must have shape (2, E), got {tuple(edge_index.shape)}"
        )
    ei = edge_index.to(torch.int64)
    _check_node_ids(ei[0], n, "edge_index[0] (sources)")
    _check_node_ids(ei[1], n, "edge_index[1] (targets)")
    return ei[0], ei[1], None


def _build_edges(edge_index, n: int, add_self_loops: bool, layer: str) -> _Edges:
    src, dst, weight = _input_edges(edge_index, n, layer)
    everything = torch.arange(src.numel(), device=src.device)
    if not add_self_loops:
        none = everything[:0]
        ei = torch.stack([src, dst])
        return _Edges(Graph.from_edge_index(ei, n), ei, everything, none, none, weight)
    is_loop = src == dst
    keep, loop_pos = everything[~is_loop], everything[is_loop]
    nodes = torch.arange(n, device=src.device)
    ei = torch.cat([torch.stack([src[keep], dst[keep]]), nodes.expand(2, -1)], 1)
    return _Edges(Graph.from_edge_index(ei, n), ei, keep, loop_pos, src[loop_pos], weight)


def _edges(edge_index, x: torch.Tensor, add_self_loops: bool, layer: str) -> _Edges:
    """The _Edges of ``edge_index`` for features ``x`` [N, F], built once per tensor version."""
    if not isinstance(edge_index, torch.Tensor):
        raise TypeError(
            f"{layer}: edge_index must be a torch.Tensor ([2, E] or a sparse adj_t), "
            f"got {type(edge_index).__name__} (a torch_sparse SparseTensor converts with "
            ".to_torch_sparse_csr_tensor())"
        )
    n = x.shape[0]
    if edge_index.device != x.device:
        raise ValueError(f"{layer}: edge_index is on {edge_index.device} but x on {x.device}")
    graphs = _EDGES.get(edge_index)
    if graphs is None:
        graphs = _EDGES.set(edge_index, {})
    key = (n, add_self_loops)
    if key not in graphs:
        graphs[key] = built_for_reuse(lambda: _build_edges(edge_index, n, add_self_loops, layer))
    return graphs[key]


def _check_x(x, in_channels: int | None, layer: str) -> None:
    if isinstance(x, (tuple, list)):
        raise NotImplementedError(f"{layer}: bipartite (x_src, x_dst) input is not supported")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        raise ValueError(f"{layer}: x must be a floating point tensor [N, F]")
    if in_channels is not None and x.shape[1] != in_channels:
        raise ValueError(f"{layer}: expected {in_channels} input channels, got {x.shape[1]}")


def _layer_precision(precision: str | None) -> str | None:
    return None if precision is None else check_precision(precision)


class GCNConv(nn.Module):
    r"""PyG's ``GCNConv``: ``X' = D^-1/2 (A + I) D^-1/2 X W^T + b`` with PyG's ``gcn_norm``:
    self-loops added where missing (weight ``fill`` = 1, 2 when ``improved``; an existing
    loop keeps its weight; on a sparse adj_t the fill is added to it, as PyG does; without
    any edge weight every weight is 1, PyG's too), degrees the weighted in-degrees.
    ``normalize=False``: a plain weighted sum, no loops added.

    Shapes: x [N, in_channels] -> [N, out_channels]; ``edge_weight`` float [E] in edge order
    (not with an adj_t, whose values are the weights, read once per adj_t and constant: no
    gradient reaches them). Parameters: ``lin.weight``
    [out_channels, in_channels], ``bias`` [out_channels]. ``cached``: the normalised edges of
    the first call are kept (detached: later calls do not reach the first call's edge_weight)
    and used for every later call, whatever its edges (PyG's transductive setting).
    ``precision`` and ``replay`` as in ``flashgnn.nn.GCNConv``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        improved: bool = False,
        cached: bool = False,
        add_self_loops: bool = True,
        normalize: bool = True,
        bias: bool = True,
        precision: str | None = None,
        replay: bool | None = None,
    ):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached = improved, cached
        self.add_self_loops, self.normalize = add_self_loops, normalize
        self.precision = _layer_precision(precision)
        self.replay = NodeReplay(replay)
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self._cached_edges = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self._cached_edges = None

    def forward(
        self, x: torch.Tensor, edge_index, edge_weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x [N, in_channels]; edge_index [2, E] or a sparse adj_t [N, N]; edge_weight float
        [E] or None; returns [N, out_channels]."""
        _check_x(x, self.in_channels, "GCNConv")
        if self.cached and self._cached_edges is not None:
            graph, values, placed = self._cached_edges
        else:
            graph, values, placed = self._normalised(x, edge_index, edge_weight)
            if self.cached:
                self._cached_edges = (graph, values.detach(), {})
        precision = resolve_precision(self.precision)
        k = block_width(precision)
        dtype = value_dtype(x, values)
        if placed is None:  # values of this call's edge_weight
            a_values = graph.edge_values(values.to(dtype), k)
        else:
            if (k, dtype) not in placed:
                placed[k, dtype] = built_for_reuse(lambda: graph.edge_values(values.to(dtype), k))
            a_values = placed[k, dtype]
        return graph_conv(
            graph.adj(k),
            x,
            self.lin.weight.t(),
            self.bias,
            precision,
            values=a_values,
            replay=self.replay,
        )

    def _normalised(self, x, edge_index, edge_weight) -> tuple[Graph, torch.Tensor, dict | None]:
        """(the graph propagated over, its edge values [E'] in edge-id order, where the values
        placed in its formats are kept by (k, dtype): None when they follow ``edge_weight``)."""
        loops = self.normalize and self.add_self_loops
        edges = _edges(edge_index, x, loops, "GCNConv")
        if edge_weight is not None and edges.weight is not None:
            raise ValueError("GCNConv: edge_weight is not taken with a sparse adj_t (its values)")
        if edge_weight is not None:
            edge_weight = _checked_weight(edge_weight, edges.keep.numel() + edges.loop_pos.numel())
            return edges.graph, self._values(edges, edge_weight, x.dtype), None
        key = ("gcn", self.improved, self.normalize, value_dtype(x))
        if key not in edges.derived:
            values = built_for_reuse(lambda: self._values(edges, None, key[-1]))
            edges.derived[key] = (values, {})
        return (edges.graph, *edges.derived[key])

    def _values(self, edges: _Edges, weight, dtype) -> torch.Tensor:
        """PyG's gcn_norm of the input weights (``weight``, else the adj_t's values, else 1)
        over ``edges``, [E'] in their order."""
        weight = edges.weight if weight is None else weight
        graph = edges.graph
        if weight is None:  # every weight 1, the new loops' too, improved or not (as in PyG)
            weight = torch.ones(graph.num_edges, dtype=dtype, device=graph.device)
        elif self.normalize and self.add_self_loops:
            weight = weight.to(dtype)
            fill = weight.new_full((graph.num_nodes,), 2.0 if self.improved else 1.0)
            own = (edges.loop_node,), weight[edges.loop_pos]
            if edges.weight is not None:  # adj_t: PyG adds the loops to the sparse matrix
                loops = fill.index_put(*own, accumulate=True)
            else:
                loops = fill.index_put(*own)
            weight = torch.cat([weight[edges.keep], loops])
        weight = weight.to(dtype)
        if not self.normalize:
            return weight
        src, dst = edges.edge_index
        degree = weight.new_zeros(graph.num_nodes).index_add(0, dst, weight)
        scale = degree.pow(-0.5)
        scale = scale.masked_fill(scale == float("inf"), 0.0)
        return scale[src] * weight * scale[dst]

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, precision={self.precision!r}"


class AGNNConv(nn.Module):
    r"""PyG's ``AGNNConv``: ``x_i' = sum_{j -> i} softmax_j(beta cos(x_i, x_j)) x_j`` over the
    in-edges of i, after PyG's self-loop handling (``add_self_loops``: the input's loops are
    dropped and one added per node); a node without in-edges gets 0.

    Shapes: x [N, F] -> [N, F]. Parameters: ``beta`` [1] (a buffer when not
    ``requires_grad``). ``precision`` and ``replay`` as in ``flashgnn.nn.AGNNConv``.
    """

    def __init__(
        self,
        requires_grad: bool = True,
        add_self_loops: bool = True,
        precision: str | None = None,
        replay: bool | None = None,
    ):
        super().__init__()
        self.requires_grad, self.add_self_loops = requires_grad, add_self_loops
        self.precision = _layer_precision(precision)
        self.replay = NodeReplay(replay)
        if requires_grad:
            self.beta = nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("beta", torch.ones(1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.requires_grad:
            nn.init.ones_(self.beta)

    def forward(self, x: torch.Tensor, edge_index) -> torch.Tensor:
        """x [N, F]; edge_index [2, E] or a sparse adj_t [N, N]; returns [N, F]."""
        _check_x(x, None, "AGNNConv")
        graph = _edges(edge_index, x, self.add_self_loops, "AGNNConv").graph
        precision = resolve_precision(self.precision)
        return agnn_propagate(
            graph.adj(block_width(precision)), x, self.beta, precision, replay=self.replay
        )

    def extra_repr(self) -> str:
        return f"requires_grad={self.requires_grad}, precision={self.precision!r}"


class GATConv(nn.Module):
    r"""PyG's ``GATConv``: per head, ``x_i' = sum_{j -> i} alpha_ij W x_j`` with ``alpha_i. =
    softmax_j(leaky_relu(att_src . W x_j + att_dst . W x_i))`` over the in-edges of i, after
    PyG's self-loop handling (``add_self_loops``: the input's loops are dropped and one added
    per node); heads concatenated (``concat``) or averaged, then ``bias``. ``dropout`` drops
    attention values in training (the same distribution as PyG's, other draws).

    Shapes: x [N, in_channels] -> [N, heads * out_channels] (concat) or [N, out_channels].
    Parameters: ``lin.weight`` [heads * out_channels, in_channels], ``att_src`` and ``att_dst``
    [1, heads, out_channels], ``bias`` and (``residual``) ``res.weight`` [T] and [T,
    in_channels], T = heads * out_channels (concat) or out_channels.
    Not supported: ``edge_dim`` (edge features), bipartite input (a pair ``in_channels`` or
    (x_src, x_dst)). ``precision`` and ``replay`` as in ``flashgnn.nn.GATConv``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: int | None = None,
        bias: bool = True,
        residual: bool = False,
        precision: str | None = None,
        replay: bool | None = None,
    ):
        super().__init__()
        if edge_dim is not None:
            raise NotImplementedError("GATConv: edge_dim (edge features) is not supported")
        if isinstance(in_channels, (tuple, list)):
            raise NotImplementedError(
                "GATConv: a pair in_channels (bipartite input) is not supported"
            )
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.add_self_loops = add_self_loops
        self.precision = _layer_precision(precision)
        self.replay = NodeReplay(replay)
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        total = heads * out_channels if concat else out_channels
        if bias:
            self.bias = nn.Parameter(torch.empty(total))
        else:
            self.register_parameter("bias", None)
        self.res = nn.Linear(in_channels, total, bias=False) if residual else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        if self.res is not None:
            nn.init.xavier_uniform_(self.res.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor, edge_index, return_attention_weights: bool | None = None):
        """x [N, in_channels]; edge_index [2, E] or a sparse adj_t [N, N]; returns the output,
        and with ``return_attention_weights`` also (edge_index [2, E'] of the edges attended
        over, with the self-loops, in PyG's order; the attention [E', heads] in that order)."""
        _check_x(x, self.in_channels, "GATConv")
        if return_attention_weights and edge_index.layout in _SPARSE:
            raise NotImplementedError(
                "GATConv: return_attention_weights takes an edge_index [2, E], not an adj_t"
            )
        edges = _edges(edge_index, x, self.add_self_loops, "GATConv")
        n, heads, channels = x.shape[0], self.heads, self.out_channels
        out, alpha = attend(
            edges.graph,
            self.lin(x).view(n, heads, channels),
            None,
            self.att_src,
            self.att_dst,
            self.negative_slope,
            self.dropout if self.training else 0.0,
            resolve_precision(self.precision),
            get_attention=bool(return_attention_weights),
            replay=self.replay,
        )
        out = out.reshape(n, heads * channels) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + self.res(x)
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            return out, (edges.edge_index, alpha)
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, heads={self.heads}, "
            f"precision={self.precision!r}"
        )


def _checked_weight(weight, num_edges: int) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        raise TypeError("edge_weight must be a floating point tensor [E]")
    if weight.shape != (num_edges,):
        raise ValueError(
            f"edge_weight must have shape ({num_edges},) (one value per edge), "
            f"got {tuple(weight.shape)}"
        )
    return weight
