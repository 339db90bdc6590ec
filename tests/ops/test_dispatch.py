"""flashgnn.ops.spmm / sddmm dispatch on the matrix's type to the format module that registered
it, after the checks every format shares."""

from __future__ import annotations

import pytest
import torch

from flashgnn import ops
from flashgnn.formats import MEBCRS, Blocked16
from flashgnn.ops import dispatch
from tests.helpers import random_csr


def test_the_package_exports_the_dispatching_entry_points():
    assert ops.spmm is dispatch.spmm and ops.sddmm is dispatch.sddmm


@pytest.mark.parametrize("fmt", [MEBCRS, Blocked16])
def test_built_in_formats_are_registered_for_both_products(fmt):
    assert dispatch._implementation(dispatch._SPMM, "spmm", fmt.__new__(fmt))
    assert dispatch._implementation(dispatch._SDDMM, "sddmm", fmt.__new__(fmt))


def test_an_unregistered_format_gets_a_type_error_naming_it_and_the_served_ones():
    class Unknown:
        n_rows = n_cols = 4
        device = torch.device("cpu")

    with pytest.raises(TypeError, match=r"spmm has no implementation for Unknown.*MEBCRS"):
        ops.spmm(Unknown(), torch.ones(4, 2))
    with pytest.raises(TypeError, match=r"sddmm has no implementation for Unknown"):
        ops.sddmm(Unknown(), torch.ones(4, 2), torch.ones(4, 2))


def test_a_subclass_is_served_by_its_base_and_a_registration_reaches_the_entry_point(
    monkeypatch, rng
):
    monkeypatch.setattr(dispatch, "_SPMM", dict(dispatch._SPMM))
    m = random_csr(16, 16, 0.3, rng)
    a = MEBCRS.from_csr(m.indptr, m.indices, m.data)
    x = torch.randn(16, 4, dtype=torch.float64)
    expected = ops.spmm(a, x)

    class Tagged(MEBCRS):
        pass

    tagged = Tagged(**{f: getattr(a, f) for f in a.__dataclass_fields__})
    torch.testing.assert_close(ops.spmm(tagged, x), expected)
    seen = []
    dispatch.register_format(Tagged, spmm=lambda a, x, p, **kw: seen.append(p) or x[:16])
    ops.spmm(tagged, x, "fp16")
    assert seen == ["fp16"]


def test_shared_checks_run_before_the_format_is_reached(rng):
    m = random_csr(16, 12, 0.3, rng)
    a = MEBCRS.from_csr(m.indptr, m.indices, m.data)
    with pytest.raises(ValueError, match="precision"):
        ops.spmm(a, torch.ones(12, 2), "fp8")
    with pytest.raises(ValueError, match="x must have 12 rows|rows"):
        ops.spmm(a, torch.ones(16, 2))
    with pytest.raises(ValueError, match="same number of columns"):
        ops.sddmm(a, torch.ones(16, 2), torch.ones(12, 3))
