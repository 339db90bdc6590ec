"""Attention-based graph neural network propagation (Thekumparampil et al.), DGL's AGNNConv."""

from __future__ import annotations

import torch
from torch import nn

from ..ops import agnn_propagate
from ..ops.precision import check_precision
from ..ops.replay import NodeReplay
from ..precision_context import block_width, resolve_precision
from .graph_input import check_graph_input


class AGNNConv(nn.Module):
    r"""``h_i' = sum_{j -> i} P_ij h_j`` with ``P_i. = softmax_j(beta * cos(h_i, h_j))`` over
    the real in-edges of i only.

    The cosine is exact: features are L2-normalised (``F.normalize``, eps 1e-12, as DGL and
    PyG do) and their dot products taken by SDDMM on the graph's pattern; edge softmax and
    SpMM follow (``flashgnn.ops.agnn_propagate``, one autograd node). ``beta`` is a learnable
    [1] parameter (a buffer when ``learn_beta=False``).
    Shapes: feat [N, F] -> [N, F]; on a bipartite graph or DGL block feat [N_src, F], whose
    first N_dst rows are the destinations', or a pair (feat_src [N_src, F], feat_dst [N_dst, F])
    -> [N_dst, F], cos taken between destination i and source j. DGL's constructor and forward,
    plus ``precision``; the graph's edge weights are not used (attention defines the edge values).
    ``replay`` as in ``GCNConv`` (the kernels replayed from CUDA graphs; not with a feature pair).
    """

    def __init__(
        self,
        init_beta: float = 1.0,
        learn_beta: bool = True,
        allow_zero_in_degree: bool = False,
        precision: str | None = None,
        replay: bool | None = None,
    ):
        super().__init__()
        self.allow_zero_in_degree = allow_zero_in_degree
        self.precision = None if precision is None else check_precision(precision)
        self.replay = NodeReplay(replay)
        beta = torch.tensor([float(init_beta)])
        if learn_beta:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        """graph: flashgnn.Graph or DGL graph / block; feat [N_src, F] or (feat_src, feat_dst);
        returns [N_dst, F]."""
        graph, feat, feat_dst = check_graph_input(
            graph, feat, None, self.allow_zero_in_degree, "AGNNConv"
        )
        precision = resolve_precision(self.precision)
        return agnn_propagate(
            graph.adj(block_width(precision)),
            feat,
            self.beta,
            precision,
            feat_dst=feat_dst,
            replay=self.replay,
        )

    def extra_repr(self) -> str:
        return (
            f"learn_beta={isinstance(self.beta, nn.Parameter)}, precision={self.precision!r}, "
            f"replay={self.replay.enabled!r}"
        )
