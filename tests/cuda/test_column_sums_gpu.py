"""A matrix's 16-bit copy and column sums in one pass (kernels/column_sums.cu), against torch's
conversion (bit for bit) and float64 sums; the same bits on every call (the last block's
counter is left at zero for the next)."""

from __future__ import annotations

import pytest
import torch

from flashgnn._cuda.column_sums import cast_and_sum_columns_cuda
from tests.helpers import GPU

pytestmark = GPU

# one row; fewer rows than a block's lanes; one column group with idle lanes; several column
# groups; 128 columns; more rows than MAX_BLOCKS blocks of 8 rows per thread hold
SHAPES = [(1, 1), (37, 7), (1000, 33), (3000, 300), (37_700, 128), (400_000, 16)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{n}x{f}" for n, f in SHAPES])
def test_cast_and_column_sums(shape, dtype):
    x = torch.randn(*shape, device="cuda") * 3
    x16, sums = cast_and_sum_columns_cuda(x, dtype)
    assert x16.dtype == dtype and sums.dtype == torch.float32 and sums.shape == (shape[1],)
    assert sums.untyped_storage().nbytes() == 4 * shape[1]  # a bias gradient holds no scratch alive
    assert torch.equal(x16, x.to(dtype))
    exact = x.double().sum(0)
    bound = 1e-6 * x.double().abs().sum(0) + 1e-6
    assert ((sums.double() - exact).abs() <= bound).all()
    again16, again = cast_and_sum_columns_cuda(x, dtype)
    assert torch.equal(again, sums) and torch.equal(again16, x16)


def test_strided_and_empty_inputs():
    x = torch.randn(64, 500, device="cuda")[:, ::5]  # [64, 100], not contiguous
    x16, sums = cast_and_sum_columns_cuda(x, torch.float16)
    assert torch.equal(x16, x.half())
    torch.testing.assert_close(sums.double(), x.double().sum(0), rtol=1e-6, atol=1e-5)
    x16, sums = cast_and_sum_columns_cuda(torch.empty(0, 6, device="cuda"), torch.bfloat16)
    assert x16.shape == (0, 6) and torch.equal(sums, torch.zeros(6, device="cuda"))


def test_bad_inputs():
    with pytest.raises(ValueError, match="float32 CUDA tensor"):
        cast_and_sum_columns_cuda(torch.randn(4, 3, device="cuda").half(), torch.float16)
    with pytest.raises(ValueError, match="16-bit dtype"):
        cast_and_sum_columns_cuda(torch.randn(4, 3, device="cuda"), torch.float32)


def test_the_copy_written_into_a_given_tensor():
    x = torch.randn(3000, 40, device="cuda")
    out = torch.empty(3000, 40, dtype=torch.bfloat16, device="cuda")
    x16, sums = cast_and_sum_columns_cuda(x, torch.bfloat16, out)
    assert x16 is out and torch.equal(out, x.bfloat16())
    assert torch.equal(sums, cast_and_sum_columns_cuda(x, torch.bfloat16)[1])
    with pytest.raises(ValueError, match="out must be a contiguous"):
        cast_and_sum_columns_cuda(x, torch.float16, out)
    with pytest.raises(ValueError, match="out must be a contiguous"):
        cast_and_sum_columns_cuda(
            x, torch.bfloat16, torch.empty(40, 3000, dtype=torch.bfloat16, device="cuda").t()
        )
