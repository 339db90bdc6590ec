"""Graph convolution (Kipf & Welling) with DGL's GraphConv interface."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import graph_conv
from ..ops.epilogue import Epilogue
from ..ops.gcn_norm import NORMS
from ..ops.precision import check_precision
from ..ops.replay import NodeReplay
from ..precision_context import block_width, resolve_precision
from .graph_input import check_graph_input, value_dtype


class GCNConv(nn.Module):
    r"""``h_i' = act(sum_{j -> i} c_ij w_ji (h_j W) + b)`` over the in-edges of i.

    ``norm`` sets c_ij from unweighted degrees clamped to >= 1 (DGL's semantics): "both"
    ``1 / sqrt(d_in(i) d_out(j))``, "right" ``1 / d_in(i)``, "left" ``1 / d_out(j)``, "none"
    1. w_ji is ``edge_weight`` (forward), else the graph's own weights, else 1. The layer does
    not add self-loops: call ``graph.add_self_loops()`` (PyG's GCNConv adds them itself).

    Shapes: feat [N_src, in_feats] (or a pair (feat_src, feat_dst), of which only feat_src is
    read) -> [N_dst, out_feats], N_src = N_dst = N on a square graph; on a bipartite graph or
    DGL block the degrees are the block's (out-degrees of sources, in-degrees of destinations),
    as in DGL. ``edge_weight`` float [E] in edge-id order.
    Same constructor and forward as ``dgl.nn.GraphConv``, plus ``precision`` (None: the
    ``flashgnn.precision`` context) for the SpMM; the normalisation is folded into the
    sparse values instead of scaling the features twice, and W multiplies on the narrower side
    of the aggregation, as DGL does (``flashgnn.ops.graph_conv``). ``replay``: replay the
    layer's kernels from CUDA graphs (``flashgnn.ops.replay``: the same bits, a fraction of the
    host's time per step; static buffers of a few times the features' size per slot): True
    wherever it can, False never, None (default) on graphs of at most 4M nonzeros, where the
    host bounds a step.
    """

    def __init__(
        self,
        in_feats: int,
        out_feats: int,
        norm: str = "both",
        weight: bool = True,
        bias: bool = True,
        activation=None,
        allow_zero_in_degree: bool = False,
        precision: str | None = None,
        replay: bool | None = None,
    ):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        self.in_feats, self.out_feats = in_feats, out_feats
        self.norm = norm
        self.activation = activation
        self.allow_zero_in_degree = allow_zero_in_degree
        self.precision = None if precision is None else check_precision(precision)
        self.replay = NodeReplay(replay)
        self.weight = nn.Parameter(torch.empty(in_feats, out_feats)) if weight else None
        self.bias = nn.Parameter(torch.empty(out_feats)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(
        self,
        graph,
        feat: torch.Tensor,
        weight: torch.Tensor | None = None,
        edge_weight: torch.Tensor | None = None,
        epilogue: Epilogue | None = None,
    ) -> torch.Tensor:
        """graph: flashgnn.Graph or DGL graph / block; feat [N_src, in_feats] or (feat_src,
        feat_dst); weight [in_feats, out_feats] when the layer was built with weight=False;
        epilogue: ``ops.epilogue.Epilogue`` applied as the output is written, in place of the
        layer's activation (which must then be None or ReLU; the epilogue's ``relu`` decides);
        returns [N_dst, out_feats] (in the epilogue's dtype when it sets one)."""
        graph, feat, _ = check_graph_input(
            graph,
            feat,
            self.in_feats,
            self.allow_zero_in_degree,
            "GCNConv",
            reads_destinations=False,
        )
        if weight is not None and self.weight is not None:
            raise ValueError(
                "GCNConv: an external weight was given but the layer has its own; "
                "construct it with weight=False"
            )
        weight = self.weight if weight is None else weight
        if epilogue is not None and self.activation not in (None, F.relu, torch.relu):
            raise ValueError("GCNConv: an epilogue replaces an activation of None or ReLU only")
        precision = resolve_precision(self.precision)
        k = block_width(precision)
        values = graph.gcn_values(self.norm, k, value_dtype(feat, edge_weight), edge_weight)
        rst = graph_conv(
            graph.adj(k),
            feat,
            weight,
            self.bias,
            precision,
            values=values,
            replay=self.replay,
            epilogue=epilogue,
        )
        if epilogue is not None or self.activation is None:
            return rst
        return self.activation(rst)

    def extra_repr(self) -> str:
        return (
            f"{self.in_feats}, {self.out_feats}, norm={self.norm!r}, precision={self.precision!r}, "
            f"replay={self.replay.enabled!r}"
        )
