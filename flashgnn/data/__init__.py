"""Datasets for node classification: OGB, IGB, AmazonProducts, the shared .npz graphs and a
generated graph, all returned as one ``Dataset``.

``load_dataset(name, root=None, **kw)``; ``root`` defaults to ``default_root()``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .dataset import Dataset, default_root
from .files import DataFileError
from .names import (
    AMAZON_PRODUCTS,
    BUILTIN,
    GENERATED_IGB_NAMES,
    SYNTHETIC,
    builtin_name,
    family_name,
)


def load_dataset(
    name: str, root: str | Path | None = None, *, normalize_features: bool = False, **kw
) -> Dataset:
    """Load dataset ``name``, in any spelling of it (``names``: "AmazonProducts",
    "amazon_products" and "amazon-products" are one dataset):

    - "ogbn-arxiv", "ogbn-products", "ogbn-proteins", "ogbn-papers100M": ogb's layout under
      ``root``; keyword arguments ``download`` (default True: ogb fetches absent files),
      ``undirected``.
    - "igb-tiny", "igb-small", "igb-medium", "igb-large", "igb-full": IGB's layout
      ``<root>/<size>/processed``; ``num_classes`` (19 or 2983), ``seed``, ``undirected``.
    - "amazon-products": GraphSAINT's four files in ``<root>/amazon-products``.
    - "synthetic": a generated graph, nothing read; see ``synthetic.load_synthetic``.
    - "generated-igb-medium", "generated-igb-large": generated IGB-like power-law graphs
      (``generators.IGBLike``: 10M nodes and about 121M edges, 100M and about 1.2B, 1024
      float16 features), nothing read; ``num_nodes``, ``num_edges``, ``seed``, ...
    - any other name: ``<root>/<name>.npz`` in the shared datasets' format; ``split``
      (one of its ten splits, default 0), ``seed``.

    Every loader accepts ``progress`` (True/False, default: bars on a terminal) except the
    .npz one, whose graphs are small. ``normalize_features=True`` (any dataset) divides
    every feature row by its sum, as the GCN paper does with bag-of-words features; the
    features are then a float32 copy.

    A file that cannot be read raises DataFileError (a ValueError) naming it; missing files
    raise FileNotFoundError listing the layout's files.
    """
    dataset = _load(name, root, **kw)
    if normalize_features:
        dataset.x = row_normalized(dataset.x)
    return dataset


def row_normalized(x: torch.Tensor) -> torch.Tensor:
    """float32 x with each row divided by its sum (rows summing to 0 are left at 0)."""
    x = x.to(torch.float32)
    total = x.sum(dim=1, keepdim=True)
    return x / torch.where(total == 0, torch.ones_like(total), total)


def _load(name: str, root, **kw) -> Dataset:
    if not isinstance(name, str) or not name:
        raise TypeError(f"dataset name must be a non-empty string, got {name!r}")
    canonical = builtin_name(name) or family_name(name)
    if canonical in GENERATED_IGB_NAMES:
        if root is not None:
            raise ValueError(f"{canonical} is generated, it takes no root")
        from .local_rows import load_generated_igb

        return load_generated_igb(canonical[len("generated-igb-") :], **kw)
    if canonical == SYNTHETIC:
        if root is not None:
            raise ValueError("the synthetic dataset is generated, it takes no root")
        from .synthetic import load_synthetic

        return load_synthetic(**kw)
    root = default_root() if root is None else Path(root)
    if canonical.startswith("ogbn-"):
        from .ogb import load_ogb

        return load_ogb(canonical, root, **kw)
    if canonical.startswith("igb-"):
        from .igb import load_igb

        return load_igb(canonical[len("igb-") :], root, **kw)
    if canonical == AMAZON_PRODUCTS:
        from .amazon import load_amazon_products

        return load_amazon_products(root, **kw)
    from .npz import load_npz

    return load_npz(name, root, **kw)


__all__ = ["Dataset", "DataFileError", "BUILTIN", "load_dataset", "default_root"]
