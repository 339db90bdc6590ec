"""Row sums of values kept in a value layout, visited in CSR order (kernels/slot_row_sums.cu),
against float64 sums of the dense matrix: A's rows through its own CSR, A's columns through
A^T's (the hub row of 20,000 nonzeros is one long CSR row)."""

from __future__ import annotations

import pytest
import torch

from flashgnn._cuda.slot_row_sums import slot_row_sums_cuda
from flashgnn.formats.mebcrs import MEBCRS
from tests.cuda.kernel_cases import CASES
from tests.helpers import GPU

pytestmark = GPU


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_row_and_column_sums(case, k, rng):
    a = CASES[case](rng)
    f = MEBCRS.from_csr(a.indptr, a.indices, n_cols=a.shape[1], k=k, device="cuda")
    values = torch.randn(f.n_slots, device="cuda")
    dense = f.with_values(values).to_dense().double()
    t = f.transpose()
    rows = slot_row_sums_cuda(torch.from_numpy(a.indptr).long().cuda(), f.perm, values)
    cols = slot_row_sums_cuda(t.indptr, t.src_slot, values)
    assert rows.dtype == cols.dtype == torch.float32
    torch.testing.assert_close(rows.double(), dense.sum(1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(cols.double(), dense.sum(0), rtol=1e-5, atol=1e-4)
    assert torch.equal(
        rows, slot_row_sums_cuda(torch.from_numpy(a.indptr).long().cuda(), f.perm, values)
    )


def test_bad_inputs_are_clear_errors(rng):
    a = CASES["square_61x61"](rng)
    f = MEBCRS.from_csr(a.indptr, a.indices, n_cols=61, device="cuda")
    indptr = torch.from_numpy(a.indptr).long().cuda()
    values = torch.randn(f.n_slots, device="cuda")
    with pytest.raises(ValueError, match="values must be float32"):
        slot_row_sums_cuda(indptr, f.perm, values.double())
    with pytest.raises(ValueError, match="indptr and slot must be int64"):
        slot_row_sums_cuda(indptr.int(), f.perm, values)
    with pytest.raises(ValueError, match="one CUDA device"):
        slot_row_sums_cuda(indptr.cpu(), f.perm, values)
