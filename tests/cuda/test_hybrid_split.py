"""The hybrid SpMM's split on the CPU (flashgnn/_cuda/hybrid.py): which windows go to CUDA
cores at a threshold, the cached split's edge cases, and the segments of one side."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn._cuda import hybrid
from flashgnn._cuda.segments import Segments
from flashgnn.formats.mebcrs import MEBCRS


def pattern(rows: list[list[int]], n_cols: int = 64) -> MEBCRS:
    """ME-BCRS (k = 8) of a 0/1 matrix given by each row's columns."""
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows] + [np.zeros(0, int)])
    data = torch.ones(len(indices), dtype=torch.float32)
    return MEBCRS.from_csr(indptr, indices, data, n_cols=n_cols, k=8)


def per_vector(f: MEBCRS) -> list[float]:
    """Nonzeros per vector of each window, from scipy (nan for an empty window)."""
    out = []
    for w in range(f.row_ptr.numel() - 1):
        lo, hi = int(f.row_ptr[w]), int(f.row_ptr[w + 1])
        masks = f.vec_mask[lo:hi].tolist()
        nnz = sum(bin(m).count("1") for m in masks)
        out.append(nnz / (hi - lo) if hi > lo else math.nan)
    return out


# window 0: rows 0..7 all on columns 0..3 (4 vectors of 8), window 1: one nonzero per vector
# (8 vectors of 1), window 2 empty, window 3: rows 24..26 on column 5 (1 vector of 3)
ROWS = [[0, 1, 2, 3]] * 8 + [[8 + r] for r in range(8)] + [[]] * 8 + [[5]] * 3


def test_window_sizes_count_vectors_and_nonzeros():
    f = pattern(ROWS)
    vectors, nnz = hybrid.window_sizes(f.row_ptr, f.vec_mask)
    assert vectors.tolist() == [4, 8, 0, 1]
    assert nnz.tolist() == [32, 8, 0, 3]


@pytest.mark.parametrize(
    "below, expected",
    [
        (0.0, [False, False, False, False]),
        (1.0, [False, False, False, False]),  # 1 per vector is not below 1
        (1.5, [False, True, True, False]),  # the empty window joins the sparse one
        (3.0, [False, True, True, False]),
        (3.5, [False, True, True, True]),
        (8.5, [True, True, True, True]),
        (math.inf, [True, True, True, True]),
    ],
)
def test_windows_below_the_threshold_go_to_cuda_cores(below, expected):
    f = pattern(ROWS)
    assert hybrid.sparse_windows(f.row_ptr, f.vec_mask, below).tolist() == expected


@pytest.mark.parametrize("below", [0.5, 1.2, 2.0, 4.0, math.inf])
def test_random_split_matches_the_per_window_density(below):
    rng = np.random.default_rng(3)
    a = sp.random(203, 97, density=0.04, format="csr", random_state=rng)
    a.indices = a.indices.astype(np.int64)
    f = MEBCRS.from_csr(a.indptr, a.indices, torch.ones(a.nnz), n_cols=97, k=8)
    density = per_vector(f)
    got = hybrid.sparse_windows(f.row_ptr, f.vec_mask, below).tolist()
    any_sparse = any(d < below for d in density if not math.isnan(d))
    assert got == [any_sparse if math.isnan(d) else d < below for d in density]


def test_empty_windows_stay_on_tensor_cores_when_no_window_is_sparse():
    f = pattern([[0, 1]] * 8 + [[]] * 8)  # 2 vectors of 8 nonzeros, then an empty window
    assert hybrid.sparse_windows(f.row_ptr, f.vec_mask, 2.0).tolist() == [False, False]
    assert hybrid.window_split(f.row_ptr, f.vec_mask, 2.0) is None


def test_split_sizes_and_sides():
    f = pattern(ROWS)
    split = hybrid.window_split(f.row_ptr, f.vec_mask, 2.0)
    assert split.sparse.tolist() == [False, True, True, False]
    assert split.dense.tolist() == [True, False, False, True]
    assert (split.n_dense, split.sparse_vectors, split.sparse_nnz) == (2, 8, 8)
    assert hybrid.window_split(f.row_ptr, f.vec_mask, 2.0) is split  # cached


def test_all_sparse_and_all_dense():
    f = pattern(ROWS)
    everything = hybrid.window_split(f.row_ptr, f.vec_mask, math.inf)
    assert everything.sparse.all() and everything.n_dense == 0
    assert everything.sparse_vectors == 13 and everything.sparse_nnz == 43
    assert hybrid.window_split(f.row_ptr, f.vec_mask, 0.0) is None  # off
    assert hybrid.window_split(f.row_ptr, f.vec_mask, 0.5) is None  # no window that sparse


