"""GNN layers on ME-BCRS ops, with DGL's constructor and ``forward(graph, feat)`` signatures
(``flashgnn.nn.pyg``: PyG's, ``forward(x, edge_index)``), and ``SparseLinear``, a linear layer
whose weight is pruned to V x 1 vectors (CVSE)."""

from ..ops.replay import set_replay
from . import pyg
from .agnn_conv import AGNNConv
from .gat_conv import GATConv
from .gcn_conv import GCNConv
from .graph_input import ZeroInDegreeError
from .sparse_linear import SparseLinear, sparsify

__all__ = [
    "GCNConv",
    "AGNNConv",
    "GATConv",
    "SparseLinear",
    "sparsify",
    "ZeroInDegreeError",
    "set_replay",
    "pyg",
]
