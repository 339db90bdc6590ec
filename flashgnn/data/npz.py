"""Graphs in the .npz format of the shared datasets folder (cora, citeseer, twitch_*, ...).

One file ``<root>/<name>.npz`` (np.load, no pickle): ``indptr``/``indices`` (symmetric CSR,
sorted, no duplicates, no self-loops), ``num_nodes``, features ``x`` (dense float16) or
``x_indptr``/``x_indices``/``x_shape`` (sparse binary), labels ``y`` (int64, -1 unlabelled)
with ``num_classes``, or ``y_multi`` [n, C]; the split as ``train_mask``/``val_mask``/
``test_mask`` [n] or ten splits ``train_masks``/... [10, n]. A file without a split gets a
seeded random 60/20/20 split of its labelled nodes. The name may be spelled as
``names.name_key`` allows ("Cora", "twitch-de").
"""

from __future__ import annotations

import numbers
from pathlib import Path

import numpy as np
import torch

from .dataset import Dataset, graph_from_csr, missing_files, random_split
from .files import DataFileError, read_npz
from .metrics import scorer
from .names import BUILTIN, name_key

_SPLITS = ("train", "val", "test")
LAYOUT = (
    "the shared .npz graph layout: indptr, indices, num_nodes, features (x, or x_indptr, "
    "x_indices and x_shape), labels (y, or y_multi) and optionally the split "
    "(see flashgnn.data.npz)"
)


def find_npz(root: Path, name: str) -> Path:
    """``<root>/<name>.npz``, else the one .npz file of ``root`` whose name ``name`` spells."""
    root = Path(root)
    exact = root / f"{name}.npz"
    if exact.is_file():
        return exact
    graphs = sorted(root.glob("*.npz")) if root.is_dir() else []
    matches = [p for p in graphs if name_key(p.stem) == name_key(name)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(
            f"dataset name {name!r} matches several graphs in {root}: "
            f"{[p.stem for p in matches]}; give the file name exactly"
        )
    error = missing_files(root, [f"{name}.npz"], f"graph {name!r} (shared .npz format)")
    there = ", ".join(p.stem for p in graphs) if graphs else "none"
    raise FileNotFoundError(
        f"{error}\nthe .npz graphs there: {there}\nthe built-in datasets: {', '.join(BUILTIN)}"
    )


def _features(d, path: Path) -> torch.Tensor:
    if "x" in d:
        return torch.from_numpy(d["x"])
    if "x_indptr" in d:
        n, f = (int(v) for v in d["x_shape"])
        x = np.zeros((n, f), dtype=np.float16)
        rows = np.repeat(np.arange(n), np.diff(d["x_indptr"]))
        x[rows, d["x_indices"]] = 1
        return torch.from_numpy(x)
    raise DataFileError(
        f"{path} has no node features (no 'x' or 'x_indptr' array), so it cannot be used for "
        f"node classification; it holds {sorted(d)}"
    )


def _labels(d, path: Path):
    """(y, num_classes, multi_label)."""
    if "y_multi" in d:
        y = torch.from_numpy(d["y_multi"])
        return y, y.shape[1], True
    if "y" in d:
        y = torch.from_numpy(d["y"].astype(np.int64))
        num_classes = int(d["num_classes"]) if "num_classes" in d else int(y.max()) + 1
        return y, num_classes, False
    raise DataFileError(
        f"{path} has no class labels (no 'y' or 'y_multi' array); it holds {sorted(d)}"
    )


def _split(d, path: Path, labelled: np.ndarray, num_nodes: int, split, seed: int):
    if isinstance(split, bool) or not isinstance(split, numbers.Integral):
        raise ValueError(
            f"split must be an integer, the index of one of the file's splits, got {split!r}"
        )
    if "train_masks" in d:
        count = d["train_masks"].shape[0]
        if not 0 <= split < count:
            raise ValueError(
                f"split must be in [0, {count}) for the {count} splits of {path}, got {split}"
            )
        return tuple(torch.from_numpy(d[f"{s}_masks"][split].astype(bool)) for s in _SPLITS)
    if split != 0:
        held = (
            "one split (train_mask, val_mask, test_mask)"
            if "train_mask" in d
            else "no split: its labelled nodes are split at random by seed"
        )
        raise ValueError(f"split={split!r} is not a split of {path}, which has {held}; use 0")
    if "train_mask" in d:
        return tuple(torch.from_numpy(d[f"{s}_mask"].astype(bool)) for s in _SPLITS)
    return random_split(labelled, num_nodes, (0.6, 0.2), seed)


def load_npz(name: str, root: Path, split: int = 0, seed: int = 0) -> Dataset:
    """Graph ``name`` from ``<root>/<name>.npz``. ``split``: which of ten standard splits
    (files that have them; 0 for the others); ``seed``: the random split of files that have
    none."""
    path = find_npz(root, name)
    d = read_npz(path, ("indptr", "indices", "num_nodes"), LAYOUT)
    try:
        n = int(d["num_nodes"])
        graph = graph_from_csr(d["indptr"].astype(np.int64), d["indices"], n)
        x = _features(d, path)
        y, num_classes, multi_label = _labels(d, path)
    except (ValueError, TypeError, IndexError) as e:
        if isinstance(e, DataFileError):
            raise
        raise DataFileError(f"{path} does not hold {LAYOUT}: {e}") from e
    labelled = np.arange(n) if multi_label else np.flatnonzero(y.numpy() >= 0)
    masks = _split(d, path, labelled, n, split, seed)
    metric = "f1_micro" if multi_label else "accuracy"
    return Dataset(
        path.stem,
        graph,
        x,
        y,
        *masks,
        num_classes=num_classes,
        multi_label=multi_label,
        metric=metric,
        scorer=scorer(metric),
    )
