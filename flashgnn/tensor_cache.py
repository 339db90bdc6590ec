"""A cache keyed by a tensor's identity, for lookups on every op call, and how cached tensors
are built.

``torch.utils.weak.WeakIdKeyDictionary`` builds a weak reference per lookup (microseconds,
on paths that run several times per layer step); this keys a plain dict by ``id(tensor)``
and keeps a weak reference only per entry, which drops the entry when the tensor dies.

Tensors kept across calls (formats, segments, normalised values) are built with inference
mode off (``built_for_reuse``): a first call under ``torch.inference_mode`` would otherwise
cache inference tensors, which a later training call cannot save for backward.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def built_for_reuse(build: Callable[[], T]) -> T:
    """``build()`` with inference mode off, so that the tensors it makes can be cached and used
    by later calls with autograd (a no-op outside inference mode)."""
    with torch.inference_mode(False):
        return build()


def tensor_version(tensor: torch.Tensor) -> int | None:
    """The in-place version counter; None for an inference tensor (made under
    ``torch.inference_mode``), which keeps none: its entries are taken as unchanged."""
    return None if tensor.is_inference() else tensor._version


class TensorCache:
    """``cache.get(t)``: what ``cache.set(t, value)`` stored while ``t`` lives and has not been
    modified in place since (its version counter is unchanged), else None."""

    def __init__(self):
        self._entries: dict[int, tuple[weakref.ref, int | None, Any]] = {}

    def get(self, tensor: torch.Tensor) -> Any:
        hit = self._entries.get(id(tensor))
        if hit is None or hit[0]() is not tensor or hit[1] != tensor_version(tensor):
            return None
        return hit[2]

    def set(self, tensor: torch.Tensor, value: Any) -> Any:
        """Store ``value`` for ``tensor`` (replacing any entry) and return it."""
        key, entries = id(tensor), self._entries

        def drop(ref: weakref.ref) -> None:
            if entries.get(key, (None,))[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(tensor, drop), tensor_version(tensor), value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
