"""TensorCache: hits while the tensor lives unchanged, misses after an in-place change, and
holds no entry (nor the tensor) once the tensor is gone."""

from __future__ import annotations

import gc

import torch

from flashgnn.tensor_cache import TensorCache


def test_hit_miss_and_in_place_change():
    cache = TensorCache()
    t, other = torch.zeros(3), torch.zeros(3)
    assert cache.get(t) is None
    assert cache.set(t, "a") == "a"
    assert cache.get(t) == "a" and cache.get(other) is None
    t.add_(1)  # bumps the version counter
    assert cache.get(t) is None
    cache.set(t, "b")
    assert cache.get(t) == "b" and len(cache) == 1


def test_entry_dropped_with_its_tensor():
    cache = TensorCache()
    t = torch.zeros(3)
    cache.set(t, "value")
    del t
    gc.collect()
    assert len(cache) == 0


def test_reused_id_is_not_a_hit():
    """A new tensor at a dead one's address (same id) never sees the old entry, even if the old
    entry had not been dropped yet."""
    cache = TensorCache()
    first = torch.zeros(2)
    cache.set(first, "old")
    key = id(first)
    stale = cache._entries[key]
    del first
    gc.collect()
    second = torch.zeros(2)
    cache._entries[id(second)] = stale  # as if ``second`` reused the address before the drop
    assert cache.get(second) is None
