"""HB-ELL (flashgnn.formats.HBELL) against a construction written from its definition with loops
over blocks, on random matrices, real graphs and DLMC weights; the exact round trip to CSR, the
storage reports (HB-ELL, ME-BCRS, cuSPARSE's Blocked-ELL) and the errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import MEBCRS
from flashgnn.formats import HBELL
from flashgnn.formats.hbell import DENSE_FILL, DENSE_MIN_NNZ
from flashgnn.formats.storage import blocked_ell_storage, mebcrs_storage
from tests.helpers import csr_from_coo, load_dlmc, random_csr


def expected_arrays(a: sp.csr_matrix) -> dict[str, np.ndarray]:
    """Every array of ``a``'s HB-ELL by the definition, one block at a time."""
    n_rows, n_cols = a.shape
    dense_a = a.toarray()
    present = np.zeros_like(dense_a, dtype=bool)
    rows = np.repeat(np.arange(n_rows), np.diff(a.indptr))
    present[rows, a.indices] = True
    out = {k: [] for k in ("bridx", "bcidx", "bcols", "values", "offsets", "row_mask")}
    brow_ptr, brow_valptr, ell_ptr = [0], [0], [0]
    slot_of = {}
    for br in range(0, n_rows, 16):
        for bc in range(0, n_cols, 16):
            p = np.zeros((16, 16), bool)
            v = np.zeros((16, 16))
            sub = present[br : br + 16, bc : bc + 16]
            p[: sub.shape[0], : sub.shape[1]] = sub
            v[: sub.shape[0], : sub.shape[1]] = dense_a[br : br + 16, bc : bc + 16]
            if not p.any():
                continue
            base = brow_valptr[-1]
            out["bridx"].append(br)
            out["bcidx"].append(bc)
            out["row_mask"] += [int(sum(1 << c for c in range(16) if p[r, c])) for r in range(16)]
            if p.sum() >= 0.75 * 256:
                out["bcols"].append(16)
                out["values"] += v.flatten().tolist()
                for r, c in zip(*np.nonzero(p)):
                    slot_of[(br + r, bc + c)] = base + 16 * r + c
                ell_ptr.append(ell_ptr[-1])
            else:
                w = int(p.sum(1).max())
                out["bcols"].append(w)
                for r in range(16):
                    cols = list(np.nonzero(p[r])[0])
                    for j, c in enumerate(cols):
                        slot_of[(br + r, bc + c)] = base + w * r + j
                    out["values"] += [v[r, c] for c in cols] + [0.0] * (w - len(cols))
                    out["offsets"] += cols + [cols[-1] if cols else 0] * (w - len(cols))
                ell_ptr.append(ell_ptr[-1] + 16 * w)
            brow_valptr.append(base + 16 * out["bcols"][-1])
        brow_ptr.append(len(out["bridx"]))
    perm = [slot_of[(r, c)] for r, c in zip(rows, a.indices)]
    masks = np.array(out.pop("row_mask"), np.int64).astype(np.uint16).view(np.int16)
    return {
        "brow_ptr": np.array(brow_ptr),
        "bridx": np.array(out["bridx"], np.int32),
        "bcidx": np.array(out["bcidx"], np.int32),
        "bcols": np.array(out["bcols"], np.uint8),
        "brow_valptr": np.array(brow_valptr),
        "values": np.array(out["values"]),
        "ell_ptr": np.array(ell_ptr),
        "offsets": np.array(out["offsets"], np.uint8),
        "row_mask": masks,
        "perm": np.array(perm, np.int64),
    }


def check_against_definition(a: sp.csr_matrix, device="cpu") -> HBELL:
    fmt = HBELL.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1], device=device)
    assert fmt.shape == a.shape and fmt.nnz == a.nnz
    for name, want in expected_arrays(a).items():
        got = getattr(fmt, name).cpu()
        if name != "values":
            assert got.dtype == torch.from_numpy(want).dtype, name
        got = got.numpy()
        assert got.shape == want.shape and np.array_equal(got, want), name
    indptr, indices, values = fmt.to_csr()
    assert np.array_equal(indptr.cpu().numpy(), a.indptr)
    assert np.array_equal(indices.cpu().numpy(), a.indices)
    assert np.array_equal(values.cpu().numpy(), a.data)
    assert np.array_equal(fmt.to_dense().cpu().numpy(), a.toarray())
    return fmt


