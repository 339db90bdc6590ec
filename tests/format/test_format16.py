"""The 16x1 baseline format (flashgnn.formats.blocked16) against a construction written from its
definition with loops over windows, on random matrices and real graphs; entry points and errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import MEBCRS
from flashgnn.formats.blocked16 import Blocked16
from tests.helpers import csr_from_coo, random_csr


def expected_arrays(a: sp.csr_matrix) -> dict[str, np.ndarray]:
    """row_ptr, col_idx, values, perm, vec_mask of ``a`` by the definition, one window at a time."""
    n_rows = a.shape[0]
    row_ptr, col_idx, values, vec_mask = [0], [], [], []
    slot_of = {}
    for w in range((n_rows + 15) // 16):
        block_rows = a[16 * w : min(16 * w + 16, n_rows)].tocoo()
        cols = sorted(set(block_rows.col.tolist()))
        for b0 in range(0, len(cols), 8):
            block_cols = cols[b0 : b0 + 8]
            block = len(col_idx) // 8
            col_idx += block_cols + [block_cols[-1]] * (8 - len(block_cols))
            dense = np.zeros((16, 8))
            mask = [0] * 8
            for r, c, v in zip(block_rows.row, block_rows.col, block_rows.data):
                if c in block_cols:
                    j = block_cols.index(c)
                    dense[r, j] = v
                    mask[j] |= 1 << r
                    slot_of[(16 * w + r, c)] = 128 * block + 8 * r + j
            values += dense.flatten().tolist()
            vec_mask += mask
        row_ptr.append(len(col_idx) // 8)
    rows = np.repeat(np.arange(n_rows), np.diff(a.indptr))
    perm = [slot_of[(r, c)] for r, c in zip(rows, a.indices)]
    as_int16 = np.array(vec_mask, np.int64).astype(np.uint16).view(np.int16)
    return {
        "row_ptr": np.array(row_ptr),
        "col_idx": np.array(col_idx, np.int64),
        "values": np.array(values),
        "perm": np.array(perm, np.int64),
        "vec_mask": as_int16,
    }


def check_against_definition(a: sp.csr_matrix) -> Blocked16:
    fmt = MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1], vector=16)
    assert isinstance(fmt, Blocked16) and fmt.vector == 16 and fmt.shape == a.shape
    assert (fmt.row_ptr.dtype, fmt.col_idx.dtype, fmt.perm.dtype, fmt.vec_mask.dtype) == (
        torch.int64,
        torch.int32,
        torch.int64,
        torch.int16,
    )
    for name, want in expected_arrays(a).items():
        got = getattr(fmt, name).numpy()
        assert got.shape == want.shape and np.array_equal(got, want), name
    assert np.array_equal(fmt.to_dense().numpy(), a.toarray())
    c = fmt.slot_coords()
    assert np.array_equal(np.sort(c.slot.numpy()), np.sort(fmt.perm.numpy()))
    decoded = sp.csr_matrix(
        (fmt.values[c.slot].numpy(), (c.row.numpy(), c.col.numpy())), shape=a.shape
    )
    assert (decoded != a).nnz == 0
    return fmt


def edge_cases(rng) -> dict[str, sp.csr_matrix]:
    """n not a multiple of 16, an empty window (rows 16..31), a window of exactly 8 columns
    (rows 48..63), a 200-nonzero row, dense, one-row, all-empty and zero-row matrices."""
    rows = [rng.integers(0, 75, 200), np.full(200, 40), 48 + rng.integers(0, 16, 8), np.full(9, 70)]
    cols = [
        rng.integers(0, 300, 200),
        rng.choice(300, 200, replace=False),
        rng.choice(300, 8, replace=False),
        rng.choice(300, 9, replace=False),
    ]
    r, c = np.concatenate(rows), np.concatenate(cols)
    keep = ((r < 16) | (r >= 32)) & ~((r >= 48) & (r < 64)) | (
        np.arange(len(r)) >= 400
    )  # rows 16..31 empty
    return {
        "edge_cases_75x300": csr_from_coo(r[keep], c[keep], (75, 300), rng, dtype=np.float32),
        "random_37x29": random_csr(37, 29, 0.3, rng, dtype=np.float32),
        "dense_16x16": random_csr(16, 16, 1.0, rng),
        "one_row_1x50": random_csr(1, 50, 0.2, rng),
        "all_empty_20x5": random_csr(20, 5, 0.0, rng),
        "no_rows_0x4": random_csr(0, 4, 0.0, rng),
    }


@pytest.mark.parametrize(
    "case",
    [
        "edge_cases_75x300",
        "random_37x29",
        "dense_16x16",
        "one_row_1x50",
        "all_empty_20x5",
        "no_rows_0x4",
    ],
)
def test_matches_definition_on_random_matrices(case, rng):
    fmt = check_against_definition(edge_cases(rng)[case])
    if case == "edge_cases_75x300":
        assert fmt.row_ptr[2] == fmt.row_ptr[1], "window 1 (rows 16..31) is empty"
        assert fmt.row_ptr[4] - fmt.row_ptr[3] == 1, "window 3 holds exactly 8 columns: one block"


@pytest.mark.parametrize("name", ["hetero_texas", "cora", "hetero_chameleon"])
def test_matches_definition_on_real_graphs(name, load_graph):
    a = load_graph(name)
    a.data = np.random.default_rng(0).uniform(0.5, 1.5, a.nnz).astype(np.float32)
    fmt = check_against_definition(a)
    padded = int((fmt.vec_mask == 0).sum())
    assert fmt.n_padding_columns == padded and fmt.n_vectors == 8 * fmt.n_blocks - padded


def test_worked_example():
    """docs/FORMAT.md §2.3: the 10 x 12 matrix of §1.5 is one 16-row window of seven distinct
    columns, one block whose eighth column is padding."""
    entries = [(0, 1), (0, 5), (2, 1), (2, 3), (3, 9), (7, 11), (8, 0), (9, 0), (9, 4)]
    rows, cols = np.array(entries).T
    a = sp.csr_matrix((1.0 + 12 * rows + cols, (rows, cols)), shape=(10, 12))
    fmt = check_against_definition(a)
    assert fmt.row_ptr.tolist() == [0, 1]
    assert fmt.col_idx.tolist() == [0, 1, 3, 4, 5, 9, 11, 11]
    masks = [0b1100000000, 0b101, 0b100, 0b1000000000, 0b1, 0b1000, 0b10000000, 0]
    assert fmt.vec_mask.tolist() == masks
    assert fmt.perm.tolist() == [1, 4, 17, 18, 29, 62, 64, 72, 75]
    assert (fmt.n_vectors, fmt.n_padding_columns) == (7, 1)


def test_building_on_a_device_without_a_builder_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no format builder is registered for xpu devices"):
        MEBCRS.from_csr([0, 1, 2], [1, 0], device="xpu", vector=16)


def test_counts_and_layout_sizes(rng):
    a = random_csr(50, 40, 0.2, rng)
    fmt = MEBCRS.from_csr(a.indptr, a.indices, a.data, vector=16)
    assert fmt.n_slots == fmt.values.numel() == 128 * fmt.n_blocks
    windows = [len(set(a[16 * w : 16 * w + 16].indices.tolist())) for w in range(4)]
    assert fmt.n_vectors == sum(windows) and fmt.n_blocks == sum(-(-c // 8) for c in windows)
    assert fmt.n_cols == int(a.indices.max()) + 1  # n_cols defaults as for ME-BCRS


def test_default_stays_mebcrs_and_direct_constructor_agrees(rng):
    a = random_csr(30, 30, 0.2, rng)
    assert type(MEBCRS.from_csr(a.indptr, a.indices, a.data)) is MEBCRS
    assert MEBCRS.from_csr(a.indptr, a.indices, a.data, vector=8).vector == 8
    via_mebcrs = MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=30, vector=16)
    direct = Blocked16.from_csr(a.indptr, a.indices, a.data, n_cols=30)
    for name in ("row_ptr", "col_idx", "values", "perm", "vec_mask"):
        assert torch.equal(getattr(via_mebcrs, name), getattr(direct, name))


def test_values_from_csr_and_to(rng):
    a = random_csr(21, 33, 0.3, rng)
    fmt = Blocked16.from_csr(a.indptr, a.indices, a.data)
    assert torch.equal(fmt.values_from_csr(torch.from_numpy(a.data)), fmt.values)
    moved = fmt.to("cpu")
    assert torch.equal(moved.values, fmt.values) and moved.n_rows == 21
    with pytest.raises(ValueError, match=f"expected {a.nnz} values in CSR order"):
        fmt.values_from_csr(torch.ones(a.nnz + 1))


BAD_CSR = {
    "unsorted": (([0, 2], [3, 1]), {}),
    "duplicate": (([0, 2], [1, 1]), {}),
    "column_out_of_range": (([0, 1], [5]), {"n_cols": 3}),
    "indptr_mismatch": (([0, 3], [0, 1]), {}),
    "float_indices": (([0, 1], np.array([0.0])), {}),
    "values_length": (([0, 2], [0, 1]), {"values": np.ones(3)}),
    "integer_values": (([0, 2], [0, 1]), {"values": np.ones(2, np.int64)}),
}


@pytest.mark.parametrize("case", list(BAD_CSR))
def test_bad_csr_raises_as_mebcrs_does(case):
    (indptr, indices), kwargs = BAD_CSR[case]
    with pytest.raises(ValueError) as expected:
        MEBCRS.from_csr(indptr, indices, **kwargs)
    with pytest.raises(ValueError) as got:
        MEBCRS.from_csr(indptr, indices, vector=16, **kwargs)
    assert str(got.value) == str(expected.value)


def test_bad_vector_and_block_width():
    with pytest.raises(ValueError, match="vector must be 8 .* or 16"):
        MEBCRS.from_csr([0, 1], [0], vector=4)
    with pytest.raises(ValueError, match="blocks of 16 x 8.*got k = 4"):
        MEBCRS.from_csr([0, 1], [0], k=4, vector=16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without a GPU")
def test_building_on_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        MEBCRS.from_csr([0, 1, 2], [1, 0], device="cuda", vector=16)