def test_a_graph_without_rows_has_no_split():
    f = MEBCRS.from_csr(np.zeros(1, np.int64), np.zeros(0, np.int64), torch.ones(0), 5, k=8)
    assert f.row_ptr.numel() == 1
    assert hybrid.sparse_windows(f.row_ptr, f.vec_mask, 2.0).numel() == 0
    assert hybrid.window_split(f.row_ptr, f.vec_mask, math.inf) is None


def test_a_graph_of_empty_windows_only_has_no_split():
    f = pattern([[]] * 13)
    assert hybrid.sparse_windows(f.row_ptr, f.vec_mask, math.inf).tolist() == [False, False]
    assert hybrid.window_split(f.row_ptr, f.vec_mask, math.inf) is None


def test_threshold_table_environment_and_forcing(monkeypatch):
    monkeypatch.setattr(hybrid, "forced_below", None)
    monkeypatch.setattr(hybrid, "SPARSE_BELOW", ((32, 1.5), (None, 3.0)))
    assert [hybrid.sparse_below(n) for n in (1, 32, 33, 256)] == [1.5, 1.5, 3.0, 3.0]
    monkeypatch.setattr(hybrid, "forced_below", 2.0)
    assert hybrid.sparse_below(32) == hybrid.sparse_below(256) == 2.0
    monkeypatch.setenv(hybrid.ENV, "inf")
    assert hybrid.from_environment() == math.inf
    monkeypatch.setenv(hybrid.ENV, "")
    assert hybrid.from_environment() is None


def test_the_default_keeps_every_window_on_tensor_cores():
    assert all(below == 0 for _, below in hybrid.SPARSE_BELOW)


@pytest.mark.parametrize("bad", ["two", "-1", "nan", None])
def test_bad_thresholds_are_refused(bad):
    with pytest.raises(ValueError, match="threshold"):
        hybrid.parse_below(bad)


def segments() -> Segments:
    """Hand-made segments of 4 windows at seg_vectors 2: window 0 of 5 vectors (3 segments,
    split 0, slots 0..2), window 1 of 1, window 2 of 3 (2 segments, split 1, slots 3..4),
    window 3 empty; longest first."""
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    return Segments(
        window=i32([0, 0, 2, 1, 0, 2, 3]),
        begin=i32([0, 2, 0, 0, 4, 2, 0]),
        first=torch.tensor([0, 2, 6, 5, 4, 8, 9]),
        count=i32([2, 2, 2, 1, 1, 1, 0]),
        part=i32([0, 1, 3, -1, 2, 4, -1]),
        split=i32([0, 0, 1, -1, 0, 1, -1]),
        split_window=i32([0, 2]),
        split_part=i32([0, 3]),
        split_count=i32([3, 2]),
        seg_vectors=2,
        n_parts=5,
        most_parts=3,
    )


def test_segments_of_some_windows_renumber_their_split_windows():
    sub = segments().of_windows(torch.tensor([False, True, True, True]))
    assert sub.window.tolist() == [2, 1, 2, 3]
    assert sub.first.tolist() == [6, 5, 8, 9] and sub.count.tolist() == [2, 1, 1, 0]
    assert sub.part.tolist() == [3, -1, 4, -1]  # workspace slots kept
    assert sub.split.tolist() == [0, -1, 0, -1]  # window 2 is now split window 0
    assert sub.split_window.tolist() == [2] and sub.split_part.tolist() == [3]
    assert sub.split_count.tolist() == [2]
    assert (sub.n_parts, sub.most_parts, sub.seg_vectors) == (5, 2, 2)


def test_segments_of_windows_without_split_ones_need_no_workspace():
    sub = segments().of_windows(torch.tensor([False, True, False, True]))
    assert sub.window.tolist() == [1, 3] and sub.split.tolist() == [-1, -1]
    assert (sub.n_split, sub.n_parts, sub.most_parts) == (0, 0, 1)
    none = segments().of_windows(torch.zeros(4, dtype=torch.bool))
    assert (none.n_segments, none.n_parts, none.most_parts) == (0, 0, 0)


def test_split_segments_of_each_side_partition_the_segments():
    seg = segments()
    f = pattern(ROWS)
    split = hybrid.window_split(f.row_ptr, f.vec_mask, 2.0)
    dense, sparse = split.segments(seg, False), split.segments(seg, True)
    assert split.segments(seg, True) is sparse  # cached
    assert sorted(dense.window.tolist() + sparse.window.tolist()) == sorted(seg.window.tolist())
    assert set(sparse.window.tolist()) == {1, 2} and set(dense.window.tolist()) == {0, 3}
