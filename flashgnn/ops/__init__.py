"""Sparse ops on ME-BCRS as torch.library custom ops (CPU, CUDA, fake and autograd)."""
from .agnn import agnn_propagate
from .edge_softmax import edge_softmax
from .gat import gat_attention
from .graph_conv import graph_conv
from .precision import PRECISIONS
from .sddmm import sddmm
from .spmm import spmm

__all__ = ["spmm", "sddmm", "edge_softmax", "agnn_propagate", "gat_attention", "graph_conv", "PRECISIONS"]
