"""A rank's own rows of a dataset, read without the rest: what a full-graph run of several
processes feeds ``flashgnn.distributed.FullGraphPartition.from_local_rows`` when no rank can
hold the whole graph.

Two sources read this way: IGB's files (``igb-<size>``), whose features and labels are
memory maps read row by row and whose [E, 2] edge list is read in chunks, keeping the edges
into the rank's nodes (and, undirected, out of them: their reverses); and the generated
IGB-like graphs (``generated-igb-medium``, ``generated-igb-large``, ``generators.IGBLike``),
whose rows come block by block. Under a contiguous partition a rank owns the node ids
``own_range(n, rank, world)``, the ``rank``-th piece of ``arange(n).tensor_split(world)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .dataset import Dataset, default_root, random_split
from .generators import IGBLike, _sorted_unique

GENERATED_IGB = {"medium": (10_000_000, 121_000_000), "large": (100_000_000, 1_200_000_000)}
"""Sizes of the generated IGB-like graphs: (nodes, edges asked for), IGB's medium and large."""
IGB_CHUNK_EDGES = 1 << 24
"""Edges of IGB's edge list read at a time."""


@dataclass(frozen=True)
class DatasetInfo:
    """What a run reports of a dataset it may never hold whole."""

    name: str
    num_nodes: int
    num_features: int
    num_classes: int
    multi_label: bool
    metric: str
    split_sizes: tuple[int, int, int]

    @classmethod
    def of(cls, dataset: Dataset) -> DatasetInfo:
        sizes = tuple(int(getattr(dataset, f"{s}_mask").sum()) for s in ("train", "val", "test"))
        return cls(
            dataset.name,
            dataset.num_nodes,
            dataset.num_features,
            dataset.num_classes,
            dataset.multi_label,
            dataset.metric,
            sizes,
        )

    def summary(self, num_edges: int | None = None) -> dict:
        """Like ``Dataset.summary``; ``num_edges`` where the caller counted them."""
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": num_edges,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "multi_label": self.multi_label,
            "metric": self.metric,
            **{f"num_{s}": k for s, k in zip(("train", "val", "test"), self.split_sizes)},
        }


@dataclass
class LocalRows:
    """The rows of the nodes ``own`` of a graph of ``info.num_nodes`` nodes.

    own: int64 [m] global node ids, ascending. indptr int64 [m + 1], indices int64 [nnz]:
    the CSR of own rows of A[dst, src], columns the global source ids, sorted and distinct
    within a row, no self-loops. x: float16/float32 [m, F]; y: int64 [m] (-1 unlabelled);
    train_mask, val_mask, test_mask: bool [m].
    """

    info: DatasetInfo
    own: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor


