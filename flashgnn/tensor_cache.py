"""A cache keyed by a tensor's identity, for lookups on every op call.

``torch.utils.weak.WeakIdKeyDictionary`` builds a weak reference per lookup (microseconds,
on paths that run several times per layer step); this keys a plain dict by ``id(tensor)``
and keeps a weak reference only per entry, which drops the entry when the tensor dies.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch


class TensorCache:
    """``cache.get(t)``: what ``cache.set(t, value)`` stored while ``t`` lives and has not been
    modified in place since (its version counter is unchanged), else None."""

    def __init__(self):
        self._entries: dict[int, tuple[weakref.ref, int, Any]] = {}

    def get(self, tensor: torch.Tensor) -> Any:
        hit = self._entries.get(id(tensor))
        if hit is None or hit[0]() is not tensor or hit[1] != tensor._version:
            return None
        return hit[2]

    def set(self, tensor: torch.Tensor, value: Any) -> Any:
        """Store ``value`` for ``tensor`` (replacing any entry) and return it."""
        key, entries = id(tensor), self._entries

        def drop(ref: weakref.ref) -> None:
            if entries.get(key, (None,))[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(tensor, drop), tensor._version, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
