"""ogbn-arxiv, ogbn-products, ogbn-proteins and ogbn-papers100M, read with the ``ogb`` package
from its layout.

``<root>/ogbn_<name>/`` holds what ogb's download unpacks: ``RELEASE_v<version>.txt``,
``raw/*.csv.gz`` (ogbn-papers100M: ogb's binary ``raw/data.npz`` and ``raw/node-label.npz``)
and ``split/<split>/{train,valid,test}.csv.gz``. The raw files are parsed by ogb's own readers
(``ogb.io.read_graph_raw``, which also adds ogb's inverse edges) and
scores come from ``ogb.nodeproppred.Evaluator``. ogb caches its parse as
``processed/data_processed``, a pickle that torch >= 2.6 cannot read with its default
``weights_only=True`` (pickle protocol 4 frames, NumPy objects), and that cannot be
memory-mapped; it is never read here. Instead the converted graph, features and labels go
to ``processed/flashgnn-<directed|undirected>/*.npy`` once, and later loads memory-map them.

As OGB's examples do: ogbn-arxiv and ogbn-papers100M are made undirected (papers100M's
unlabelled nodes, NaN in ogb's file, get label -1); ogbn-products and ogbn-proteins get
both directions from ogb; ogbn-proteins' node features are the mean of the features of
each node's incoming edges (8 per edge) and its 112 binary tasks are scored by mean
ROC-AUC.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from .csr import edges_to_csr
from .dataset import Dataset, graph_from_csr, index_mask, missing_files
from .files import load_npy, reading
from .metrics import OGBEvaluator

OGB_NAMES = ("ogbn-arxiv", "ogbn-products", "ogbn-proteins", "ogbn-papers100M")
_UNDIRECTED = ("ogbn-arxiv", "ogbn-papers100M")  # the graphs OGB's examples symmetrise
_CACHED = ("indptr", "indices", "x", "y")


def _meta(name: str):
    """ogb's description of ``name`` (its master.csv column)."""
    import pandas as pd

    try:
        import ogb.nodeproppred as nodeproppred
    except ImportError as e:
        raise ImportError(
            "the OGB datasets need the ogb package: pip install 'flashgnn[data]'"
        ) from e
    master = Path(nodeproppred.__file__).parent / "master.csv"
    return pd.read_csv(master, index_col=0, keep_default_na=False)[name]


def _split_list(text: str) -> list[str]:
    return [] if text == "None" else text.split(",")


def _expected_files(meta) -> list[str]:
    """The files ogb's download unpacks that are read here, relative to the dataset folder."""
    files = [f"RELEASE_v{meta['version']}.txt"]
    split = [f"split/{meta['split']}/{part}.csv.gz" for part in ("train", "valid", "test")]
    if meta["binary"] == "True":
        return files + ["raw/data.npz", "raw/node-label.npz", *split]
    files += [f"raw/{f}.csv.gz" for f in ("edge", "num-node-list", "num-edge-list", "node-label")]
    if meta["has_node_attr"] == "True":
        files.append("raw/node-feat.csv.gz")
    if meta["has_edge_attr"] == "True":
        files.append("raw/edge-feat.csv.gz")
    files += [f"raw/{f}.csv.gz" for f in _split_list(meta["additional node files"])]
    return files + split


def _absent(folder: Path, files: list[str]) -> list[str]:
    # ogb's reader renames proteins' species.csv.gz to node_species.csv.gz
    return [
        f
        for f in files
        if not ((folder / f).is_file() or (folder / f.replace("node_species", "species")).is_file())
    ]


def _download(meta, root: Path, folder: Path) -> None:
    """Fetch and unpack the dataset with ogb's own download helpers, as its dataset classes do."""
    from ogb.utils.url import download_url, extract_zip

    root.mkdir(parents=True, exist_ok=True)
    archive = download_url(meta["url"], str(root))
    extract_zip(archive, str(root))
    Path(archive).unlink()
    shutil.move(str(root / meta["download_name"]), str(folder))


def _mean_incoming(edge_index: np.ndarray, edge_feat: np.ndarray, num_nodes: int) -> np.ndarray:
    """float32 [num_nodes, F]: the mean feature of each node's incoming edges (0 if none)."""
    dst = edge_index[1]
    degree = np.maximum(np.bincount(dst, minlength=num_nodes), 1)
    columns = [
        np.bincount(dst, weights=edge_feat[:, j], minlength=num_nodes)
        for j in range(edge_feat.shape[1])
    ]
    return (np.stack(columns, axis=1) / degree[:, None]).astype(np.float32)


