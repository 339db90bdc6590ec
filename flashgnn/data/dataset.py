"""The one object every loader returns, and what loaders share (data root, splits)."""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..graph import Graph
from ..reorder import Reordering
from .metrics import METRICS, check_logits, scorer

_REPO_DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets"


def default_root() -> Path:
    """Where datasets are looked for when no ``root`` is given: ``$FLASHGNN_DATA``; else,
    in a source checkout, the ``../shared/datasets`` folder beside the repository when it
    exists; else ``./datasets``."""
    env = os.environ.get("FLASHGNN_DATA")
    if env:
        return Path(env)
    return _REPO_DATA if _REPO_DATA.is_dir() else Path("datasets")


@dataclass
class Dataset:
    """A node-classification dataset on one graph.

    graph: the Graph, without self-loops (models or configs add them).
    x: float [num_nodes, num_features] node features (float16 or float32, possibly a
       memory map; move and cast it where it is used).
    y: int64 [num_nodes] class ids (-1 = unlabelled), or, when ``multi_label``, uint8/int64
       [num_nodes, num_classes] of 0/1.
    train_mask, val_mask, test_mask: bool [num_nodes].
    num_classes: width of the logits. metric: "accuracy", "f1_micro" or "rocauc".
    scorer: ``(logits [m, C], y [m(, C)]) -> float``, the metric on selected rows.
    """

    name: str
    graph: Graph
    x: Tensor
    y: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    num_classes: int
    multi_label: bool
    metric: str
    scorer: Callable[[Tensor, Tensor], float] = field(repr=False)

    def __post_init__(self):
        n = self.graph.num_nodes
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if self.x.dim() != 2 or self.x.shape[0] != n or not self.x.is_floating_point():
            raise ValueError(f"x must be float [{n}, F], got {self.x.dtype} {tuple(self.x.shape)}")
        expected_y = (n, self.num_classes) if self.multi_label else (n,)
        if tuple(self.y.shape) != expected_y:
            raise ValueError(f"y must have shape {expected_y}, got {tuple(self.y.shape)}")
        for split in ("train_mask", "val_mask", "test_mask"):
            mask = getattr(self, split)
            if mask.dtype != torch.bool or tuple(mask.shape) != (n,):
                raise ValueError(
                    f"{split} must be bool [{n}], got {mask.dtype} {tuple(mask.shape)}"
                )
            if not bool(mask.any()):
                raise ValueError(f"{split} selects no node")
        self._check_labels()

    @classmethod
    def single_label(
        cls, name: str, graph: Graph, x: Tensor, y: Tensor, masks, num_classes: int
    ) -> Dataset:
        """A dataset of one class id per node (y int64 [num_nodes]), scored by accuracy;
        ``masks`` is (train_mask, val_mask, test_mask)."""
        return cls(
            name,
            graph,
            x,
            y,
            *masks,
            num_classes=num_classes,
            multi_label=False,
            metric="accuracy",
            scorer=scorer("accuracy"),
        )

    def _check_labels(self) -> None:
        """Class ids in [0, num_classes) or -1, and every node of a split labelled (0/1 for
        multi-label): a label out of range would fail deep in the loss, or on a GPU corrupt
        it."""
        where = f"dataset {self.name!r}"
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, numbers.Integral):
            raise ValueError(f"{where}: num_classes must be an integer, got {self.num_classes!r}")
        if self.num_classes < 1:
            raise ValueError(f"{where}: num_classes must be >= 1, got {self.num_classes}")
        y = self.y
        if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise ValueError(f"{where}: the labels y must be integers, got {y.dtype}")
        low, high = (int(v) for v in torch.aminmax(y))
        if self.multi_label:
            if low < 0 or high > 1:
                found = high if high > 1 else low
                raise ValueError(f"{where}: multi-label y must hold 0 or 1, found {found}")
            return
        if low < -1 or high >= self.num_classes:
            bad = high if high >= self.num_classes else low
            node = int((y == bad).nonzero()[0, 0])
            raise ValueError(
                f"{where}: labels must be class ids in [0, num_classes={self.num_classes}) or "
                f"-1 (unlabelled); node {node} has label {bad}"
            )
        if low == -1:
            unlabelled = y < 0
            for split in ("train_mask", "val_mask", "test_mask"):
                chosen = getattr(self, split) & unlabelled
                if bool(chosen.any()):
                    raise ValueError(
                        f"{where}: {split} selects {int(chosen.sum())} unlabelled nodes "
                        f"(label -1), node {int(chosen.nonzero()[0, 0])} the first"
                    )

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    def evaluate(
        self, logits: Tensor, y: Tensor | None = None, mask: Tensor | None = None
    ) -> float:
        """The dataset's metric of ``logits`` [num_nodes, num_classes] against ``y`` (default
        the dataset's labels) on the nodes of ``mask`` (default all)."""
        check_logits(logits, self.num_classes)
        y = self.y if y is None else y
        if mask is not None:
            mask = mask.to(logits.device)
            logits, y = logits[mask], y.to(logits.device)[mask]
        return self.scorer(logits, y.to(logits.device))

    def reorder(self, method: str, device=None) -> tuple[Dataset, Reordering]:
        """(this dataset with its nodes renumbered by ``method``, the ``Reordering``): the graph
        of ``Graph.reorder(method, device)`` (the order computed on ``device``), its features,
        labels and masks moved to the new order on their own devices. Outputs of a model on
        the new dataset come back to this one's node order with ``Reordering.restore``."""
        graph, reordering = self.graph.reorder(method, device)
        if reordering.method == "none":
            return self, reordering
        moved = {
            name: reordering.apply_to_nodes(getattr(self, name))
            for name in ("x", "y", "train_mask", "val_mask", "test_mask")
        }
        return replace(self, graph=graph, **moved), reordering

    def summary(self) -> dict:
        """Sizes and split counts, JSON-ready."""
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.graph.num_edges,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "multi_label": self.multi_label,
            "metric": self.metric,
            **{f"num_{s}": int(getattr(self, f"{s}_mask").sum()) for s in ("train", "val", "test")},
        }


