"""Which graph each graph layer of a model runs on: one graph for all (full-graph training),
or one per layer (DGL's blocks of a mini-batch)."""

from __future__ import annotations


def per_layer(graph, num_layers: int) -> list:
    """``graph`` for each of ``num_layers`` graph layers, or, when ``graph`` is a list or tuple
    (a mini-batch's blocks, the one nearest the input first, as DGL's samplers return them),
    its graphs in order, one per layer."""
    if isinstance(graph, (list, tuple)):
        if len(graph) != num_layers:
            raise ValueError(
                f"the model has {num_layers} graph layers but {len(graph)} graphs were given"
            )
        return list(graph)
    return [graph] * num_layers