def _convert(name: str, meta, folder: Path, undirected: bool, progress) -> dict[str, np.ndarray]:
    """Parse the raw files with ogb's readers into indptr, indices, x and y."""
    import pandas as pd
    from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw

    if meta["binary"] == "True":
        graph = read_binary_graph_raw(str(folder / "raw"))[0]
        with np.load(folder / "raw" / "node-label.npz") as f:
            label = f["node_label"].reshape(-1)
        n = int(graph["num_nodes"])
        indptr, indices = edges_to_csr(
            *graph["edge_index"], n, undirected=undirected, progress=progress, desc=name
        )
        x = graph["node_feat"]
        return {
            "indptr": indptr,
            "indices": indices,
            # 16-bit features stay so: papers100M's are 111M x 128
            "x": x if x.dtype == np.float16 else x.astype(np.float32, copy=False),
            "y": np.where(np.isnan(label), -1, label).astype(np.int64),
        }
    graph = read_csv_graph_raw(
        str(folder / "raw"),
        add_inverse_edge=meta["add_inverse_edge"] == "True",
        additional_node_files=_split_list(meta["additional node files"]),
        additional_edge_files=_split_list(meta["additional edge files"]),
    )[0]
    labels = pd.read_csv(
        folder / "raw" / "node-label.csv.gz", compression="gzip", header=None
    ).values
    n = int(graph["num_nodes"])
    edge_index = graph["edge_index"]
    indptr, indices = edges_to_csr(
        edge_index[0], edge_index[1], n, undirected=undirected, progress=progress, desc=name
    )
    if name == "ogbn-proteins":
        x, y = _mean_incoming(edge_index, graph["edge_feat"], n), labels.astype(np.uint8)
    else:
        x, y = graph["node_feat"].astype(np.float32, copy=False), labels[:, 0].astype(np.int64)
    return {"indptr": indptr, "indices": indices, "x": x, "y": y}


def _cached_arrays(name, meta, folder: Path, undirected: bool, progress) -> dict[str, np.ndarray]:
    """The converted arrays, memory-mapped from the cache (built on the first call)."""
    cache = folder / "processed" / f"flashgnn-{'undirected' if undirected else 'directed'}"
    if not all((cache / f"{key}.npy").is_file() for key in _CACHED):
        with reading(folder / "raw", "ogb's raw files (delete the folder to fetch them again)"):
            arrays = _convert(name, meta, folder, undirected, progress)
        partial = cache.with_name(cache.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for key in _CACHED:
            np.save(partial / f"{key}.npy", arrays[key])
        shutil.rmtree(cache, ignore_errors=True)
        partial.rename(cache)  # complete or absent, never half written
    expected = f"flashgnn's cache of {name} (delete {cache} to rebuild it)"
    return {key: load_npy(cache / f"{key}.npy", expected, mmap_mode="c") for key in _CACHED}


def load_ogb(
    name: str,
    root: Path,
    download: bool = True,
    undirected: bool | None = None,
    progress: bool | None = None,
) -> Dataset:
    """``name`` (one of OGB_NAMES) from ``<root>/<name with _>``; with ``download``, ogb
    fetches it when the folder does not exist. ``undirected`` (default: True for ogbn-arxiv
    only) adds the reverse of every edge."""
    import pandas as pd

    if name not in OGB_NAMES:
        raise ValueError(f"unknown OGB dataset {name!r}; choose one of {OGB_NAMES}")
    meta = _meta(name)
    root = Path(root)
    folder = root / name.replace("-", "_")
    files = _expected_files(meta)
    if download and not folder.exists():
        try:
            _download(meta, root, folder)
        except OSError as e:  # no network, or a download cut short
            raise missing_files(folder, files, f"{name}: ogb could not download it ({e})") from e
    absent = _absent(folder, files)
    if absent:
        hint = (
            "an incomplete or outdated copy: delete the folder to download it again"
            if folder.exists()
            else "pass download=True to let ogb fetch it"
        )
        raise missing_files(folder, absent, f"{name} (ogb layout; {hint})")
    if undirected is None:
        undirected = name in _UNDIRECTED
    arrays = _cached_arrays(name, meta, folder, undirected, progress)
    n = len(arrays["indptr"]) - 1
    split_dir = folder / "split" / meta["split"]
    masks = (
        index_mask(
            pd.read_csv(split_dir / f"{part}.csv.gz", compression="gzip", header=None).values[:, 0],
            n,
        )
        for part in ("train", "valid", "test")
    )
    evaluator = OGBEvaluator(name)
    y = torch.from_numpy(arrays["y"])
    multi_label = name == "ogbn-proteins"
    return Dataset(
        name,
        graph_from_csr(arrays["indptr"], arrays["indices"], n),
        torch.from_numpy(arrays["x"]),
        y,
        *masks,
        num_classes=y.shape[1] if multi_label else int(meta["num classes"]),
        multi_label=multi_label,
        metric=evaluator.metric,
        scorer=evaluator,
    )
