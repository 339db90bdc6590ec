"""Building a model by name, the single entry the training code uses."""

from __future__ import annotations

from torch import nn

from .agnn import AGNN
from .gat import GAT
from .gcn import GCN

MODELS = {"gcn": GCN, "agnn": AGNN, "gat": GAT}
DEFAULT_HIDDEN = {"gcn": 16, "agnn": 16, "gat": 8}
"""Hidden width when none is given: GCN and AGNN papers use 16; GAT 8 per head."""


def build_model(name: str, in_feats: int, out_feats: int, **kwargs) -> nn.Module:
    """``GCN``, ``AGNN`` or ``GAT`` (``name`` in {"gcn", "agnn", "gat"}, any case) built with
    ``kwargs`` (its constructor's keyword arguments; ``hidden_feats`` defaults per model)."""
    key = str(name).lower()
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    kwargs.setdefault("hidden_feats", DEFAULT_HIDDEN[key])
    return MODELS[key](in_feats=in_feats, out_feats=out_feats, **kwargs)
