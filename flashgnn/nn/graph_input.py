"""Checks every layer runs on its (graph, feat) input before touching the sparse ops."""
from __future__ import annotations

import torch

from ..graph import Graph, as_graph


class ZeroInDegreeError(ValueError):
    """A node has no in-edge, so a layer would give it no message (DGL raises DGLError)."""


def check_graph_input(graph, feat: torch.Tensor, in_feats: int | None, allow_zero_in_degree: bool,
                      layer: str) -> Graph:
    """``graph`` as a Graph (a DGL graph is converted once), after checking that ``feat`` is
    [num_nodes, in_feats] on the graph's device and, unless allowed, that every node has an
    in-edge."""
    graph = as_graph(graph)
    if not isinstance(feat, torch.Tensor):
        raise TypeError(f"{layer}: feat must be a torch.Tensor, got {type(feat).__name__}")
    if not feat.is_floating_point():
        raise TypeError(f"{layer}: feat must be floating point, got {feat.dtype}")
    if feat.dim() != 2 or feat.shape[0] != graph.num_nodes:
        raise ValueError(f"{layer}: feat must have shape ({graph.num_nodes}, features), got {tuple(feat.shape)}")
    if in_feats is not None and feat.shape[1] != in_feats:
        raise ValueError(f"{layer}: expected {in_feats} input features, got {feat.shape[1]}")
    if feat.device != graph.device:
        raise ValueError(f"{layer}: feat is on {feat.device} but the graph on {graph.device}; "
                         "move the graph with graph.to(feat.device)")
    if not allow_zero_in_degree and graph.has_zero_in_degree():
        raise ZeroInDegreeError(
            f"{layer}: there are 0-in-degree nodes in the graph; their output would be invalid "
            "(only the bias). Add self-loops with graph.add_self_loops(), or construct the layer "
            "with allow_zero_in_degree=True to accept this."
        )
    return graph


def value_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """dtype of the sparse matrix values a layer builds: float64 when any input is float64
    (gradcheck), else float32 (the ops round values to the precision themselves)."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32
