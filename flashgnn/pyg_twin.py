"""PyG twins: a flashgnn model, or one layer, with its GCNConv, AGNNConv and GATConv replaced by
torch_geometric's with the same weights, everything else (dense layers, dropout, the forward)
the model's own. The layer and training benchmarks time them against flashgnn, and
``model.backend: pyg`` trains them (``flashgnn compare --reference pyg``). Needs
torch_geometric, imported when a twin is built.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import torch
from torch import nn

from . import nn as fnn
from .graph import Graph


class PyGConv(nn.Module):
    """A PyG conv behind flashgnn's ``layer(graph, feat)`` signature:
    ``act(conv(feat_drop(feat), adj))`` with the adjacency ``adj`` (a torch.sparse CSR adj_t
    or an edge_index) fixed. With ``heads``, the conv's concatenated heads [N, heads * C] are
    returned as [N, heads, C], the shape of flashgnn's GATConv output."""

    def __init__(
        self,
        conv: nn.Module,
        adj: torch.Tensor,
        activation: Callable | None = None,
        feat_drop: nn.Module | None = None,
        heads: int | None = None,
    ):
        super().__init__()
        self.conv, self.adj, self.activation = conv, adj, activation
        self.feat_drop, self.heads = feat_drop, heads

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        if self.feat_drop is not None:
            feat = self.feat_drop(feat)
        out = self.conv(feat, self.adj)
        if self.heads is not None:
            out = out.view(out.shape[0], self.heads, -1)
        return self.activation(out) if self.activation is not None else out


def _pyg_conv(layer: nn.Module, adj: torch.Tensor, cached: bool) -> PyGConv:
    try:
        from torch_geometric import nn as pyg_nn
    except ImportError as e:
        raise ImportError(
            f"a PyG twin needs torch_geometric (pip install torch_geometric): {e}"
        ) from e

    if isinstance(layer, fnn.GCNConv):
        if layer.norm != "both" or layer.weight is None:
            raise ValueError("PyG's GCNConv matches only norm='both' with a weight")
        conv = pyg_nn.GCNConv(
            layer.in_feats,
            layer.out_feats,
            cached=cached,
            add_self_loops=False,
            normalize=True,
            bias=layer.bias is not None,
        ).to(adj.device)
        with torch.no_grad():
            conv.lin.weight.copy_(layer.weight.T)
            if layer.bias is not None:
                conv.bias.copy_(layer.bias)
        return PyGConv(conv, adj, layer.activation)
    if isinstance(layer, fnn.AGNNConv):
        conv = pyg_nn.AGNNConv(
            requires_grad=isinstance(layer.beta, nn.Parameter), add_self_loops=False
        ).to(adj.device)
        with torch.no_grad():
            conv.beta.copy_(layer.beta)
        return PyGConv(conv, adj)
    if isinstance(layer, fnn.GATConv):
        if layer.res_fc is not None or layer.fc is None:
            raise ValueError(
                "the PyG twin of GATConv has no residual and one projection (an int in_feats)"
            )
        conv = pyg_nn.GATConv(
            layer.in_feats,
            layer.out_feats,
            heads=layer.num_heads,
            concat=True,
            negative_slope=layer.leaky_relu.negative_slope,
            dropout=layer.attn_drop.p,
            add_self_loops=False,
            bias=layer.bias is not None,
        ).to(adj.device)
        with torch.no_grad():
            conv.lin.weight.copy_(layer.fc.weight)
            conv.att_src.copy_(layer.attn_l)
            conv.att_dst.copy_(layer.attn_r)
            if layer.bias is not None:
                conv.bias.copy_(
                    layer.bias
                )  # [heads * C] after the concatenation, as flashgnn adds it
        return PyGConv(conv, adj, layer.activation, copy.deepcopy(layer.feat_drop), layer.num_heads)
    raise TypeError(f"no PyG counterpart for {type(layer).__name__}")


def pyg_twin(module: nn.Module, adj: torch.Tensor, cached: bool = False) -> nn.Module:
    """A copy of ``module`` (a flashgnn layer, or a model built of them) whose GCNConv,
    AGNNConv and GATConv layers are PyG's, with the same weights, fed ``adj``; everything else
    (dense layers, dropout, the forward) is the model's own. PyG's GCN normalisation uses
    in-degrees on both sides, which equals flashgnn's "both" on symmetric graphs (the
    benchmark's). PyG's GATConv takes an edge_index (GAT's attention dropout is PyG's, on
    its own [E, heads] tensor)."""
    if isinstance(module, (fnn.GCNConv, fnn.AGNNConv, fnn.GATConv)):
        return _pyg_conv(module, adj, cached)
    twin = copy.deepcopy(module)
    for name, child in module.named_children():
        setattr(twin, name, pyg_twin(child, adj, cached))
    return twin


def pyg_adjacency(graph: Graph, path: str) -> torch.Tensor:
    """PyG's input for ``graph``: "adj_t" the CSR of A [dst, src] as a torch.sparse CSR
    tensor of float32 ones (PyG's transposed adjacency), "edge_index" int64 [2, E]."""
    if path == "edge_index":
        return graph.edge_index
    if path == "adj_t":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return torch.sparse_csr_tensor(
                graph.indptr,
                graph.indices,
                torch.ones(graph.num_edges, device=graph.device),
                (graph.num_nodes, graph.num_nodes),
                check_invariants=False,
            )
    raise ValueError(f"unknown PyG input {path!r}")
