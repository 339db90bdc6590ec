"""AGNN (Thekumparampil et al.): linear -> attention propagation layers -> linear."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from flashgnn.nn import AGNNConv

from .arguments import check_beta, check_layer_sizes, check_probability
from .graphs import per_layer


class AGNN(nn.Module):
    """dropout -> Linear(in_feats, hidden_feats) -> ReLU -> ``num_layers`` AGNNConv (pure
    propagation, no activation between them, as in the paper) -> dropout ->
    Linear(hidden_feats, out_feats). ``forward(graph, feat)`` -> logits [N, out_feats];
    ``graph`` is one graph or a list of one block per AGNNConv layer.

    Every layer's beta starts at ``init_beta`` and is learned when ``learn_beta``; a number
    ``first_beta`` fixes the first layer's beta at it instead (a buffer, never learned), as
    the paper does (PyG's example fixes it at 1)."""

    def __init__(
        self,
        in_feats: int,
        hidden_feats: int,
        out_feats: int,
        num_layers: int = 4,
        dropout: float = 0.5,
        init_beta: float = 1.0,
        learn_beta: bool = True,
        first_beta: float | None = None,
        precision: str | None = None,
        allow_zero_in_degree: bool = False,
    ):
        super().__init__()
        check_layer_sizes(in_feats, hidden_feats, out_feats, num_layers)
        check_probability("dropout", dropout)
        check_beta("first_beta", first_beta)
        self.encoder = nn.Linear(in_feats, hidden_feats)
        self.layers = nn.ModuleList(
            AGNNConv(
                init_beta if i > 0 or first_beta is None else first_beta,
                learn_beta and (i > 0 or first_beta is None),
                allow_zero_in_degree=allow_zero_in_degree,
                precision=precision,
            )
            for i in range(num_layers)
        )
        self.decoder = nn.Linear(hidden_feats, out_feats)
        self.dropout = nn.Dropout(dropout)

    def first_layer(self) -> nn.Module:
        """The layer that reads the input features (``train.weight_decay_scope``)."""
        return self.encoder

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.encoder(self.dropout(feat)))
        for layer, g in zip(self.layers, per_layer(graph, len(self.layers))):
            h = layer(g, h)
        return self.decoder(self.dropout(h))
