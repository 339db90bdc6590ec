"""Locality reordering: renumber a graph's nodes so that rows sharing neighbours fall in the
same 8-row ME-BCRS windows (fewer column vectors per nonzero, so fewer MMAs) and neighbouring
columns lie close (gathered rows of X reused from L2). ``Graph.reorder`` applies an order;
``Reordering`` carries the permutation between the user's node order and the new one."""

from .order import METHODS, check_method, node_order
from .reordering import Reordering

__all__ = ["METHODS", "Reordering", "check_method", "node_order"]
