"""GCN (Kipf & Welling): a stack of graph convolutions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from flashgnn.nn import GCNConv

from .arguments import check_probability, check_size
from .graphs import per_layer


class GCN(nn.Module):
    """``num_layers`` GCNConv layers: in_feats -> hidden_feats (ReLU) ... -> out_feats, with
    dropout before every layer but the first (DGL's example) and ``input_dropout`` before the
    first (Kipf & Welling's, absent from DGL's example). ``forward(graph, feat)`` ->
    logits [N, out_feats]; ``graph`` is one graph, which should carry self-loops
    (``graph.add_self_loops()``), or a list of one block per layer (-> [N_dst of the last,
    out_feats])."""

    def __init__(
        self,
        in_feats: int,
        hidden_feats: int,
        out_feats: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        input_dropout: float = 0.0,
        norm: str = "both",
        precision: str | None = None,
        allow_zero_in_degree: bool = False,
    ):
        super().__init__()
        check_size("in_feats", in_feats)
        check_size("hidden_feats", hidden_feats)
        check_size("out_feats", out_feats)
        check_size("num_layers", num_layers)
        check_probability("dropout", dropout)
        check_probability("input_dropout", input_dropout)
        dims = [in_feats] + [hidden_feats] * (num_layers - 1) + [out_feats]
        self.layers = nn.ModuleList(
            GCNConv(
                dims[i],
                dims[i + 1],
                norm=norm,
                activation=F.relu if i < num_layers - 1 else None,
                allow_zero_in_degree=allow_zero_in_degree,
                precision=precision,
            )
            for i in range(num_layers)
        )
        self.dropout = nn.Dropout(dropout)
        # None when off, so that the input features stay the tensor the caller passed
        self.input_dropout = nn.Dropout(input_dropout) if input_dropout > 0 else None

    def first_layer(self) -> nn.Module:
        """The layer that reads the input features (``train.weight_decay_scope``)."""
        return self.layers[0]

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        h = feat
        for i, (layer, g) in enumerate(zip(self.layers, per_layer(graph, len(self.layers)))):
            if i > 0:
                h = self.dropout(h)
            elif self.input_dropout is not None:
                h = self.input_dropout(h)
            h = layer(g, h)
        return h
