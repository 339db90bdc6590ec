"""AmazonProducts (GraphSAINT): 1,569,960 products, 264M co-purchase edges, 107 labels each.

GraphSAINT's raw layout in ``<root>/amazon-products/``: ``adj_full.npz`` (the symmetric
adjacency, scipy CSR saved by ``scipy.sparse.save_npz``), ``feats.npy`` float [n, 200],
``class_map.json`` {node id: [0/1 x 107]} and ``role.json`` {"tr": [...], "va": [...],
"te": [...]} (train/val/test node ids). Multi-label; scored by micro-F1 as in GraphSAINT.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from .csr import canonical_csr
from .dataset import Dataset, graph_from_csr, index_mask, missing_files
from .files import DataFileError, load_json, load_npy, reading
from .metrics import scorer
from .progress import progress_bar

FILES = ("adj_full.npz", "feats.npy", "class_map.json", "role.json")


def _class_map(path: Path, n: int, progress: bool | None) -> np.ndarray:
    class_map = load_json(path, "GraphSAINT's class_map.json: {node id: [0/1 per label]}")
    if not isinstance(class_map, dict) or not class_map:
        raise DataFileError(f"{path} must map node ids to label lists")
    if len(class_map) != n:
        raise ValueError(f"{path} labels {len(class_map)} nodes; the graph has {n}")
    first = next(iter(class_map.values()))
    if not isinstance(first, list):
        raise ValueError(
            f"{path} maps nodes to {type(first).__name__}; AmazonProducts' labels are 0/1 lists"
        )
    y = np.zeros((n, len(first)), dtype=np.uint8)
    with progress_bar(n, "amazon-products labels", "node", progress) as bar:
        for node, labels in class_map.items():
            y[int(node)] = labels
            bar.update()
    return y


def load_amazon_products(root: Path, progress: bool | None = None) -> Dataset:
    """AmazonProducts from ``<root>/amazon-products`` (GraphSAINT's four files)."""
    folder = Path(root) / "amazon-products"
    absent = [f for f in FILES if not (folder / f).is_file()]
    if absent:
        raise missing_files(folder, absent, "amazon-products (GraphSAINT raw layout)")
    with reading(folder / "adj_full.npz", "the adjacency as scipy.sparse.save_npz writes it"):
        adj = sp.load_npz(folder / "adj_full.npz").tocsr()
    n = adj.shape[0]
    if adj.shape != (n, n):
        raise ValueError(f"adj_full.npz must be square, got shape {adj.shape}")
    indptr, indices = canonical_csr(
        adj.indptr, adj.indices, n, progress=progress, desc="amazon-products"
    )
    del adj
    x = load_npy(folder / "feats.npy", "the node features, float [n, F]", mmap_mode="c")
    if x.shape[0] != n:
        raise ValueError(f"feats.npy has {x.shape[0]} rows; the graph has {n} nodes")
    y = _class_map(folder / "class_map.json", n, progress)
    role = load_json(
        folder / "role.json", 'GraphSAINT\'s role.json: {"tr": [...], "va": [...], "te": [...]}'
    )
    if not isinstance(role, dict) or not all(part in role for part in ("tr", "va", "te")):
        raise DataFileError(f'{folder / "role.json"} must hold the node ids of "tr", "va" and "te"')
    masks = (index_mask(role[part], n) for part in ("tr", "va", "te"))
    return Dataset(
        "amazon-products",
        graph_from_csr(indptr, indices, n),
        torch.from_numpy(x),
        torch.from_numpy(y),
        *masks,
        num_classes=y.shape[1],
        multi_label=True,
        metric="f1_micro",
        scorer=scorer("f1_micro"),
    )
