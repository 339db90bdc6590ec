"""Graphs in the .npz format of the shared datasets folder (cora, citeseer, twitch_*, ...).

One file ``<root>/<name>.npz`` (np.load, no pickle): ``indptr``/``indices`` (symmetric CSR,
sorted, no duplicates, no self-loops), ``num_nodes``, features ``x`` (dense float16) or
``x_indptr``/``x_indices``/``x_shape`` (sparse binary), labels ``y`` (int64, -1 unlabelled)
with ``num_classes``, or ``y_multi`` [n, C]; the split as ``train_mask``/``val_mask``/
``test_mask`` [n] or ten splits ``train_masks``/... [10, n]. A file without a split gets a
seeded random 60/20/20 split of its labelled nodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .dataset import Dataset, graph_from_csr, missing_files, random_split
from .metrics import scorer

_SPLITS = ("train", "val", "test")


def _features(d) -> torch.Tensor:
    if "x" in d.files:
        return torch.from_numpy(d["x"])
    if "x_indptr" in d.files:
        n, f = (int(v) for v in d["x_shape"])
        x = np.zeros((n, f), dtype=np.float16)
        rows = np.repeat(np.arange(n), np.diff(d["x_indptr"]))
        x[rows, d["x_indices"]] = 1
        return torch.from_numpy(x)
    raise ValueError(
        "this graph has no node features (no 'x' or 'x_indptr' key), so it cannot be "
        f"used for node classification; keys: {sorted(d.files)}"
    )


def _labels(d):
    """(y, num_classes, multi_label)."""
    if "y_multi" in d.files:
        y = torch.from_numpy(d["y_multi"])
        return y, y.shape[1], True
    if "y" in d.files:
        y = torch.from_numpy(d["y"].astype(np.int64))
        num_classes = int(d["num_classes"]) if "num_classes" in d.files else int(y.max()) + 1
        return y, num_classes, False
    raise ValueError(f"this graph has no class labels ('y' or 'y_multi'); keys: {sorted(d.files)}")


def _split(d, labelled: np.ndarray, num_nodes: int, split: int, seed: int):
    if "train_mask" in d.files:
        return tuple(torch.from_numpy(d[f"{s}_mask"].astype(bool)) for s in _SPLITS)
    if "train_masks" in d.files:
        count = d["train_masks"].shape[0]
        if not 0 <= split < count:
            raise ValueError(
                f"split must be in [0, {count}) for this file's {count} splits, got {split}"
            )
        return tuple(torch.from_numpy(d[f"{s}_masks"][split].astype(bool)) for s in _SPLITS)
    return random_split(labelled, num_nodes, (0.6, 0.2), seed)


def load_npz(name: str, root: Path, split: int = 0, seed: int = 0) -> Dataset:
    """Graph ``name`` from ``<root>/<name>.npz``. ``split``: which of ten standard splits
    (files that have them); ``seed``: the random split of files that have none."""
    path = Path(root) / f"{name}.npz"
    if not path.is_file():
        raise missing_files(Path(root), [f"{name}.npz"], f"graph {name!r} (shared .npz format)")
    with np.load(path) as d:
        n = int(d["num_nodes"])
        graph = graph_from_csr(d["indptr"].astype(np.int64), d["indices"], n)
        x = _features(d)
        y, num_classes, multi_label = _labels(d)
        labelled = np.arange(n) if multi_label else np.flatnonzero(y.numpy() >= 0)
        masks = _split(d, labelled, n, split, seed)
    metric = "f1_micro" if multi_label else "accuracy"
    return Dataset(
        name,
        graph,
        x,
        y,
        *masks,
        num_classes=num_classes,
        multi_label=multi_label,
        metric=metric,
        scorer=scorer(metric),
    )
