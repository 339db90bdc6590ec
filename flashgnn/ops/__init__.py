"""Sparse ops on ME-BCRS as torch.library custom ops (CPU, CUDA, fake and autograd), and the
graph ops that Graph and NeighborSampler build with (GCN's normalised values, the sampled
in-edges of a hop). Every op picks the CUDA kernel or its torch twin from its inputs; nothing
above this package imports a kernel. Each format's module registers its
implementations with ``ops/dispatch.py``; importing the package registers them all."""

# importing a format's op module registers it with the dispatch; build registers the CUDA
# builder with flashgnn.formats.device_builders
from . import blocked16, build, cvse, gcoo, hbell, tca  # noqa: F401
from .agnn import agnn_propagate
from .dispatch import sddmm, spmm
from .edge_softmax import edge_softmax
from .gat import gat_attention
from .gcn_norm import gcn_norm_values
from .graph_conv import graph_conv
from .precision import PRECISIONS
from .sampling import sample_in_edges
from .sddmm import mebcrs_sddmm  # noqa: F401
from .spmm import mebcrs_spmm  # noqa: F401

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
