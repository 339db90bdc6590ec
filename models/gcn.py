"""GCN (Kipf & Welling): a stack of graph convolutions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from flashgnn.nn import GCNConv
from flashgnn.ops import epilogue as epi

from .arguments import check_layer_sizes, check_probability
from .graphs import per_layer


class GCN(nn.Module):
    """``num_layers`` GCNConv layers: in_feats -> hidden_feats (ReLU) ... -> out_feats, with
    dropout before every layer but the first (DGL's example) and ``input_dropout`` before the
    first (Kipf & Welling's, absent from DGL's example). ``forward(graph, feat)`` ->
    logits [N, out_feats]; ``graph`` is one graph, which should carry self-loops
    (``graph.add_self_loops()``), or a list of one block per layer (-> [N_dst of the last,
    out_feats]).

    ``fused_epilogue`` (default True): each GCNConv applies its bias, ReLU, the next layer's
    dropout and the cast to the next layer's input type as it writes its output
    (``ops.epilogue``), the dropout's masks drawn from the buffer ``dropout_key`` (a seed from
    torch's generator at construction, an offset advanced on the device every training
    forward, so a captured step draws new masks at each replay); False: separate ReLU,
    ``nn.Dropout`` and casts. A layer that is not a GCNConv (a PyG twin's) gets the same
    masks from the same key, applied on their own."""

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
        fused_epilogue: bool = True,
    ):
        super().__init__()
        check_layer_sizes(in_feats, hidden_feats, out_feats, num_layers)
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
        self.fused_epilogue = bool(fused_epilogue)
        # in the state dict, so that a resumed run draws the masks it would have drawn
        self.register_buffer("dropout_key", epi.new_key())

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a state saved before the key existed keeps the model's own
        state_dict.setdefault(prefix + "dropout_key", self.dropout_key.clone())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def first_layer(self) -> nn.Module:
        """The layer that reads the input features (``train.weight_decay_scope``)."""
        return self.layers[0]

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        if not self.fused_epilogue:
            return self._unfused(graph, feat)
        p = self.dropout.p if self.training else 0.0
        if p > 0:
            epi.advance(self.dropout_key)
        last = len(self.layers) - 1
        h = feat
        for i, (layer, g) in enumerate(zip(self.layers, per_layer(graph, len(self.layers)))):
            if i == 0 and self.input_dropout is not None:
                h = self.input_dropout(h)
            drop = p if i < last else 0.0
            key = self.dropout_key if drop > 0 else None
            if isinstance(layer, GCNConv):
                dtype = _next_input_dtype(h) if i < last else None
                ep = epi.Epilogue(layer.activation is not None, drop, key, i, dtype)
                h = layer(g, h, epilogue=ep)
            else:
                h = layer(g, h)
                if drop > 0:
                    h = epi.epilogue(h, None, epi.Epilogue(dropout=drop, key=key, stream=i))
        return h

    def _unfused(self, graph, feat: torch.Tensor) -> torch.Tensor:
        h = feat
        for i, (layer, g) in enumerate(zip(self.layers, per_layer(graph, len(self.layers)))):
            if i > 0:
                h = self.dropout(h)
            elif self.input_dropout is not None:
                h = self.input_dropout(h)
            h = layer(g, h)
        return h


def _next_input_dtype(h: torch.Tensor) -> torch.dtype | None:
    """The type the next layer's products read (autocast's, where it is on; float64 stays),
    or None to keep the layer's own."""
    device = h.device.type
    if h.dtype != torch.float64 and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return None
