"""MEBCRS (flashgnn/formats/mebcrs.py) against the independent decoder of
tests/format/mebcrs_spec.py and scipy: random matrices, every graph of ../shared/datasets, a
sample of DLMC, and every error."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn.formats import device_builders
from flashgnn.formats.mebcrs import (
    MEBCRS,
    build_canonical,
    build_reference,
    decode_slots,
    vector_slots,
)
from flashgnn.formats.windowed import check_dim
from tests.format.mebcrs_spec import assert_mebcrs_of
from tests.helpers import (
    GPU,
    csr_from_coo,
    graph_names,
    graph_params,
    load_dlmc,
    needs_gpu,
    random_csr,
    random_values,
)


def build(a: sp.csr_matrix, k: int = 8, **kw) -> MEBCRS:
    return MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1], k=k, **kw)


def assert_round_trip(fmt: MEBCRS, a: sp.csr_matrix) -> None:
    indptr, indices, values = fmt.to_csr()
    assert indptr.dtype == indices.dtype == torch.int64
    assert np.array_equal(indptr.numpy(), a.indptr)
    assert np.array_equal(indices.numpy(), a.indices)
    assert np.array_equal(values.to(torch.float64).numpy(), a.data.astype(np.float64))


def assert_same_format(f: MEBCRS, g: MEBCRS) -> None:
    assert (f.n_rows, f.n_cols, f.k) == (g.n_rows, g.n_cols, g.k)
    for name in ("row_ptr", "col_idx", "values", "perm", "vec_mask"):
        x, y = getattr(f, name), getattr(g, name)
        assert x.dtype == y.dtype and torch.equal(x, y), name


# ---------------------------------------------------------------------------- layout
def test_worked_example_k4():
    """The worked example of docs/FORMAT.md §1.5, a 10 x 12 matrix laid out by hand: window 0
    has 5 vectors (a full 8 x 4 block, then an 8 x 1 block), window 1 (rows 8-9, six padding
    rows) has 2 vectors."""
    entries = [(0, 1), (0, 5), (2, 1), (2, 3), (3, 9), (7, 11), (8, 0), (9, 0), (9, 4)]
    rows, cols = np.array(entries).T
    vals = 1.0 + 12 * rows + cols
    a = sp.csr_matrix((vals, (rows, cols)), shape=(10, 12))
    fmt = build(a, k=4)

    expected = np.zeros(56)
    block0 = expected[0:32].reshape(8, 4)  # window 0, columns 1, 3, 5, 9
    block0[0] = [2, 0, 6, 0]
    block0[2] = [26, 28, 0, 0]
    block0[3] = [0, 0, 0, 46]
    expected[32:40].reshape(8, 1)[7] = 96  # window 0, column 11
    block2 = expected[40:56].reshape(8, 2)  # window 1, columns 0, 4
    block2[0] = [97, 0]
    block2[1] = [109, 113]
    assert fmt.row_ptr.tolist() == [0, 5, 7]
    assert fmt.col_idx.tolist() == [1, 3, 5, 9, 11, 0, 4]
    assert fmt.values.tolist() == expected.tolist()
    assert fmt.perm.tolist() == [0, 2, 8, 9, 15, 39, 40, 42, 43]
    assert fmt.vec_mask.tolist() == [0b101, 0b100, 0b1, 0b1000, 0b10000000, 0b11, 0b10]
    assert (fmt.nnz, fmt.n_vectors, fmt.n_windows, fmt.shape) == (9, 7, 2, (10, 12))
    assert_mebcrs_of(fmt, a)

    # with k = 8 window 0 is one 8 x 5 block
    fmt8 = build(a, k=8)
    assert fmt8.values[:40].reshape(8, 5)[3].tolist() == [0, 0, 0, 46, 0]
    assert fmt8.perm.tolist() == [0, 2, 10, 11, 18, 39, 40, 42, 43]
    assert_mebcrs_of(fmt8, a)


def _window_counts_matrix(k: int, rng) -> tuple[sp.csr_matrix, list[int]]:
    """53 x 70 matrix whose windows hold k, k+1, 0, 2k, 2k+1, k-1 and 1 vectors (the last
    window has 5 rows)."""
    counts = [k, k + 1, 0, 2 * k, 2 * k + 1, k - 1, 1]
    rows, cols = [], []
    for w, n in enumerate(counts):
        height = min(8, 53 - 8 * w)
        for c in rng.choice(70, n, replace=False):
            r = rng.choice(height, rng.integers(1, height + 1), replace=False)
            rows += list(8 * w + r)
            cols += [c] * len(r)
    return csr_from_coo(rows, cols, (53, 70), rng), counts


def _random_cases():
    """(name, matrix factory) pairs covering the shapes of the issue."""

    def empty_windows(rng):
        a = random_csr(64, 40, 0.2, rng).tolil()
        a[8:24] = 0  # windows 1 and 2 empty
        a[[40, 41, 47]] = 0
        return sp.csr_matrix(a)

    def hub_row(rng):
        a = random_csr(300, 5000, 0.002, rng).tolil()
        a[77, rng.choice(5000, 3000, replace=False)] = 1.0
        a = sp.csr_matrix(a)
        a.data = random_values(a.nnz, rng)
        return a

    return {
        "61x45": lambda rng: random_csr(61, 45, 0.1, rng),
        "empty_rows_and_windows": empty_windows,
        "tall_100x7": lambda rng: random_csr(100, 7, 0.3, rng),
        "wide_13x300": lambda rng: random_csr(13, 300, 0.05, rng),
        "one_column_29x1": lambda rng: random_csr(29, 1, 0.5, rng),
        "one_row_1x50": lambda rng: random_csr(1, 50, 0.3, rng),
        "dense_16x16": lambda rng: random_csr(16, 16, 1.0, rng),
        "hub_row": hub_row,
        "all_empty_10x5": lambda rng: random_csr(10, 5, 0.0, rng),
        "no_rows_0x3": lambda rng: random_csr(0, 3, 0.0, rng),
        "no_cols_5x0": lambda rng: random_csr(5, 0, 0.0, rng),
    }


RANDOM_CASES = _random_cases()


@pytest.mark.parametrize("k", [8, 4])
@pytest.mark.parametrize("case", list(RANDOM_CASES))
def test_random_matrix_against_spec(case, k, rng):
    a = RANDOM_CASES[case](rng)
    fmt = build(a, k=k)
    assert_mebcrs_of(fmt, a)
    fmt.validate()
    assert_round_trip(fmt, a)
    assert np.array_equal(fmt.to_dense().numpy(), a.toarray())


@pytest.mark.parametrize("k", [8, 4])
def test_windows_with_k_and_k_plus_one_vectors(k, rng):
    a, counts = _window_counts_matrix(k, rng)
    fmt = build(a, k=k)
    assert torch.diff(fmt.row_ptr).tolist() == counts
    assert_mebcrs_of(fmt, a)
    fmt.validate()
    assert_round_trip(fmt, a)


def test_field_dtypes_and_int64_slot_arithmetic(rng):
    """Offsets past 2^31 value slots need int64 slot arithmetic end to end. A matrix that big
    cannot be allocated here, so this checks that every offset and slot tensor is int64."""
    a = random_csr(37, 29, 0.2, rng)
    fmt = build(a)
    assert fmt.row_ptr.dtype == torch.int64
    assert fmt.perm.dtype == torch.int64
    assert fmt.col_idx.dtype == torch.int32
    assert fmt.vec_mask.dtype == torch.uint8
    assert vector_slots(fmt.row_ptr, fmt.k).dtype == torch.int64
    coords = decode_slots(fmt.row_ptr, fmt.col_idx, fmt.vec_mask, fmt.k)
    assert coords.slot.dtype == coords.row.dtype == coords.col.dtype == torch.int64


# ---------------------------------------------------------------------------- inputs
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_index_dtypes_and_array_kinds_give_one_format(index_dtype, kind, rng):
    a = random_csr(45, 33, 0.15, rng, index_dtype=index_dtype)
    convert = torch.from_numpy if kind == "torch" else np.asarray
    fmt = MEBCRS.from_csr(convert(a.indptr), convert(a.indices), convert(a.data), n_cols=33)
    assert_mebcrs_of(fmt, a)
    int32 = sp.csr_matrix(
        (a.data, a.indices.astype(np.int32), a.indptr.astype(np.int32)), shape=a.shape
    )
    assert_same_format(fmt, build(int32))


def test_mixed_index_dtypes(rng):
    a = random_csr(20, 20, 0.2, rng)
    fmt = MEBCRS.from_csr(
        torch.from_numpy(a.indptr.astype(np.int64)), torch.from_numpy(a.indices), a.data
    )
    assert_mebcrs_of(fmt, a)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_value_dtype_is_kept(dtype, rng):
    a = random_csr(30, 26, 0.2, rng)
    values = torch.from_numpy(a.data).to(dtype)
    fmt = MEBCRS.from_csr(a.indptr, a.indices, values, n_cols=26)
    assert fmt.values.dtype == dtype
    exact = sp.csr_matrix((values.to(torch.float64).numpy(), a.indices, a.indptr), shape=a.shape)
    assert_mebcrs_of(fmt, exact)


def test_default_values_and_n_cols(rng):
    a = random_csr(19, 23, 0.2, rng)
    fmt = MEBCRS.from_csr(a.indptr, a.indices)
    assert fmt.n_cols == int(a.indices.max()) + 1
    assert fmt.values.dtype == torch.float32
    ones = sp.csr_matrix((np.ones(a.nnz), a.indices, a.indptr), shape=(19, fmt.n_cols))
    assert_mebcrs_of(fmt, ones)
    empty = MEBCRS.from_csr(np.zeros(4, np.int64), np.zeros(0, np.int64))
    assert (empty.n_rows, empty.n_cols, empty.nnz, empty.n_vectors) == (3, 0, 0, 0)
    empty.validate()


# ---------------------------------------------------------------------------- real data
GRAPHS = graph_names()


@pytest.mark.parametrize("name", graph_params())
def test_dataset_graph_against_spec(name, load_graph, rng):
    """Every graph of ../shared/datasets, with random values so misplaced values show; k
    alternates between graphs so both block widths meet real degree distributions."""
    a = load_graph(name)
    a.data = random_values(a.nnz, rng).astype(np.float32)
    k = 8 if GRAPHS.index(name) % 2 == 0 else 4
    fmt = build(a, k=k)
    assert_mebcrs_of(fmt, a)
    fmt.validate()
    assert_round_trip(fmt, a)


DLMC_SAMPLE = [0, 20, 52, 106, 140, 160, 214, 268, 300]  # sparsity 0.5 to 0.98, wide and tall


def test_dlmc_sample_against_spec(data_dir, rng):
    for i, (name, a) in enumerate(load_dlmc(DLMC_SAMPLE)):
        a.data = random_values(a.nnz, rng).astype(np.float32)
        fmt = build(a, k=8 if i % 2 == 0 else 4)
        assert_mebcrs_of(fmt, a)
        fmt.validate()
        assert_round_trip(fmt, a)


# ---------------------------------------------------------------------------- transpose, values
@pytest.mark.parametrize("k", [8, 4])
def test_transpose_equals_format_of_transposed_matrix(k, rng):
    a = random_csr(43, 27, 0.15, rng)
    fmt = build(a, k=k)
    t = fmt.transpose()
    assert fmt.transpose() is t  # cached
    at = sp.csr_matrix(a.T)
    at.sort_indices()
    assert_same_format(t.fmt, build(at, k=k))
    assert_mebcrs_of(t.fmt, at)
    # src_slot[i] is A's slot of A^T's i-th nonzero in CSR order
    assert torch.equal(fmt.values[t.src_slot], t.fmt.values[t.fmt.perm])
    a_coords = fmt.slot_coords()
    a_row = torch.zeros(8 * fmt.n_vectors, dtype=torch.int64)
    a_col = torch.zeros_like(a_row)
    a_row[a_coords.slot], a_col[a_coords.slot] = a_coords.row, a_coords.col
    at_rows = torch.repeat_interleave(torch.arange(27), torch.from_numpy(np.diff(at.indptr)))
    assert torch.equal(a_col[t.src_slot], at_rows)
    assert torch.equal(t.indptr, torch.from_numpy(at.indptr).long())
    assert torch.equal(a_row[t.src_slot], torch.from_numpy(at.indices).long())
    new_values = torch.randn(8 * fmt.n_vectors, dtype=torch.float64)
    assert torch.equal(t.values_from(new_values), t.fmt.values_from_csr(new_values[t.src_slot]))
    assert_same_format(t.fmt.transpose().fmt, fmt)


@pytest.mark.parametrize("first", ["copy", "source"])
def test_a_with_values_copy_transposes_its_own_values(first, rng):
    """A^T of ``fmt.with_values(v)`` holds v (moved into A^T's layout) on the pattern of fmt's
    A^T, built once whichever of the two is transposed first."""
    a = random_csr(30, 22, 0.2, rng)
    fmt = build(a)
    copy = fmt.with_values(fmt.values * 3)
    twice = copy.with_values(fmt.values * 5)
    if first == "copy":
        copy.transpose()
    t = fmt.transpose()
    for f, scale in ((copy, 3), (twice, 5)):
        ft = f.transpose()
        assert f.transpose() is ft
        assert ft.fmt.row_ptr is t.fmt.row_ptr and ft.src_slot is t.src_slot
        assert torch.equal(ft.fmt.values, t.fmt.values * scale)
        assert torch.equal(ft.fmt.to_dense(), f.to_dense().t())
    assert torch.equal(t.fmt.to_dense(), fmt.to_dense().t())


def test_values_from_csr_and_with_values(rng):
    a = random_csr(35, 41, 0.1, rng)
    fmt = build(a)
    v = random_values(a.nnz, rng)
    placed = fmt.values_from_csr(torch.from_numpy(v))
    assert torch.equal(placed, build(sp.csr_matrix((v, a.indices, a.indptr), shape=a.shape)).values)
    heads = torch.from_numpy(np.stack([v, 2 * v, -v], 1))
    placed_heads = fmt.values_from_csr(heads)
    assert placed_heads.shape == (8 * fmt.n_vectors, 3)
    for h in range(3):
        assert torch.equal(placed_heads[:, h], fmt.values_from_csr(heads[:, h]))
    other = fmt.with_values(placed)
    assert other.values is placed and other.row_ptr is fmt.row_ptr
    with pytest.raises(ValueError, match="expected 1.* values in CSR order"):
        fmt.values_from_csr(torch.zeros(a.nnz + 1))
    with pytest.raises(ValueError, match="values must have shape"):
        fmt.with_values(torch.zeros(8 * fmt.n_vectors + 1))


# ---------------------------------------------------------------------------- validate
def edited(t: torch.Tensor, index, value) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


def padding_slot(f: MEBCRS) -> int:
    real = torch.zeros(f.values.numel(), dtype=torch.bool)
    real[f.perm] = True
    return int((~real).nonzero()[0])


def moved_lowest_bit(mask: int) -> int:
    """The mask with its lowest set bit moved to its lowest clear bit: same count, other rows."""
    free = next(r for r in range(8) if not mask >> r & 1)
    return (mask & (mask - 1)) | (1 << free)


# name -> (fields to replace, given the good format; the message validate must give)
CORRUPTIONS = {
    "unsorted_col_idx": (
        lambda f: {"col_idx": edited(f.col_idx, [0, 1], f.col_idx[[1, 0]])},
        "not strictly increasing by column",
    ),
    "duplicate_col_idx": (
        lambda f: {"col_idx": edited(f.col_idx, 1, f.col_idx[0])},
        "not strictly increasing by column",
    ),
    "col_idx_past_n_cols": (
        lambda f: {"col_idx": edited(f.col_idx, -1, f.n_cols)},
        "col_idx out of range",
    ),
    "negative_col_idx": (lambda f: {"col_idx": edited(f.col_idx, 0, -1)}, "col_idx out of range"),
    "nonzero_in_padding_slot": (
        lambda f: {"values": edited(f.values, padding_slot(f), 0.5)},
        "outside the sparsity pattern",
    ),
    "swapped_perm": (
        lambda f: {"perm": edited(f.perm, [0, 1], f.perm[[1, 0]])},
        "perm does not map",
    ),
    "perm_length": (lambda f: {"perm": f.perm[:-1]}, "marks .* nonzeros but perm has"),
    "perm_dtype": (lambda f: {"perm": f.perm.to(torch.int32)}, "perm"),
    "row_ptr_end": (
        lambda f: {"row_ptr": edited(f.row_ptr, -1, f.row_ptr[-1] - 1)},
        "end at n_vectors",
    ),
    "row_ptr_start": (lambda f: {"row_ptr": edited(f.row_ptr, 0, 1)}, "start at 0"),
    "non_monotone_row_ptr": (
        lambda f: {"row_ptr": edited(f.row_ptr, 1, f.row_ptr[2] + 1)},
        "non-decreasing",
    ),
    "row_ptr_dtype": (lambda f: {"row_ptr": f.row_ptr.to(torch.int32)}, "row_ptr must be int64"),
    "n_rows": (lambda f: {"n_rows": f.n_rows + 8}, "row_ptr must be int64 \\[5\\]"),
    "col_idx_dtype": (lambda f: {"col_idx": f.col_idx.to(torch.int64)}, "col_idx must be int32"),
    "mask_bit_past_n_rows": (
        lambda f: {"vec_mask": edited(f.vec_mask, -1, f.vec_mask[-1] | 1 << 7)},
        "vec_mask marks a row past n_rows",
    ),
    "empty_vector": (lambda f: {"vec_mask": edited(f.vec_mask, 0, 0)}, "a vector holds no nonzero"),
    "moved_mask_bit": (
        lambda f: {"vec_mask": edited(f.vec_mask, 0, moved_lowest_bit(int(f.vec_mask[0])))},
        "outside the sparsity pattern|perm does not map",
    ),
    "vec_mask_dtype": (
        lambda f: {"vec_mask": f.vec_mask.to(torch.int32)},
        "vec_mask must be uint8",
    ),
    "values_length": (lambda f: {"values": f.values[:-1]}, "values must have"),
    "k": (lambda f: {"k": 5}, "k = 5 is not 8 or 4"),
}


def _swap_two_real_values(f: MEBCRS) -> dict:
    slots = f.perm[[0, -1]]
    return {"values": edited(f.values, slots, f.values[slots.flip(0)])}


SPEC_MUST_CATCH = {
    "swapped_values": _swap_two_real_values,
    "read_as_other_k": lambda f: {"k": 8},
    "nonzero_in_padding_slot": lambda f: {"values": edited(f.values, padding_slot(f), 0.5)},
    "swapped_perm": lambda f: {"perm": edited(f.perm, [0, 1], f.perm[[1, 0]])},
    "moved_mask_bit": lambda f: {
        "vec_mask": edited(f.vec_mask, 0, moved_lowest_bit(int(f.vec_mask[0])))
    },
    "shifted_column": lambda f: {"col_idx": edited(f.col_idx, -1, (f.col_idx[-1] + 1) % f.n_cols)},
    "lost_vector": lambda f: {
        "col_idx": f.col_idx[:-1],
        "values": f.values[:-8],
        "row_ptr": edited(f.row_ptr, -1, f.row_ptr[-1] - 1),
    },
}


@pytest.mark.parametrize("name", list(SPEC_MUST_CATCH))
def test_spec_decoder_catches_wrong_formats(name, good_format, rng):
    """The independent check is not vacuous: each of these wrong formats fails it."""
    a = sp.csr_matrix(good_format.to_dense().numpy())
    assert_mebcrs_of(good_format, a)
    with pytest.raises(AssertionError):
        assert_mebcrs_of(dataclasses.replace(good_format, **SPEC_MUST_CATCH[name](good_format)), a)


@pytest.fixture
def good_format(rng) -> MEBCRS:
    """21 x 30, k = 4: the last window has 5 rows and a vector, window 0 several vectors."""
    a = random_csr(21, 30, 0.15, rng)
    fmt = build(a, k=4)
    assert fmt.row_ptr[1] >= 2 and fmt.row_ptr[-2] < fmt.row_ptr[-1]
    fmt.validate()
    return fmt


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_validate_names_the_broken_invariant(name, good_format):
    changes, message = CORRUPTIONS[name]
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(good_format, **changes(good_format)).validate()


# ---------------------------------------------------------------------------- bad input
def _bad_inputs():
    ip, ix = np.array([0, 2, 4, 5]), np.array([0, 3, 1, 2, 4])
    return {
        "unsorted": ((ip, np.array([3, 0, 1, 2, 4])), {}, "unsorted column indices in row 0"),
        "duplicate": ((ip, np.array([0, 3, 2, 2, 4])), {}, "duplicate column indices in row 1"),
        "unsorted_after_empty_row": (
            (np.array([0, 2, 2, 4]), np.array([0, 3, 4, 1])),
            {},
            "unsorted column indices in row 2",
        ),
        "out_of_range": ((ip, ix), {"n_cols": 4}, "column index out of range \\[0, 4\\): found 4"),
        "negative": ((ip, np.array([0, 3, -1, 2, 4])), {}, "out of range .* found -1"),
        "indices_longer_than_indptr": (
            (ip, np.append(ix, 5)),
            {},
            "does not match len\\(indices\\)",
        ),
        "indices_shorter_than_indptr": ((ip, ix[:-1]), {}, "does not match len\\(indices\\)"),
        "values_length": ((ip, ix, np.ones(4)), {}, "one entry per nonzero \\(5\\)"),
        "values_2d": ((ip, ix, np.ones((5, 1))), {}, "values must be 1-D"),
        "indptr_start": ((np.array([1, 2, 4, 5]), ix), {}, "indptr\\[0\\] must be 0, got 1"),
        "indptr_decreasing": ((np.array([0, 3, 2, 5]), ix), {}, "indptr must be non-decreasing"),
        "indptr_empty": (
            (np.zeros(0, np.int64), np.zeros(0, np.int64)),
            {},
            "indptr must have n_rows \\+ 1",
        ),
        "float_indices": ((ip, ix.astype(np.float32)), {}, "indices must hold int32 or int64"),
        "uint16_indices": ((ip, ix.astype(np.uint16)), {}, "indices must hold int32 or int64"),
        "int16_indptr": ((ip.astype(np.int16), ix), {}, "indptr must hold int32 or int64"),
        "2d_indices": ((ip, ix[:, None]), {}, "indices must be 1-D"),
        "k_16": ((ip, ix), {"k": 16}, "k must be 8 .* or 4"),
        "k_1": ((ip, ix), {"k": 1}, "k must be 8 .* or 4"),
        "int_values": ((ip, ix, np.arange(5)), {}, "values must be floating point"),
        "bool_values": ((ip, ix, np.ones(5, bool)), {}, "values must be floating point"),
        "negative_n_cols": ((ip, ix), {"n_cols": -1}, "n_cols must be in"),
        "first_out_of_range": (
            (ip, np.array([0, 7, 1, 2, 9])),
            {"n_cols": 5},
            r"found 7 at position 1 \(row 0\)",
        ),
        "n_cols_past_int32": ((ip, ix), {"n_cols": 2**31}, r"n_cols must be in \[0, 2\^31\)"),
        "index_past_int32": ((ip, ix + 2**31), {}, r"n_cols must be in \[0, 2\^31\)"),
        "float_n_cols": ((ip, ix), {"n_cols": 5.0}, "n_cols must be an integer, got float"),
        "tensor_n_cols": ((ip, ix), {"n_cols": torch.tensor(5)}, "n_cols must be an integer"),
        "float_k": ((ip, ix), {"k": 8.0}, "k must be 8 .* or 4"),
    }


BAD_INPUTS = _bad_inputs()


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_from_csr_rejects_bad_input(name):
    args, kwargs, message = BAD_INPUTS[name]
    with pytest.raises(ValueError, match=message):
        MEBCRS.from_csr(*args, **kwargs)


@needs_gpu
@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_from_csr_rejects_bad_input_on_cuda(name):
    """The same errors for arrays on a GPU, before any kernel runs."""
    args, kwargs, message = BAD_INPUTS[name]
    args = [torch.from_numpy(a).cuda() if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(ValueError, match=message):
        MEBCRS.from_csr(*args, **kwargs)


def test_check_dim_names_the_int32_limit():
    """Rows and columns share the check (a test building 2^31 rows would need their memory)."""
    assert check_dim(2**31 - 1, "n_rows") == 2**31 - 1
    with pytest.raises(ValueError, match=r"n_rows must be in \[0, 2\^31\) .* got 2147483648"):
        check_dim(2**31, "n_rows")
    with pytest.raises(ValueError, match="n_rows must be an integer, got bool"):
        check_dim(True, "n_rows")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU)])
def test_no_builder_wraps_a_column_past_int32(device):
    """``build_canonical`` (a Graph's and A^T's path, unchecked otherwise) and the 16x1 format
    refuse sizes their int32 indices cannot hold."""
    indptr = torch.tensor([0, 1], device=device)
    indices = torch.tensor([2**31 + 3], device=device)
    values = torch.ones(1, device=device)
    with pytest.raises(ValueError, match=r"n_cols must be in \[0, 2\^31\)"):
        build_canonical(indptr, indices, values, 2**31 + 8, torch.device(device), 8)
    with pytest.raises(ValueError, match=r"n_cols must be in \[0, 2\^31\)"):
        MEBCRS.from_csr(indptr, indices, vector=16)


# ---------------------------------------------------------------------------- device builders
def test_from_csr_builds_with_the_builder_registered_for_the_device(monkeypatch, rng):
    """formats/mebcrs.py reaches a device's builder only through
    flashgnn.formats.device_builders; the builder returns plain arrays and the format assembles
    the MEBCRS."""
    monkeypatch.setattr(device_builders, "_BUILDERS", dict(device_builders._BUILDERS))
    calls = []

    def build(indptr, indices, values, n_cols, k, device):
        calls.append((n_cols, k, device))
        return build_reference(indptr, indices, values, n_cols, k, torch.device("cpu"))

    device_builders.register_builder("xpu", build)
    a = random_csr(21, 17, 0.3, rng)
    fmt = MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=17, k=4, device="xpu")
    assert calls == [(17, 4, torch.device("xpu"))]
    assert_same_format(fmt, MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=17, k=4))

    def unusable(device):
        raise RuntimeError(f"{device} is unusable")

    device_builders.register_builder("xpu", build, check=unusable)
    # the 16x1 format, built by the same torch code everywhere, only checks the device
    with pytest.raises(RuntimeError, match="xpu is unusable"):
        MEBCRS.from_csr(a.indptr, a.indices, a.data, vector=16, device="xpu")
    assert len(calls) == 1


def test_a_device_without_a_builder_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(device_builders, "_BUILDERS", {"cpu": device_builders._BUILDERS["cpu"]})
    with pytest.raises(RuntimeError, match="registered for cuda devices .*registered: cpu"):
        MEBCRS.from_csr([0, 1, 2], [1, 0], device="cuda")
    with pytest.raises(RuntimeError, match="no format builder is registered for xpu devices"):
        MEBCRS.from_csr([0, 1, 2], [1, 0], device="xpu")


def test_sections_cited_from_the_format_document_exist():
    """Code and tests cite docs/FORMAT.md by section (§1.3): each cited section is a heading."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs/FORMAT.md").read_text()
    headings = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.M))
    cited = set()
    for path in [*root.glob("flashgnn/**/*.py"), *root.glob("tests/*.py"), *root.glob("docs/*.md")]:
        cited |= set(re.findall(r"§(\d+(?:\.\d+)?)", path.read_text()))
    assert cited and cited <= headings, f"not sections of FORMAT.md: {sorted(cited - headings)}"