def random_split(labelled: np.ndarray, num_nodes: int, ratios: tuple[float, float], seed: int):
    """Train/val/test masks (bool tensors [num_nodes]) from a seeded permutation of the node
    ids ``labelled``: the first ``ratios[0]`` of it train, the next ``ratios[1]`` val, the rest
    test."""
    train_ratio, val_ratio = ratios
    if not (0 < train_ratio and 0 < val_ratio and train_ratio + val_ratio < 1):
        raise ValueError(
            f"split ratios must be positive and leave room for a test set, got {ratios}"
        )
    order = np.asarray(labelled)[np.random.default_rng(seed).permutation(len(labelled))]
    n_train, n_val = int(len(order) * train_ratio), int(len(order) * val_ratio)
    return (
        index_mask(order[:n_train], num_nodes),
        index_mask(order[n_train : n_train + n_val], num_nodes),
        index_mask(order[n_train + n_val :], num_nodes),
    )


def index_mask(index, num_nodes: int) -> Tensor:
    """bool [num_nodes], True at ``index``."""
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[torch.from_numpy(np.array(index, dtype=np.int64))] = True
    return mask


def missing_files(directory: Path, names, what: str) -> FileNotFoundError:
    """The error a loader raises when files are not where the dataset's layout puts them."""
    listing = "\n".join(f"  {directory / n}" for n in names)
    return FileNotFoundError(f"{what}: expected these files under {directory}:\n{listing}")


def graph_from_csr(indptr: np.ndarray, indices: np.ndarray, num_nodes: int) -> Graph:
    """A Graph of a canonical CSR (rows = destinations; see ``csr.canonical_csr``)."""
    return Graph(torch.from_numpy(indptr), torch.from_numpy(np.asarray(indices)), num_nodes)