def clustered_and_scattered(rng) -> sp.csr_matrix:
    """Blocks of every kind: a full block, one exactly at the dense threshold, one just below
    it, a block with one full row (ELL width 16), a scattered rest, 45 x 70 (partial blocks
    on both edges), an empty block row (rows 16..31) and explicit zero values."""
    r, c = [], []
    full = np.arange(256)
    r.append(full // 16)
    c.append(full % 16)
    at = rng.choice(256, DENSE_MIN_NNZ, replace=False)
    r.append(at // 16)
    c.append(16 + at % 16)
    below = rng.choice(256, DENSE_MIN_NNZ - 1, replace=False)
    r.append(below // 16)
    c.append(32 + below % 16)
    r.append(np.full(16, 33))
    c.append(np.arange(48, 64))
    scattered = rng.choice(13 * 70, 60, replace=False)
    r.append(32 + scattered // 70)
    c.append(scattered % 70)
    a = csr_from_coo(np.concatenate(r), np.concatenate(c), (45, 70), rng)
    a.data[::7] = 0.0  # real nonzeros that hold 0
    return a


def test_dense_threshold_is_the_papers():
    assert DENSE_FILL == 0.75 and DENSE_MIN_NNZ == 192


def test_every_kind_of_block_against_definition(rng):
    a = clustered_and_scattered(rng)
    fmt = check_against_definition(a)
    dense = fmt.dense.numpy()
    assert dense[:2].all() and not dense[2:].any(), "blocks 0 and 1 dense, 2 (191 nonzeros) not"
    (full_row,) = ((fmt.bridx == 32) & (fmt.bcidx == 48)).nonzero()[:, 0].tolist()
    assert fmt.n_dense_blocks == 2 and fmt.bcols[full_row] == 16, "a full row: ELL width 16"
    assert fmt.brow_ptr[2] == fmt.brow_ptr[1], "block row 1 (rows 16..31) is empty"


@pytest.mark.parametrize(
    "shape, density",
    [((37, 29), 0.3), ((16, 16), 1.0), ((1, 50), 0.2), ((20, 5), 0.0), ((0, 4), 0.0)],
)
def test_random_matrices_against_definition(shape, density, rng):
    check_against_definition(random_csr(*shape, density, rng))


@pytest.mark.parametrize("name", ["hetero_texas", "cora"])
def test_real_graphs_against_definition(name, load_graph):
    a = load_graph(name)
    a.data = np.random.default_rng(0).uniform(0.5, 1.5, a.nnz).astype(np.float32)
    check_against_definition(a)


def test_dlmc_round_trip_exactly():
    for _, a in load_dlmc([0, 140, 300]):
        fmt = HBELL.from_csr(a.indptr, a.indices, a.data, n_cols=a.shape[1])
        indptr, indices, values = fmt.to_csr()
        assert np.array_equal(indptr.numpy(), a.indptr)
        assert np.array_equal(indices.numpy(), a.indices)
        assert np.array_equal(values.numpy(), a.data)


def test_storage_reports_against_their_definitions(rng):
    a = clustered_and_scattered(rng)
    fmt = HBELL.from_csr(a.indptr, a.indices, a.data, n_cols=70)
    slots = 2 * 256 + sum(16 * int(w) for w in fmt.bcols[2:])
    s = fmt.storage()
    assert (s.nnz, s.slots) == (a.nnz, slots) and fmt.n_slots == slots
    index_bytes = 8 * (3 + 1) + 4 * fmt.n_blocks * 2 + fmt.n_blocks + 8 * 2 * (fmt.n_blocks + 1)
    assert s.bytes == index_bytes + (slots - 512) + a.data.itemsize * slots
    assert fmt.stored_bytes(value_bytes=2) == index_bytes + (slots - 512) + 2 * slots
    assert fmt.zero_fill() == pytest.approx((slots - a.nnz) / slots)

    m = MEBCRS.from_csr(a.indptr, a.indices, a.data, n_cols=70)
    ms = mebcrs_storage(m, value_bytes=2)
    assert ms.slots == 8 * m.n_vectors
    assert ms.bytes == 8 * (m.n_windows + 1) + 5 * m.n_vectors + 2 * 8 * m.n_vectors

    # Blocked-ELL with 16 x 16 blocks: every block row padded to the widest
    b = blocked_ell_storage(a.indptr, a.indices, 70)
    d = a.toarray() != 0
    widest = max(
        sum(bool(d[r : r + 16, c : c + 16].any()) for c in range(0, 70, 16)) for r in (0, 16, 32)
    )
    assert b.slots == 3 * widest * 256 and b.bytes == 4 * 3 * widest + 2 * b.slots
    assert b.zero_fill == pytest.approx(1 - a.nnz / b.slots)
    assert blocked_ell_storage(a.indptr, a.indices, 70, block=70).slots == 4900


def test_dense_is_smaller_than_ell_only_when_full():
    """A full block: 256 values and no offsets, where ME-BCRS stores 16 vectors of 8 twice."""
    a = sp.csr_matrix(np.ones((16, 16), np.float32))
    fmt = HBELL.from_csr(a.indptr, a.indices, a.data)
    assert fmt.n_dense_blocks == 1 and fmt.offsets.numel() == 0 and fmt.zero_fill() == 0.0


def test_values_from_csr_with_values_and_to(rng):
    a = clustered_and_scattered(rng)
    fmt = HBELL.from_csr(a.indptr, a.indices, n_cols=70)
    assert fmt.values.dtype == torch.float32 and bool((fmt.values[fmt.perm] == 1).all())
    placed = fmt.values_from_csr(torch.from_numpy(a.data))
    other = fmt.with_values(placed)
    assert np.array_equal(other.to_csr()[2].numpy(), a.data)
    with pytest.raises(ValueError, match="expected .* values in CSR order"):
        fmt.values_from_csr(torch.ones(3))
    with pytest.raises(ValueError, match="values must have shape"):
        fmt.with_values(torch.ones(3))
    moved = fmt.to("cpu")
    assert moved is not fmt and torch.equal(moved.offsets, fmt.offsets)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((np.array([0, 2, 1, 2]), np.array([0, 1])), {}, "indptr must be non-decreasing"),
        ((np.array([0, 2]), np.array([1, 0])), {}, "unsorted column indices in row 0"),
        ((np.array([0, 2]), np.array([0, 0])), {}, "duplicate column indices in row 0"),
        ((np.array([0, 1]), np.array([5])), {"n_cols": 3}, "column index out of range"),
        ((np.array([0, 1]), np.array([0.0])), {}, "indices must hold int32 or int64"),
        ((np.array([0, 1]), np.array([0]), np.array([1])), {}, "values must be floating point"),
        ((np.array([0, 1]), np.array([0]), np.ones(2)), {}, "one entry per nonzero"),
        ((np.array([0, 1]), np.array([0])), {"n_cols": -1}, "n_cols must be in"),
    ],
)
def test_bad_input_is_a_clear_error(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        HBELL.from_csr(*args, **kwargs)


def test_dense_fill_zero_stores_every_block_dense(rng):
    a = clustered_and_scattered(rng)
    fmt = HBELL.from_csr(a.indptr, a.indices, a.data, n_cols=70, dense_fill=0)
    assert bool(fmt.dense.all()) and fmt.offsets.numel() == 0
    assert fmt.n_slots == 256 * fmt.n_blocks
    assert np.array_equal(fmt.to_csr()[2].numpy(), a.data)
    only_full = HBELL.from_csr(a.indptr, a.indices, a.data, n_cols=70, dense_fill=1.0)
    assert only_full.n_dense_blocks == 1
    for bad in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match="dense_fill must be"):
            HBELL.from_csr(a.indptr, a.indices, dense_fill=bad)


def test_blocked_ell_bad_block():
    with pytest.raises(ValueError, match="block must be a positive integer"):
        blocked_ell_storage(np.array([0, 1]), np.array([0]), block=0)
