"""``to(device)`` of every format (``slot_layout.moved_to``): the same arrays and sizes on the
device, and the data cached from the arrays dropped, so that none stays on the old device."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from flashgnn.formats import CVSE, GCOO, HBELL, MEBCRS, TCACSR, Blocked16
from tests.helpers import random_csr

BUILDERS = {
    "mebcrs": MEBCRS.from_csr,
    "blocked16": Blocked16.from_csr,
    "cvse4": lambda *a, **kw: CVSE.from_csr(*a, vector=4, **kw),
    "gcoo": GCOO.from_csr,
    "hbell": HBELL.from_csr,
    "tca": TCACSR.from_csr,
}


@pytest.mark.parametrize("name", BUILDERS)
def test_to_keeps_the_arrays_and_drops_the_caches(name, rng):
    a = random_csr(37, 29, 0.2, rng, dtype="float32")
    fmt = BUILDERS[name](a.indptr, a.indices, a.data, n_cols=29)
    fmt.slot_coords()
    if isinstance(fmt, MEBCRS):
        fmt.transpose()
    caches = [f.name for f in fields(fmt) if not f.compare]
    assert not caches or any(getattr(fmt, c) is not None for c in caches)
    moved = fmt.to("cpu")
    assert type(moved) is type(fmt) and moved.shape == fmt.shape and moved.nnz == fmt.nnz
    assert all(getattr(moved, c) is None for c in caches)
    for f in fields(fmt):
        value = getattr(fmt, f.name)
        if isinstance(value, torch.Tensor):
            assert torch.equal(getattr(moved, f.name), value), f.name
        elif f.compare:
            assert getattr(moved, f.name) == value, f.name
    torch.testing.assert_close(moved.to_dense(), torch.from_numpy(a.toarray()))