def own_range(num_nodes: int, rank: int, world: int) -> tuple[int, int]:
    """[lo, hi): rank ``rank``'s node ids under a contiguous partition into ``world`` parts
    (sizes differ by one at most, the larger first, as ``tensor_split``)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")
    q, r = divmod(num_nodes, world)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (rank < r)


def _family(name: str) -> tuple[str, str] | None:
    key = name.lower().replace("_", "-")
    for prefix in ("generated-igb-", "igb-"):
        if key.startswith(prefix):
            return prefix[:-1], key[len(prefix) :]
    return None


def supports(name: str) -> bool:
    """Whether dataset ``name`` can be read rank by rank."""
    return _family(name) is not None


def load(section: dict, rank: int, world: int, workers: int = 1, features_out=None) -> LocalRows:
    """Rank ``rank``'s rows (of ``world``, contiguous) of the dataset a config's dataset
    section names (``name``, ``root`` and the loader's keywords). A generated graph is built
    ``workers`` blocks at a time, its features written into ``features_out(shape)`` when it
    gives an array (``IGBLike.rows_of``)."""
    kw = {k: v for k, v in section.items() if k != "name"}
    family = _family(section["name"])
    if family is None:
        raise ValueError(f"dataset {section['name']!r} is not read rank by rank")
    kind, size = family
    if kind == "generated-igb":
        return generated_igb_rows(
            size, rank, world, workers=workers, features_out=features_out, **kw
        )
    root = kw.pop("root", None)
    return igb_rows(size, default_root() if root is None else Path(root), rank, world, **kw)


def _tensors(info, own, indptr, indices, x, y, split_masks) -> LocalRows:
    return LocalRows(
        info,
        torch.from_numpy(np.asarray(own, dtype=np.int64)),
        torch.from_numpy(indptr),
        torch.from_numpy(indices),
        torch.from_numpy(np.ascontiguousarray(x)),
        torch.from_numpy(y),
        *(torch.from_numpy(m) for m in split_masks),
    )


def generated_igb(
    size: str, num_nodes: int | None = None, num_edges: int | None = None, **kw
) -> IGBLike:
    """The generated IGB-like graph of ``size`` ("medium", "large"; ``num_nodes`` /
    ``num_edges`` override its size, the rest are ``IGBLike``'s keywords)."""
    if size not in GENERATED_IGB:
        raise ValueError(
            f"unknown generated IGB size {size!r}; choose one of {list(GENERATED_IGB)}"
        )
    n, e = GENERATED_IGB[size]
    return IGBLike(
        n if num_nodes is None else num_nodes, e if num_edges is None else num_edges, **kw
    )


def generated_igb_nodes(
    size: str, graph: IGBLike, own: np.ndarray, workers: int = 1, features_out=None
) -> LocalRows:
    """The rows of the nodes ``own`` (ascending ids) of ``graph``, the generated IGB-like
    graph of ``size`` (``workers``, ``features_out``: as ``IGBLike.rows_of`` takes them)."""
    indptr, indices, labels, split, x = graph.rows_of(own, True, workers, features_out)
    info = DatasetInfo(
        f"generated-igb-{size}",
        graph.n,
        graph.num_features,
        graph.num_classes,
        False,
        "accuracy",
        graph.split_sizes(),
    )
    masks = [split == k for k in range(3)]
    return _tensors(info, own, indptr, indices, x, labels, masks)


def generated_igb_rows(
    size: str, rank: int, world: int, workers: int = 1, features_out=None, **kw
) -> LocalRows:
    """Rank ``rank``'s contiguous rows of the generated IGB-like graph of ``size``
    (``generated_igb``'s keywords; ``workers``, ``features_out``: ``IGBLike.rows_of``'s)."""
    graph = generated_igb(size, **kw)
    lo, hi = own_range(graph.n, rank, world)
    own = np.arange(lo, hi, dtype=np.int64)
    return generated_igb_nodes(size, graph, own, workers, features_out)


def generated_igb_structure(
    section: dict, workers: int = 1
) -> tuple[IGBLike, str, np.ndarray, np.ndarray]:
    """(graph, size, indptr, indices) of every row of the generated IGB-like graph a config's
    dataset section names, without features (``workers`` blocks at a time): what a partition
    other than contiguous ranges is computed from, on every rank."""
    family = _family(section["name"])
    if family is None or family[0] != "generated-igb":
        raise ValueError(f"dataset {section['name']!r} is not a generated IGB-like graph")
    size = family[1]
    graph = generated_igb(size, **{k: v for k, v in section.items() if k != "name"})
    indptr, indices, *_ = graph.rows(0, graph.n, features=False, workers=workers)
    return graph, size, indptr, indices


def igb_rows(
    size: str,
    root: Path,
    rank: int,
    world: int,
    num_classes: int = 19,
    seed: int = 0,
    undirected: bool = True,
    num_nodes: int | None = None,
    num_labelled: int | None = None,
    own: np.ndarray | None = None,
    progress: bool | None = None,
) -> LocalRows:
    """Rank ``rank``'s rows of IGB homogeneous ``size`` (``load_igb``'s keywords), the same
    rows as ``load_igb``'s graph has for them: features and labels read from the memory
    maps (a slice, or a gather for ``own``, sorted global ids of another partition), edges
    from the [E, 2] list ``IGB_CHUNK_EDGES`` at a time, keeping those into own nodes."""
    from .igb import open_igb

    del progress  # the chunks are read without a bar
    x_map, labels_map, edges, n, num_labelled = open_igb(
        size, root, num_classes, num_nodes, num_labelled
    )
    if own is None:
        lo, hi = own_range(n, rank, world)
        own = np.arange(lo, hi, dtype=np.int64)
        x, labels = x_map[lo:hi], labels_map[lo:hi]
    else:
        own = np.asarray(own, dtype=np.int64)
        if own.size and (np.any(np.diff(own) <= 0) or own[0] < 0 or own[-1] >= n):
            raise ValueError(f"own must be sorted distinct node ids in [0, {n})")
        x, labels = x_map[own], labels_map[own]
    y = np.where(own < num_labelled, labels, -1).astype(np.int64)
    indptr, indices = _own_in_edges(edges, own, n, undirected)
    masks = random_split(np.arange(num_labelled), n, (0.6, 0.2), seed)
    sizes = tuple(int(m.sum()) for m in masks)
    info = DatasetInfo(f"igb-{size}", n, x_map.shape[1], num_classes, False, "accuracy", sizes)
    own_masks = [m.numpy()[own] for m in masks]
    return _tensors(info, own, indptr, indices, x, y, own_masks)


def read_edge_chunk(edges, start: int, stop: int) -> np.ndarray:
    """int64 [stop - start, 2]: one chunk of the memory-mapped edge list, read now."""
    return np.asarray(edges[start:stop], dtype=np.int64)


def _own_in_edges(edges, own: np.ndarray, n: int, undirected: bool):
    """CSR (indptr, indices) of the rows ``own`` (sorted ids) from the [E, 2] (src, dst) list
    ``edges``, chunk by chunk; with ``undirected`` each edge counts in both directions."""
    keys = []
    for start in range(0, edges.shape[0], IGB_CHUNK_EDGES):
        chunk = read_edge_chunk(edges, start, min(edges.shape[0], start + IGB_CHUNK_EDGES))
        if chunk.size and (chunk.min() < 0 or chunk.max() >= n):
            raise ValueError(f"an edge endpoint is out of range [0, {n})")
        directions = ((chunk[:, 1], chunk[:, 0]), (chunk[:, 0], chunk[:, 1]))
        for rows, cols in directions[: 2 if undirected else 1]:
            pos = np.searchsorted(own, rows)
            hit = pos < own.size
            hit[hit] = own[pos[hit]] == rows[hit]
            hit &= rows != cols
            keys.append(pos[hit] * n + cols[hit])
    keys = _sorted_unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
    rows, cols = np.divmod(keys, n)
    indptr = np.zeros(own.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=own.size), out=indptr[1:])
    return indptr, cols


def load_generated_igb(size: str, **kw) -> Dataset:
    """The whole generated IGB-like graph of ``size`` as a Dataset (one rank's rows of one)."""
    from ..graph import Graph

    rows = generated_igb_rows(size, 0, 1, **kw)
    return Dataset.single_label(
        rows.info.name,
        Graph(rows.indptr, rows.indices, rows.info.num_nodes),
        rows.x,
        rows.y,
        (rows.train_mask, rows.val_mask, rows.test_mask),
        rows.info.num_classes,
    )
