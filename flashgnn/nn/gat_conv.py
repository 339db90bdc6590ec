"""Graph attention (Velickovic et al.) with DGL's GATConv interface."""
from __future__ import annotations

import torch
from torch import nn

from ..ops import edge_softmax, spmm
from ..ops.precision import check_precision
from ..precision_context import block_width, resolve_precision
from .graph_input import check_graph_input, value_dtype


class GATConv(nn.Module):
    r"""``h_i' = sum_{j -> i} a_ij W h_j`` per head, with ``a_i. = softmax_j(e_ij)`` over the
    in-edges of i and ``e_ij = leaky_relu(attn_l . W h_j + attn_r . W h_i)``.

    The score is a sum of two per-node scalars, so it is not an SDDMM: both are computed per
    node, gathered onto the edges in CSR order and placed into the ME-BCRS value layout; edge
    softmax and SpMM then run once per head (a loop over heads, each an SpMM of width
    out_feats). ``attn_drop`` drops attention values; ``edge_weight`` [E] (edge-id order)
    multiplies them after dropout, as DGL does; the graph's own weights are not used.

    Shapes: feat [N, in_feats] -> [N, num_heads, out_feats]; with ``get_attention`` also the
    attention [E, num_heads, 1] in edge-id order. DGL's constructor and forward
    (``forward(graph, feat, edge_weight=None, get_attention=False)``), plus ``precision``;
    no bipartite (tuple) input. Parameters: ``fc`` (Linear, no bias), ``attn_l`` and
    ``attn_r`` [1, num_heads, out_feats], ``bias`` [num_heads * out_feats], ``res_fc``.
    """

    def __init__(self, in_feats: int, out_feats: int, num_heads: int, feat_drop: float = 0.0,
                 attn_drop: float = 0.0, negative_slope: float = 0.2, residual: bool = False,
                 activation=None, allow_zero_in_degree: bool = False, bias: bool = True,
                 precision: str | None = None):
        super().__init__()
        self.in_feats, self.out_feats, self.num_heads = in_feats, out_feats, num_heads
        self.activation = activation
        self.allow_zero_in_degree = allow_zero_in_degree
        self.precision = None if precision is None else check_precision(precision)
        self.fc = nn.Linear(in_feats, out_feats * num_heads, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.attn_r = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.feat_drop = nn.Dropout(feat_drop)
        self.attn_drop = nn.Dropout(attn_drop)
        self.leaky_relu = nn.LeakyReLU(negative_slope)
        self.bias = nn.Parameter(torch.empty(num_heads * out_feats)) if bias else None
        if not residual:
            self.res_fc = None
        elif in_feats != out_feats * num_heads:
            self.res_fc = nn.Linear(in_feats, out_feats * num_heads, bias=False)
        else:
            self.res_fc = nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_normal_(self.fc.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        if isinstance(self.res_fc, nn.Linear):
            nn.init.xavier_normal_(self.res_fc.weight, gain=gain)

    def forward(self, graph, feat: torch.Tensor, edge_weight: torch.Tensor | None = None,
                get_attention: bool = False):
        """graph: flashgnn.Graph or DGL graph; feat [N, in_feats]; returns [N, num_heads,
        out_feats], and the attention [E, num_heads, 1] when ``get_attention``."""
        graph = check_graph_input(graph, feat, self.in_feats, self.allow_zero_in_degree, "GATConv")
        precision = resolve_precision(self.precision)
        k = block_width(precision)
        adj = graph.adj(k)
        h = self.feat_drop(feat)
        ft = self.fc(h).view(-1, self.num_heads, self.out_feats)
        score_src = (ft * self.attn_l).sum(-1)  # [N, heads]
        score_dst = (ft * self.attn_r).sum(-1)
        # [heads, E] in CSR order (rows = destinations), then into the value layout
        e = self.leaky_relu(score_src.t()[:, graph.indices] + score_dst.t()[:, graph.dst_of_csr()])
        scores = e.new_zeros(self.num_heads, 8 * adj.n_vectors).index_copy(1, adj.perm, e)
        weight_values = None
        if edge_weight is not None:
            weight_values = graph.edge_values(edge_weight.to(value_dtype(feat, edge_weight)), k)
        ft_heads = ft.transpose(0, 1).contiguous()  # [heads, N, out_feats]
        outs, attention = [], []
        for head in range(self.num_heads):
            prob = self.attn_drop(edge_softmax(adj, scores[head]))
            if weight_values is not None:
                prob = prob * weight_values
            outs.append(spmm(adj, ft_heads[head], precision, values=prob))
            attention.append(prob)
        rst = torch.stack(outs, 1)
        if self.res_fc is not None:
            rst = rst + self.res_fc(h).view(h.shape[0], self.num_heads, self.out_feats)
        if self.bias is not None:
            rst = rst + self.bias.view(1, self.num_heads, self.out_feats)
        if self.activation is not None:
            rst = self.activation(rst)
        if get_attention:
            return rst, torch.stack(attention, 1)[graph.edge_slots(k)].unsqueeze(-1)
        return rst

    def extra_repr(self) -> str:
        return (f"{self.in_feats}, {self.out_feats}, num_heads={self.num_heads}, "
                f"precision={self.precision!r}")
