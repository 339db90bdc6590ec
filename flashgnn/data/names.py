"""Dataset names: the built-in datasets, and the spellings a user types for one name.

"AmazonProducts", "amazon_products", "Amazon-Products" and "amazonproducts" all name
"amazon-products": two spellings name the same dataset when they agree without case and
without the separators '-', '_' and spaces. The .npz graphs of a data folder are matched the
same way against their file names ("twitch-de" finds ``twitch_DE.npz``).
"""

from __future__ import annotations

import re

from .igb import IGB_NUM_NODES
from .ogb import OGB_NAMES

SYNTHETIC = "synthetic"
AMAZON_PRODUCTS = "amazon-products"
IGB_NAMES = tuple(f"igb-{size}" for size in IGB_NUM_NODES)
GENERATED_IGB_NAMES = ("generated-igb-medium", "generated-igb-large")
BUILTIN = (SYNTHETIC, AMAZON_PRODUCTS, *OGB_NAMES, *IGB_NAMES, *GENERATED_IGB_NAMES)
"""The datasets ``load_dataset`` knows by name; any other name is an .npz graph."""


def name_key(name: str) -> str:
    """``name`` lower-cased without '-', '_' and spaces: what spellings of one name share."""
    return re.sub(r"[-_\s]", "", name).lower()


def builtin_name(name: str) -> str | None:
    """The built-in dataset that ``name`` spells, or None."""
    key = name_key(name)
    return next((b for b in BUILTIN if name_key(b) == key), None)


def family_name(name: str) -> str:
    """``name`` lower-cased with '_' and spaces as '-', to route "OGBN_Foo" to the OGB
    loader, which names the datasets it has."""
    return re.sub(r"[_\s]", "-", name).lower()
