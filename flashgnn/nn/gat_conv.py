"""Graph attention (Velickovic et al.) with DGL's GATConv interface."""

from __future__ import annotations

import torch
from torch import nn

from ..formats.block_diagonal import head_major, node_major
from ..graph import Graph
from ..ops import gat_attention
from ..ops.precision import check_precision
from ..ops.replay import NodeReplay
from ..ops.score_terms import score_terms
from ..precision_context import block_width, resolve_precision
from .graph_input import check_graph_input, value_dtype


class GATConv(nn.Module):
    r"""``h_i' = sum_{j -> i} a_ij W h_j`` per head, with ``a_i. = softmax_j(e_ij)`` over the
    in-edges of i and ``e_ij = leaky_relu(attn_l . W h_j + attn_r . W h_i)``.

    Every head runs in the same launches, on diag(A, ..., A) (``Graph.adj_heads``), through
    ``ops.gat_attention``: the scores ``e_ij = er_i + el_j`` are formed exactly in fp32 (by the
    softmax kernels on the GPU, a rank-2 SDDMM on the CPU), with a backward that sums over rows
    and columns (no scatter, deterministic); then one edge softmax and one SpMM of width
    out_feats, as one autograd node. ``attn_drop`` drops attention values; ``edge_weight`` [E]
    (edge-id
    order) multiplies them after dropout, as DGL does; the graph's own weights are not used.

    Shapes: feat [N, in_feats] -> [N, num_heads, out_feats]; with ``get_attention`` also the
    attention [E, num_heads, 1] in edge-id order. On a bipartite graph or DGL block, feat
    [N_src, in_feats] (the first N_dst rows are the destinations') or a pair (feat_src,
    feat_dst) -> [N_dst, num_heads, out_feats]: el from the sources, er and the residual from
    the destinations, both projected by ``fc``, or, with ``in_feats`` a pair (in_src, in_dst)
    (pair input only), by ``fc_src`` and ``fc_dst``. DGL's constructor and forward
    (``forward(graph, feat, edge_weight=None, get_attention=False)``), plus ``precision`` and
    ``replay`` as in ``GCNConv`` (the kernels replayed from CUDA graphs, attention dropout
    included; not with ``edge_weight`` or ``get_attention``). Parameters: ``fc`` (Linear, no
    bias; or ``fc_src`` and ``fc_dst``), ``attn_l`` and ``attn_r`` [1, num_heads, out_feats],
    ``bias`` [num_heads * out_feats], ``res_fc``.
    """

    def __init__(
        self,
        in_feats: int | tuple[int, int],
        out_feats: int,
        num_heads: int,
        feat_drop: float = 0.0,
        attn_drop: float = 0.0,
        negative_slope: float = 0.2,
        residual: bool = False,
        activation=None,
        allow_zero_in_degree: bool = False,
        bias: bool = True,
        precision: str | None = None,
        replay: bool | None = None,
    ):
        super().__init__()
        self.in_feats, self.out_feats, self.num_heads = in_feats, out_feats, num_heads
        self.replay = NodeReplay(replay)
        self.activation = activation
        self.allow_zero_in_degree = allow_zero_in_degree
        self.precision = None if precision is None else check_precision(precision)
        in_src, in_dst = in_feats if isinstance(in_feats, tuple) else (in_feats, in_feats)
        if isinstance(in_feats, tuple):
            self.fc = None
            self.fc_src = nn.Linear(in_src, out_feats * num_heads, bias=False)
            self.fc_dst = nn.Linear(in_dst, out_feats * num_heads, bias=False)
        else:
            self.fc = nn.Linear(in_feats, out_feats * num_heads, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.attn_r = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.feat_drop = nn.Dropout(feat_drop)
        self.attn_drop = nn.Dropout(attn_drop)
        self.leaky_relu = nn.LeakyReLU(negative_slope)
        self.bias = nn.Parameter(torch.empty(num_heads * out_feats)) if bias else None
        if not residual:
            self.res_fc = None
        elif in_dst != out_feats * num_heads:
            self.res_fc = nn.Linear(in_dst, out_feats * num_heads, bias=False)
        else:
            self.res_fc = nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        for fc in dict.fromkeys(self._projections()):
            nn.init.xavier_normal_(fc.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        if isinstance(self.res_fc, nn.Linear):
            nn.init.xavier_normal_(self.res_fc.weight, gain=gain)

    def forward(
        self,
        graph,
        feat: torch.Tensor,
        edge_weight: torch.Tensor | None = None,
        get_attention: bool = False,
    ):
        """graph: flashgnn.Graph or DGL graph / block; feat [N_src, in_feats] or (feat_src,
        feat_dst); returns [N_dst, num_heads, out_feats], and the attention [E, num_heads, 1]
        when ``get_attention``."""
        graph, feat, feat_dst = check_graph_input(
            graph, feat, self.in_feats, self.allow_zero_in_degree, "GATConv"
        )
        precision = resolve_precision(self.precision)
        n_src, n_dst = graph.node_counts
        fc_src, fc_dst = self._projections()
        h = _dropout(self.feat_drop, feat)
        ft = fc_src(h).view(n_src, self.num_heads, self.out_feats)
        ft_dst = h_dst = None
        if feat_dst is not None:
            h_dst = _dropout(self.feat_drop, feat_dst)
            ft_dst = fc_dst(h_dst).view(n_dst, self.num_heads, self.out_feats)
        rst, attention = attend(
            graph,
            ft,
            ft_dst,
            self.attn_l,
            self.attn_r,
            self.leaky_relu.negative_slope,
            self.attn_drop.p if self.attn_drop.training else 0.0,
            precision,
            edge_weight,
            get_attention,
            self.replay,
        )
        rst = self.output(rst, h[:n_dst] if h_dst is None else h_dst)
        if get_attention:
            return rst, attention.unsqueeze(-1)
        return rst

    def output(self, rst: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        """The layer's output [N_dst, num_heads, out_feats] from the attention's ``rst`` (same
        shape) and the destinations' dropped input ``h_dst`` [N_dst, in_feats]: the residual,
        the bias, then the activation."""
        n_dst = rst.shape[0]
        if self.res_fc is not None:
            rst = rst + self.res_fc(h_dst).view(n_dst, self.num_heads, self.out_feats)
        if self.bias is not None:
            rst = rst + self.bias.view(1, self.num_heads, self.out_feats)
        return rst if self.activation is None else self.activation(rst)

    def _projections(self) -> tuple[nn.Linear, nn.Linear]:
        """The Linear layers of the sources and of the destinations (``fc`` for both, unless
        built with an ``in_feats`` pair)."""
        return (self.fc, self.fc) if self.fc is not None else (self.fc_src, self.fc_dst)

    def extra_repr(self) -> str:
        return (
            f"{self.in_feats}, {self.out_feats}, num_heads={self.num_heads}, "
            f"precision={self.precision!r}, replay={self.replay.enabled!r}"
        )


def _dropout(dropout: nn.Dropout, t: torch.Tensor) -> torch.Tensor:
    """``dropout(t)``, skipped (no op, no autograd node) when it would change nothing."""
    return dropout(t) if dropout.training and dropout.p > 0 else t


def attend(
    graph: Graph,
    ft: torch.Tensor,
    ft_dst: torch.Tensor | None,
    attn_l: torch.Tensor,
    attn_r: torch.Tensor,
    negative_slope: float,
    attn_drop: float,
    precision: str,
    edge_weight: torch.Tensor | None = None,
    get_attention: bool = False,
    replay: NodeReplay | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Multi-head graph attention of projected features: (rst [N_dst, heads, out], the
    attention [E, heads] in edge-id order when ``get_attention``, else None).

    ft [N_src, heads, out]: the sources' projected features; ft_dst [N_dst, heads, out] or None
    (ft's first N_dst rows); attn_l, attn_r [1, heads, out]: the source and destination
    attention vectors; ``attn_drop``: dropout on the attention values (0: none);
    ``edge_weight`` float [E] (edge-id order) multiplies them after dropout; ``replay``: the
    calling layer's ``NodeReplay`` (``ops.gat_attention``), unused with ``edge_weight``, whose
    values in A's layout are a new tensor every call (a configuration that never repeats)."""
    k = block_width(precision)
    heads = ft.shape[1]
    n_dst = graph.num_dst_nodes
    adj = graph.adj_heads(heads, k)
    rows, cols = adj.n_rows // heads, adj.n_cols // heads  # one head's (padded) dst, src
    ft = head_major(ft, cols)  # [heads * cols, out]
    if ft_dst is not None:
        ft_dst = head_major(ft_dst, rows)
    weights = None
    if edge_weight is not None:
        weights = graph.edge_values(edge_weight.to(value_dtype(ft, edge_weight)), k)
        weights = weights.repeat(heads)
    er, el = _score_terms(ft, ft_dst, attn_l, attn_r, heads, rows, cols)
    result = gat_attention(
        adj,
        ft,
        er,
        el,
        negative_slope,
        attn_drop,
        precision,
        edge_values=weights,
        return_attention=get_attention,
        replay=None if weights is not None else replay,
    )
    out, prob = result if get_attention else (result, None)
    rst = node_major(out, heads, n_dst)
    if prob is None:
        return rst, None
    return rst, prob.view(heads, -1)[:, graph.edge_slots(k)].t()


def _score_terms(
    ft: torch.Tensor,
    ft_dst: torch.Tensor | None,
    attn_l: torch.Tensor,
    attn_r: torch.Tensor,
    heads: int,
    rows: int,
    cols: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(er [heads * rows, 1], el [heads * cols, 1]) from the head-major source features ft
    and destination features ft_dst (None: each head's first rows of ft): er = attn_r . W h_dst,
    el = attn_l . W h_src, in fp32 (the attention vectors' type) for fp16/bf16 features."""
    if ft_dst is None:  # both from ft
        terms = score_terms(ft, torch.cat([attn_r, attn_l]).transpose(0, 1)).view(heads, cols, 2)
        return terms[:, :rows, :1].reshape(-1, 1), terms[:, :, 1:].reshape(-1, 1)
    return score_terms(ft_dst, attn_r.transpose(0, 1)), score_terms(ft, attn_l.transpose(0, 1))
