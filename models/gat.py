"""GAT (Velickovic et al.): multi-head graph attention layers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from flashgnn.nn import GATConv

from .arguments import check_layer_sizes, check_probability, check_size
from .graphs import per_layer


class GAT(nn.Module):
    """``num_layers`` GATConv layers. Hidden layers: ``heads`` heads of ``hidden_feats``,
    concatenated (``concat=True``) or averaged, then ELU; the last layer: ``out_heads`` heads
    of ``out_feats``, averaged. ``residual`` applies to every layer but the first (DGL's example).
    ``forward(graph, feat)`` -> logits [N, out_feats]; ``graph`` is one graph or a list of one
    block per layer."""

    def __init__(
        self,
        in_feats: int,
        hidden_feats: int,
        out_feats: int,
        num_layers: int = 2,
        heads: int = 8,
        out_heads: int = 1,
        feat_drop: float = 0.6,
        attn_drop: float = 0.6,
        negative_slope: float = 0.2,
        residual: bool = False,
        concat: bool = True,
        precision: str | None = None,
        allow_zero_in_degree: bool = False,
    ):
        super().__init__()
        check_layer_sizes(in_feats, hidden_feats, out_feats, num_layers)
        check_size("heads", heads)
        check_size("out_heads", out_heads)
        check_probability("feat_drop", feat_drop)
        check_probability("attn_drop", attn_drop)
        self.concat = concat
        common = dict(
            feat_drop=feat_drop,
            attn_drop=attn_drop,
            negative_slope=negative_slope,
            allow_zero_in_degree=allow_zero_in_degree,
            precision=precision,
        )
        self.layers = nn.ModuleList()
        dim = in_feats
        for i in range(num_layers - 1):
            self.layers.append(
                GATConv(dim, hidden_feats, heads, residual=residual and i > 0, **common)
            )
            dim = hidden_feats * heads if concat else hidden_feats
        self.layers.append(
            GATConv(dim, out_feats, out_heads, residual=residual and num_layers > 1, **common)
        )

    def first_layer(self) -> nn.Module:
        """The layer that reads the input features (``train.weight_decay_scope``)."""
        return self.layers[0]

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        h = feat
        graphs = per_layer(graph, len(self.layers))
        for layer, g in zip(self.layers[:-1], graphs):
            h = layer(g, h)
            h = F.elu(h.flatten(1) if self.concat else h.mean(1))
        return self.layers[-1](graphs[-1], h).mean(1)
