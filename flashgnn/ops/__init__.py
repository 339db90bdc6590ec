"""Sparse ops on ME-BCRS as torch.library custom ops (CPU, CUDA, fake and autograd), and the
graph ops that Graph and NeighborSampler build with (GCN's normalised values, the sampled
in-edges of a hop). Every op picks the CUDA kernel or its torch twin from its inputs; nothing
above this package imports a kernel. Importing it registers the GPU format builder
(``ops/build.py``)."""

from . import build  # noqa: F401  (registers the CUDA builder with flashgnn.device_builders)
from .agnn import agnn_propagate
from .edge_softmax import edge_softmax
from .gat import gat_attention
from .gcn_norm import gcn_norm_values
from .graph_conv import graph_conv
from .precision import PRECISIONS
from .sampling import sample_in_edges
from .sddmm import sddmm
from .spmm import spmm

__all__ = [
    "spmm",
    "sddmm",
    "edge_softmax",
    "agnn_propagate",
    "gat_attention",
    "graph_conv",
    "gcn_norm_values",
    "sample_in_edges",
    "PRECISIONS",
]
