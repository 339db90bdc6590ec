"""IGB homogeneous (Illinois Graph Benchmark): the paper citation graph, sizes tiny to full.

Layout, as IGB's download scripts unpack it (``<root>/<size>/processed/``):
``paper/node_feat.npy`` float32 [n, 1024], ``paper/node_label_19.npy`` or
``paper/node_label_2K.npy`` (19 or 2983 classes, float32 or integer [n]) and
``paper__cites__paper/edge_index.npy`` int64 [E, 2] (column 0 the citing paper, the
source; column 1 the cited one). For tiny, small and medium (1e5, 1e6, 1e7 nodes) all are
.npy files; for large and full (1e8 and 269,346,174 nodes) the features and labels are
headerless float32 memory maps of known shape, as IGB's own loader reads them.

Split, as IGB's loaders define it: a seeded permutation of the labelled nodes, 60% train,
20% val, the rest test. Every node of tiny..large is labelled; in full only a prefix is
(227,130,858 nodes for 19 classes, 157,675,969 for 2983), the rest get label -1.
Features stay memory-mapped (copy-on-write): nothing is read until used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .csr import edges_to_csr
from .dataset import Dataset, graph_from_csr, missing_files, random_split
from .files import load_npy

IGB_NUM_NODES = {
    "tiny": 100_000,
    "small": 1_000_000,
    "medium": 10_000_000,
    "large": 100_000_000,
    "full": 269_346_174,
}
IGB_FULL_LABELLED = {19: 227_130_858, 2983: 157_675_969}
_LABEL_FILES = {19: "node_label_19.npy", 2983: "node_label_2K.npy"}
FEATURE_DIM = 1024


def _raw_memmap(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """A headerless float32 file as a copy-on-write memory map of ``shape`` (a prefix when
    the file is longer)."""
    need = 4 * int(np.prod(shape))
    if path.stat().st_size < need:
        raise ValueError(f"{path} holds {path.stat().st_size} bytes; float32 {shape} needs {need}")
    return np.memmap(path, dtype=np.float32, mode="c", shape=shape)


def open_igb(
    size: str,
    root: Path,
    num_classes: int = 19,
    num_nodes: int | None = None,
    num_labelled: int | None = None,
):
    """IGB's files of ``size`` opened, nothing read: (features [n, 1024], labels [n], edges
    [E, 2], all memory maps; n; the labelled prefix's length)."""
    if size not in IGB_NUM_NODES:
        raise ValueError(f"unknown IGB size {size!r}; choose one of {tuple(IGB_NUM_NODES)}")
    if num_classes not in _LABEL_FILES:
        raise ValueError(f"IGB has 19 or 2983 classes, got num_classes={num_classes}")
    folder = Path(root) / size / "processed"
    files = [
        "paper/node_feat.npy",
        f"paper/{_LABEL_FILES[num_classes]}",
        "paper__cites__paper/edge_index.npy",
    ]
    absent = [f for f in files if not (folder / f).is_file()]
    if absent:
        raise missing_files(
            folder, absent, f"IGB homogeneous {size} (download it with IGB's scripts)"
        )
    feat_path, label_path, edge_path = (folder / f for f in files)
    if size in ("large", "full"):
        n = IGB_NUM_NODES[size] if num_nodes is None else int(num_nodes)
        x = _raw_memmap(feat_path, (n, FEATURE_DIM))
        labels = _raw_memmap(label_path, (n,))
    else:
        x = load_npy(feat_path, "the paper features, float32 [n, 1024]", mmap_mode="c")
        labels = load_npy(label_path, "the paper labels [n]", mmap_mode="r")
        n = x.shape[0]
        if labels.shape != (n,):
            raise ValueError(
                f"{label_path} has shape {labels.shape}; expected ({n},) to match {feat_path}"
            )
    if num_labelled is None:
        num_labelled = IGB_FULL_LABELLED[num_classes] if size == "full" else n
    edges = load_npy(edge_path, "the citations, int64 [E, 2]", mmap_mode="r")
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise ValueError(
            f"{edge_path} must hold [E, 2] (source, destination) pairs, got shape {edges.shape}"
        )
    return x, labels, edges, n, num_labelled


def load_igb(
    size: str,
    root: Path,
    num_classes: int = 19,
    seed: int = 0,
    undirected: bool = True,
    num_nodes: int | None = None,
    num_labelled: int | None = None,
    progress: bool | None = None,
) -> Dataset:
    """IGB homogeneous ``size`` (tiny, small, medium, large, full) from ``<root>/<size>``.

    undirected: add the reverse of every citation (messages flow both ways).
    num_nodes, num_labelled: the node count and labelled prefix of a large/full copy whose
    files are not of the published size (default: the published counts).
    """
    x, labels, edges, n, num_labelled = open_igb(size, root, num_classes, num_nodes, num_labelled)
    y = np.full(n, -1, dtype=np.int64)
    y[:num_labelled] = labels[:num_labelled]
    indptr, indices = edges_to_csr(
        edges[:, 0], edges[:, 1], n, undirected=undirected, progress=progress, desc=f"igb-{size}"
    )
    masks = random_split(np.arange(num_labelled), n, (0.6, 0.2), seed)
    return Dataset.single_label(
        f"igb-{size}",
        graph_from_csr(indptr, indices, n),
        torch.from_numpy(x),
        torch.from_numpy(y),
        masks,
        num_classes,
    )
