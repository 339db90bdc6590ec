"""GNN layers on ME-BCRS ops, with DGL's constructor and ``forward(graph, feat)`` signatures."""

from ..ops.replay import set_replay
from .agnn_conv import AGNNConv
from .gat_conv import GATConv
from .gcn_conv import GCNConv
from .graph_input import ZeroInDegreeError

__all__ = ["GCNConv", "AGNNConv", "GATConv", "ZeroInDegreeError", "set_replay"]
