"""GNN networks built from flashgnn.nn layers (installed as flashgnn.models)."""

from .agnn import AGNN
from .build import MODELS, build_model
from .gat import GAT
from .gcn import GCN

__all__ = ["GCN", "AGNN", "GAT", "MODELS", "build_model"]
