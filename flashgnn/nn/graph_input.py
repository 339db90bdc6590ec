"""Checks every layer runs on its (graph, feat) input before touching the sparse ops."""

from __future__ import annotations

import torch

from ..graph import Graph, as_graph


class ZeroInDegreeError(ValueError):
    """A node has no in-edge, so a layer would give it no message (DGL raises DGLError)."""


def check_graph_input(
    graph,
    feat,
    in_feats: int | tuple[int, int] | None,
    allow_zero_in_degree: bool,
    layer: str,
    reads_destinations: bool = True,
) -> tuple[Graph, torch.Tensor, torch.Tensor | None]:
    """(``graph`` as a Graph (a DGL graph is converted once), the source features, the
    destination features or None), after checking the features' shapes, types and device and,
    unless allowed, that every destination has an in-edge.

    ``feat`` is either one tensor [num_src, in_feats], whose first num_dst rows are the
    destinations' (a square graph's nodes, a DGL block's destinations: None is returned for
    them), or a pair (feat_src [num_src, in_feats], feat_dst [num_dst, in_feats]), as DGL's
    layers take them. ``in_feats``: the features expected, None (any), or a pair (sources,
    destinations), which takes pair input only. A layer that ``reads_destinations`` cannot take
    one tensor on a graph of more destinations than sources."""
    graph = as_graph(graph)
    in_src, in_dst = in_feats if isinstance(in_feats, tuple) else (in_feats, in_feats)
    if isinstance(feat, (tuple, list)):
        if len(feat) != 2:
            raise ValueError(
                f"{layer}: a feature pair must be (feat_src, feat_dst), got {len(feat)} tensors"
            )
        feat_src, feat_dst = feat
        _check_features(feat_src, graph.num_src_nodes, in_src, graph, layer, "feat_src")
        _check_features(feat_dst, graph.num_dst_nodes, in_dst, graph, layer, "feat_dst")
        if feat_dst.dtype != feat_src.dtype:
            raise TypeError(f"{layer}: feat_src is {feat_src.dtype} but feat_dst {feat_dst.dtype}")
    else:
        if isinstance(in_feats, tuple):
            raise ValueError(
                f"{layer}: built with in_feats = {in_feats} (sources, destinations), it takes a "
                "(feat_src, feat_dst) pair"
            )
        feat_src, feat_dst = feat, None
        _check_features(feat_src, graph.num_src_nodes, in_feats, graph, layer, "feat")
        if reads_destinations and graph.num_dst_nodes > graph.num_src_nodes:
            raise ValueError(
                f"{layer}: the graph has more destination ({graph.num_dst_nodes}) than source "
                f"({graph.num_src_nodes}) nodes; pass the features as (feat_src, feat_dst)"
            )
    if not allow_zero_in_degree and graph.has_zero_in_degree():
        raise ZeroInDegreeError(
            f"{layer}: there are 0-in-degree nodes in the graph; their output would be invalid "
            "(only the bias). Add self-loops with graph.add_self_loops(), or construct the layer "
            "with allow_zero_in_degree=True to accept this."
        )
    return graph, feat_src, feat_dst


def _check_features(
    feat, rows: int, in_feats: int | None, graph: Graph, layer: str, name: str
) -> None:
    if not isinstance(feat, torch.Tensor):
        raise TypeError(f"{layer}: {name} must be a torch.Tensor, got {type(feat).__name__}")
    if not feat.is_floating_point():
        raise TypeError(f"{layer}: {name} must be floating point, got {feat.dtype}")
    if feat.dim() != 2 or feat.shape[0] != rows:
        raise ValueError(
            f"{layer}: {name} must have shape ({rows}, features), got {tuple(feat.shape)}"
        )
    if in_feats is not None and feat.shape[1] != in_feats:
        raise ValueError(f"{layer}: expected {in_feats} input features, got {feat.shape[1]}")
    if feat.device != graph.device:
        raise ValueError(
            f"{layer}: {name} is on {feat.device} but the graph on {graph.device}; "
            "move the graph with graph.to(feat.device)"
        )


def value_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """dtype of the sparse matrix values a layer builds: float64 when any input is float64
    (gradcheck), else float32 (the ops round values to the precision themselves)."""
    return (
        torch.float64
        if any(t is not None and t.dtype == torch.float64 for t in tensors)
        else torch.float32
    )
