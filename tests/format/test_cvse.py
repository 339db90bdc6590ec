"""CVSE (flashgnn/formats/cvse.py) against a decoder of its arrays written from the module's
specification with Python loops, and scipy: random matrices (empty rows and columns, row counts
not a multiple of V, explicit zeros), every shared graph and a sample of DLMC, every V, and
every bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn.formats import CVSE
from tests.format.test_format import BAD_INPUTS, DLMC_SAMPLE
from tests.helpers import csr_from_coo, graph_params, load_dlmc, random_csr, random_values

VECTORS = (2, 4, 8)


def build(a: sp.csr_matrix, vector: int, **kw) -> CVSE:
    return CVSE.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1], vector=vector, **kw)


def expected_arrays(a: sp.csr_matrix, vector: int) -> dict[str, np.ndarray]:
    """The arrays the module docstring specifies, strip by strip and column by column."""
    n_strips = -(-a.shape[0] // vector)
    row_ptr, col_idx, values, masks, perm = [0], [], [], [], np.zeros(a.nnz, np.int64)
    for s in range(n_strips):
        rows = range(vector * s, min(vector * s + vector, a.shape[0]))
        cols = sorted({int(j) for i in rows for j in a.indices[a.indptr[i] : a.indptr[i + 1]]})
        for j in cols:
            vec, mask = [0.0] * vector, 0
            for i in rows:
                lo, hi = a.indptr[i], a.indptr[i + 1]
                at = lo + np.searchsorted(a.indices[lo:hi], j)
                if at < hi and a.indices[at] == j:
                    r = i - vector * s
                    vec[r], mask = float(a.data[at]), mask | (1 << r)
                    perm[at] = vector * len(col_idx) + r
            col_idx.append(j)
            values += vec
            masks.append(mask)
        row_ptr.append(len(col_idx))
    return {
        "row_ptr": np.array(row_ptr),
        "col_idx": np.array(col_idx, np.int64),
        "values": np.array(values),
        "vec_mask": np.array(masks, np.int64),
        "perm": perm,
    }


def assert_cvse_of(fmt: CVSE, a: sp.csr_matrix, vector: int) -> None:
    """fmt holds exactly the arrays of ``a`` (dtypes included), its slot coordinates are a's
    nonzeros, and to_csr() gives a back exactly."""
    assert (fmt.n_rows, fmt.n_cols, fmt.vector, fmt.nnz) == (*a.shape, vector, a.nnz)
    assert fmt.row_ptr.dtype == fmt.col_idx.dtype == torch.int32
    assert fmt.perm.dtype == torch.int64 and fmt.vec_mask.dtype == torch.uint8
    want = expected_arrays(a, vector)
    for name, expected in want.items():
        got = getattr(fmt, name).cpu().to(torch.float64 if name == "values" else torch.int64)
        assert np.array_equal(got.numpy(), expected), name
    assert fmt.n_slots == vector * fmt.n_vectors == fmt.values.numel()
    # slot_coords: a's nonzeros, each at the slot holding its value, in slot order
    c = fmt.slot_coords()
    assert torch.all(c.slot[1:] > c.slot[:-1])
    coo = a.tocoo()
    got = sorted(zip(c.row.tolist(), c.col.tolist(), fmt.values[c.slot].double().tolist()))
    assert got == sorted(zip(coo.row.tolist(), coo.col.tolist(), coo.data.astype(float).tolist()))
    assert_round_trip(fmt, a)


def assert_round_trip(fmt: CVSE, a: sp.csr_matrix) -> None:
    indptr, indices, values = fmt.to_csr()
    assert indptr.dtype == indices.dtype == torch.int64
    assert np.array_equal(indptr.cpu().numpy(), a.indptr)
    assert np.array_equal(indices.cpu().numpy(), a.indices)
    assert values.dtype == fmt.values.dtype
    assert np.array_equal(values.cpu().double().numpy(), a.data.astype(np.float64))


def _random_cases():
    def empty_rows_and_columns(rng):
        a = random_csr(45, 38, 0.2, rng).tolil()
        a[3:12, :] = 0  # empty rows across strip boundaries
        a[:, 20:25] = 0
        return canonical(a.tocsr(), rng)

    def explicit_zeros(rng):
        a = random_csr(23, 17, 0.3, rng)
        a.data[::3] = 0.0  # stored zeros are nonzeros of the pattern
        return a

    def full_strips(rng):
        # every nonzero a whole V-vector for V = 8 (so for 4 and 2 too): rows 8i .. 8i + 7
        base = random_csr(5, 30, 0.3, rng)
        rows = (8 * np.repeat(np.arange(5), np.diff(base.indptr)))[:, None] + np.arange(8)
        cols = np.repeat(base.indices[:, None], 8, 1)
        return csr_from_coo(rows.ravel(), cols.ravel(), (40, 30), rng)

    return {
        "square_61": lambda rng: random_csr(61, 61, 0.1, rng),
        "tall_103x9": lambda rng: random_csr(103, 9, 0.4, rng),
        "wide_3x200": lambda rng: random_csr(3, 200, 0.05, rng),
        "dense_13x11": lambda rng: random_csr(13, 11, 1.0, rng),
        "empty_10x5": lambda rng: random_csr(10, 5, 0.0, rng),
        "no_rows": lambda rng: random_csr(0, 5, 0.0, rng),
        "no_columns": lambda rng: random_csr(6, 0, 0.0, rng),
        "empty_rows_and_columns": empty_rows_and_columns,
        "explicit_zeros": explicit_zeros,
        "full_strips": full_strips,
    }


def canonical(a: sp.csr_matrix, rng) -> sp.csr_matrix:
    a.eliminate_zeros()
    a.sort_indices()
    return sp.csr_matrix((random_values(a.nnz, rng), a.indices, a.indptr), shape=a.shape)


CASES = _random_cases()


@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize("case", list(CASES))
def test_random_matrix_against_spec(case, vector, rng):
    a = CASES[case](rng)
    assert_cvse_of(build(a, vector), a, vector)


def test_worked_example():
    """A 5 x 6 matrix at V = 2, laid out by hand: strip 0 (rows 0-1) has columns 1 and 4,
    strip 1 (rows 2-3) is empty, strip 2 (row 4, one row past the end) has column 0."""
    a = sp.csr_matrix(
        (np.array([1.0, 2.0, 3.0, 4.0]), np.array([1, 4, 4, 0]), np.array([0, 2, 3, 3, 3, 4])),
        shape=(5, 6),
    )
    f = build(a, 2)
    assert f.row_ptr.tolist() == [0, 2, 2, 3]
    assert f.col_idx.tolist() == [1, 4, 0]
    assert f.values.tolist() == [1.0, 0.0, 2.0, 3.0, 4.0, 0.0]
    assert f.vec_mask.tolist() == [1, 3, 1]
    assert f.perm.tolist() == [0, 2, 3, 4]


@pytest.mark.parametrize("vector", VECTORS)
def test_index_dtypes_and_value_dtypes(vector, rng):
    a = random_csr(29, 31, 0.2, rng)
    one = build(a, vector)
    for index_dtype in (np.int32, np.int64):
        other = CVSE.from_csr(
            torch.from_numpy(a.indptr.astype(index_dtype)),
            torch.from_numpy(a.indices.astype(index_dtype)),
            torch.from_numpy(a.data),
            n_cols=31,
            vector=vector,
        )
        for name in ("row_ptr", "col_idx", "values", "perm", "vec_mask"):
            assert torch.equal(getattr(one, name), getattr(other, name)), name
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        f = CVSE.from_csr(a.indptr, a.indices, torch.from_numpy(a.data).to(dtype), vector=vector)
        assert f.values.dtype == dtype
        exact = sp.csr_matrix(
            (torch.from_numpy(a.data).to(dtype).double().numpy(), a.indices, a.indptr),
            shape=(29, f.n_cols),
        )
        assert_round_trip(f, exact)


def test_default_values_and_n_cols(rng):
    a = random_csr(19, 23, 0.2, rng)
    f = CVSE.from_csr(a.indptr, a.indices, vector=4)
    assert f.n_cols == int(a.indices.max()) + 1 and f.values.dtype == torch.float32
    ones = sp.csr_matrix((np.ones(a.nnz), a.indices, a.indptr), shape=(19, f.n_cols))
    assert_cvse_of(f, ones, 4)


@pytest.mark.parametrize("vector", VECTORS)
def test_values_from_csr_with_values_and_dense(vector, rng):
    a = random_csr(21, 14, 0.3, rng)
    f = build(a, vector)
    v = torch.from_numpy(random_values(a.nnz, rng))
    placed = build(sp.csr_matrix((v.numpy(), a.indices, a.indptr), shape=a.shape), vector)
    assert torch.equal(f.values_from_csr(v), placed.values)
    g = f.with_values(f.values * 2)
    assert g.row_ptr is f.row_ptr and torch.equal(g.values, f.values * 2)
    assert np.array_equal(f.to_dense().numpy(), a.toarray())
    with pytest.raises(ValueError, match=r"values must have shape \(\d+,\) \(the value layout\)"):
        f.with_values(f.values[:-1])
    with pytest.raises(ValueError, match=f"expected {a.nnz} values in CSR order"):
        f.values_from_csr(v[:-1])


# ---------------------------------------------------------------------------- real data
@pytest.mark.parametrize("name", graph_params())
def test_dataset_graph_round_trips(name, load_graph, rng):
    """Every shared graph, V cycling with the name, random values so misplaced values show."""
    a = load_graph(name)
    a.data = random_values(a.nnz, rng).astype(np.float32)
    vector = VECTORS[sum(map(ord, name)) % 3]
    f = build(a, vector)
    assert_round_trip(f, a)
    c = f.slot_coords()
    # slot_coords against scipy's coordinates of each nonzero (canonical CSR order)
    order = np.lexsort((c.col.numpy(), c.row.numpy()))
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    assert np.array_equal(c.row.numpy()[order], rows)
    assert np.array_equal(c.col.numpy()[order], a.indices)
    assert np.array_equal(f.values[c.slot].numpy()[order], a.data)


def test_dlmc_sample_round_trips(data_dir, rng):
    for i, (name, a) in enumerate(load_dlmc(DLMC_SAMPLE)):
        a.data = random_values(a.nnz, rng).astype(np.float32)
        vector = VECTORS[i % 3]
        if a.nnz <= 60_000:
            assert_cvse_of(build(a, vector), a, vector)
        else:
            assert_round_trip(build(a, vector), a)


# ---------------------------------------------------------------------------- bad input
def _cvse_bad_inputs():
    """ME-BCRS's bad CSR inputs (test_format.py), less its block-width cases, and CVSE's own."""
    out = {name: case for name, case in BAD_INPUTS.items() if "k" not in case[1]}
    ip, ix = np.array([0, 2, 4, 5]), np.array([0, 3, 1, 2, 4])
    for vector in (1, 3, 16, 0, -8, 8.0, True, "8", None):
        out[f"vector_{vector!r}"] = ((ip, ix), {"vector": vector}, "vector must be one of")
    return out


CVSE_BAD_INPUTS = _cvse_bad_inputs()


@pytest.mark.parametrize("name", list(CVSE_BAD_INPUTS))
def test_from_csr_rejects_bad_input(name):
    args, kwargs, message = CVSE_BAD_INPUTS[name]
    with pytest.raises(ValueError, match=message):
        CVSE.from_csr(*args, **kwargs)


def test_numpy_integer_vector_is_accepted(rng):
    a = random_csr(9, 9, 0.3, rng)
    f = CVSE.from_csr(a.indptr, a.indices, a.data, vector=np.int64(4))
    assert f.vector == 4 and type(f.vector) is int
    assert_round_trip(f, a)
