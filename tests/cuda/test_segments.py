"""Work segments (flashgnn/_cuda/segments.py, kernels/segments.cu) against a loop over the
windows, and the SpMM's work split."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flashgnn import MEBCRS
from flashgnn._cuda import segments
from flashgnn._cuda.segments import segments_for
from tests.helpers import host_syncs, needs_gpu


def cuda_row_ptr(vectors_per_window) -> torch.Tensor:
    return torch.tensor(
        np.concatenate([[0], np.cumsum(vectors_per_window)]), dtype=torch.int64, device="cuda"
    )


def expected(vectors_per_window: list[int], seg_vectors: int) -> dict[str, list]:
    """Each window cut into runs of at most seg_vectors vectors (one run for an empty window)."""
    out = {k: [] for k in ("window", "first", "count", "part", "split")}
    split_windows, split_part, split_count = [], [], []
    start, parts = 0, 0
    for w, nv in enumerate(vectors_per_window):
        runs = max(1, -(-nv // seg_vectors))
        if runs > 1:
            split_windows.append(w)
            split_part.append(parts)
            split_count.append(runs)
        for r in range(runs):
            out["window"].append(w)
            out["first"].append(start + r * seg_vectors)
            out["count"].append(min(seg_vectors, nv - r * seg_vectors) if nv else 0)
            out["part"].append(parts + r if runs > 1 else -1)
            out["split"].append(len(split_windows) - 1 if runs > 1 else -1)
        parts += runs if runs > 1 else 0
        start += nv
    out.update(split_window=split_windows, split_part=split_part, split_count=split_count)
    return out


def window_sizes(case: str, seg_vectors: int) -> list[int]:
    rng = np.random.default_rng(7)
    if case == "mixed":  # empty, exact multiples, one over, a hub, an empty last window
        vectors = [0, 5, seg_vectors, seg_vectors + 1, 0, 3 * seg_vectors, 20 * seg_vectors + 7, 1]
        return vectors + list(rng.integers(0, 4 * seg_vectors, 40)) + [0]
    if case == "no vectors":
        return [0, 0, 0]
    if case == "no windows":
        return []
    # many windows: more segments than one launch's threads
    return list(rng.integers(0, 3 * seg_vectors, 300_000 // seg_vectors * 4))


@needs_gpu
@pytest.mark.parametrize("seg_vectors", [64, 128])
@pytest.mark.parametrize("case", ["mixed", "no vectors", "no windows", "many windows"])
def test_segments_match_a_loop_over_windows(case, seg_vectors):
    vectors = window_sizes(case, seg_vectors)
    row_ptr = cuda_row_ptr(vectors)
    seg = segments_for(row_ptr, seg_vectors)
    want = expected(vectors, seg_vectors)
    # longest first, windows in order among equal lengths
    order = sorted(range(len(want["count"])), key=lambda i: -want["count"][i])
    for name, values in want.items():
        per_segment = name in ("window", "first", "count", "part", "split")
        got = getattr(seg, name)
        assert got.is_cuda and got.dtype == (torch.int64 if name == "first" else torch.int32), name
        assert got.tolist() == ([values[i] for i in order] if per_segment else values), name
    assert torch.equal(seg.begin.long(), seg.first - row_ptr[seg.window.long()])
    assert seg.n_parts == sum(want["split_count"])
    assert seg.most_parts == max((max(1, -(-nv // seg_vectors)) for nv in vectors), default=0)
    assert seg.seg_vectors == seg_vectors


@needs_gpu
def test_segments_of_a_built_format_use_the_totals_read_with_it(rng):
    """The GPU builder reads every seg_vectors' totals with n_vectors: segments built later read
    nothing and equal those built from a copy of row_ptr, which reads its own."""
    a = sp.random(3000, 2000, density=0.01, format="csr", random_state=7)
    a[5, :] = 1.0  # a hub row: windows split at every size
    a = sp.csr_matrix(a)
    fmt = MEBCRS.from_csr(
        torch.from_numpy(a.indptr), torch.from_numpy(a.indices), n_cols=2000, device="cuda"
    )
    for seg_vectors in segments.TOTALS_SIZES:
        built = []
        assert host_syncs(lambda: built.append(segments_for(fmt.row_ptr, seg_vectors))) == 0
        ref = segments_for(fmt.row_ptr.clone(), seg_vectors)
        for name in (
            "window",
            "begin",
            "first",
            "count",
            "part",
            "split",
            "split_window",
            "split_part",
            "split_count",
        ):
            assert torch.equal(getattr(built[0], name), getattr(ref, name)), name
        assert (built[0].n_parts, built[0].most_parts) == (
            ref.n_parts,
            ref.most_parts,
        ) and ref.most_parts > 1


@needs_gpu
def test_split_longer_than_keeps_the_long_windows_in_order():
    vectors = [10, 64 * 3, 64 * 17, 0, 64 * 16 + 1, 64 * 2]
    seg = segments_for(cuda_row_ptr(vectors), 64)
    windows, parts, counts = seg.split_longer_than(16)
    assert windows.tolist() == [2, 4] and counts.tolist() == [17, 17]
    assert parts.tolist() == [3, 3 + 17]
    assert seg.split_longer_than(0)[0].tolist() == [1, 2, 4, 5]
    assert (
        seg.split_longer_than(17)[0].numel() == 0
    )  # none as long: known without reading the device
    assert seg.split_longer_than(16) is seg.split_longer_than(16)


@needs_gpu
def test_counters_start_at_zero_per_chunk_count_and_stream():
    seg = segments_for(cuda_row_ptr([300, 10, 690]), 64)
    c = seg.counters(4, stream=7)
    assert c.dtype == torch.int32 and c.numel() == seg.n_split * 4 and not c.any()
    assert seg.counters(4, stream=7) is c
    assert (
        seg.counters(4, stream=8) is not c and seg.counters(2, stream=7).numel() == seg.n_split * 2
    )


def test_sddmm_segments_are_32_vectors_on_small_graphs_and_64_on_large_ones():
    from flashgnn._cuda.sddmm import seg_vectors
    from flashgnn._cuda.segments import TARGET_SEGMENTS

    assert seg_vectors(0) == seg_vectors(32 * TARGET_SEGMENTS) == 32
    assert seg_vectors(32 * TARGET_SEGMENTS + 1) == seg_vectors(10**9) == 64


def test_spmm_work_split_is_launchable_and_keeps_large_graphs_in_one_run():
    """Every (seg_vectors, ways) the SpMM picks is one the kernel takes (a power of two from 64
    to 256 vectors, 1, 2 or 4 runs); graphs of 450k+ vectors get 256-vector segments in one
    run, whatever N."""
    from flashgnn._cuda.spmm import work_split

    for n in (1, 32, 33, 128, 256):
        for n_vectors in (0, 1, 10**4, 5 * 10**4, 1.5 * 10**5, 3 * 10**5, 4.5 * 10**5, 10**8):
            seg, ways = work_split(n, n_vectors)
            assert seg in (64, 128, 256) and ways in (1, 2, 4)
            if n_vectors >= 450_000:
                assert (seg, ways) == (256, 1)


def test_fp32_spmm_work_split_covers_n_with_the_fewest_lanes():
    """Lanes x features cover N (at most a warp, then feature tiles); graphs of few vectors
    get 64-vector segments and at most 16 lanes, mid-sized ones above N = 128 256-vector
    segments and at most 16 lanes, and at most 16 lanes below 250k vectors; larger ones
    segments_for's default."""
    from flashgnn._cuda.spmm_fp32 import work_split

    assert work_split(32, 10**6, 4) == (None, 8)
    assert work_split(256, 10**6, 4) == (None, 32)
    assert work_split(7, 10**6, 1) == (None, 8)
    assert work_split(1, 10**6, 1) == (None, 1)
    assert work_split(33, 10**6, 1) == (None, 32)  # two tiles of 32
    assert work_split(128, 10**4, 4) == (64, 16)
    assert work_split(16, 10**4, 4) == (64, 4)
    assert work_split(256, 3 * 10**5, 4) == (256, 16) and work_split(128, 3 * 10**5, 4) == (
        None,
        32,
    )
    assert work_split(128, 2 * 10**5, 4) == (None, 16)


def test_fp32_spmm_variant_by_nonzeros_per_vector_size_and_n():
    """Vectors of several nonzeros sum in registers (DENSE), the threshold rising with N; else
    shared sums above N = 64 (4 gathers in flight at N > 128 on graphs of 50k+ vectors) and
    registers below, but for large graphs of about one nonzero per vector and a large X."""
    from flashgnn._cuda.spmm_fp32 import (
        DENSE,
        REGISTERS,
        SHARED,
        SHARED_FEWER_IN_FLIGHT,
        kernel_variant,
    )

    squirrel = dict(n_vectors=302_560, nnz=396_706, n_cols=5201)  # 1.31 per vector
    chameleon = dict(n_vectors=54_116, nnz=62_742, n_cols=2277)  # 1.16
    github = dict(n_vectors=559_589, nnz=578_006, n_cols=37_700)  # 1.03
    government = dict(n_vectors=172_474, nnz=178_858, n_cols=7057)  # 1.04, X of few rows
    tiny = dict(n_vectors=466, nnz=554, n_cols=183)  # 1.19
    assert [kernel_variant(n, **squirrel) for n in (32, 128, 256)] == [DENSE] * 3
    assert [kernel_variant(n, **chameleon) for n in (32, 128, 256)] == [
        REGISTERS,
        DENSE,
        SHARED_FEWER_IN_FLIGHT,
    ]
    assert [kernel_variant(n, **github) for n in (32, 128, 256)] == [
        SHARED_FEWER_IN_FLIGHT,
        SHARED,
        SHARED_FEWER_IN_FLIGHT,
    ]
    assert kernel_variant(32, **government) == REGISTERS
    assert kernel_variant(128, 2**20, 2**20, 2**20) == SHARED_FEWER_IN_FLIGHT
    assert [kernel_variant(n, **tiny) for n in (32, 128, 256)] == [REGISTERS, SHARED, SHARED]
    assert kernel_variant(128, 0, 0, 0) == SHARED and kernel_variant(1, 0, 0, 0) == REGISTERS


def test_pattern_nnz_is_remembered_by_formats_and_counted_otherwise():
    from flashgnn.pattern_nnz import pattern_nnz

    rng = np.random.default_rng(0)
    a = sp.random(50, 40, density=0.2, format="csr", random_state=rng)
    f = MEBCRS.from_csr(a.indptr, a.indices, torch.from_numpy(a.data).float(), n_cols=40)
    assert pattern_nnz(f.vec_mask) == a.nnz
    assert pattern_nnz(f.vec_mask.clone()) == a.nnz  # not remembered: the mask's bits counted
    assert pattern_nnz(torch.tensor([0, 255, 1, 6], dtype=torch.uint8)) == 11


def test_tf32_spmm_on_cuda_cores_at_n_32_on_1m_vector_graphs():
    from flashgnn._cuda.spmm_fp32 import tf32_on_cuda_cores

    def on_cores(n, n_vectors, dtype=torch.float32):
        return tf32_on_cuda_cores(torch.empty(100, n, dtype=dtype), n_vectors)

    assert on_cores(32, 2**20) and on_cores(32, 2**30)
    assert not on_cores(32, 2**20 - 1) and not on_cores(64, 2**20) and not on_cores(256, 2**30)
    assert not on_cores(16, 2**20)  # fewer than 8 lanes of 4 features
    assert not on_cores(32, 2**20, torch.float16)


def test_tf32_sddmm_on_cuda_cores_on_large_short_window_graphs():
    from flashgnn._cuda.sddmm import tf32_on_cuda_cores

    def on_cores(k_dim, n_vectors, n_windows, dtype=torch.float32, offset=0):
        x = torch.zeros(8 * k_dim + offset, dtype=dtype)[offset:].view(8, k_dim)
        return tf32_on_cuda_cores(x, x, n_vectors, n_windows)

    assert (
        on_cores(4, 2**20, 2**14) and on_cores(128, 2**20, 2**14) and on_cores(256, 2**20, 2**14)
    )  # 64 a window
    assert not on_cores(128, 2**20 - 1, 2**14) and not on_cores(256, 1000, 100)
    assert not on_cores(128, 2**20, 2**10)  # 1024 a window: column-ordered segments
    assert not on_cores(256 + 4, 2**20, 2**14)  # beyond the rows kernel
    assert not on_cores(32, 2**20, 2**14, dtype=torch.float16)
    assert not on_cores(34, 2**20, 2**14) and not on_cores(
        32, 2**20, 2**14, offset=1
    )  # 16-byte loads


def test_spmm_rejects_a_run_count_its_blocks_cannot_hold():
    from flashgnn import MEBCRS
    from flashgnn._cuda.spmm import spmm_tensor_core

    a = MEBCRS.from_csr(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), n_cols=2)
    with pytest.raises(ValueError, match="ways must be 1, 2 or 4"):
        spmm_tensor_core(
            a.row_ptr,
            a.col_idx,
            a.vec_mask,
            a.values,
            torch.ones(2, 8),
            2,
            a.k,
            "fp16",
            torch.float16,
            ways=3,
        )


@needs_gpu
def test_column_order_sorts_by_first_column_and_keeps_the_segments(monkeypatch):
    """Long-row patterns: the same segments, ordered by the column of their first vector
    (window order among equal columns); other patterns, or no col_idx: longest first."""
    rng = np.random.default_rng(3)
    vectors = [300, 0, 70, 513, 129]
    row_ptr = cuda_row_ptr(vectors)
    col_idx = (
        torch.from_numpy(
            np.concatenate([np.sort(rng.choice(1000, nv, replace=False)) for nv in vectors])
        )
        .to(torch.int32)
        .cuda()
    )
    monkeypatch.setattr(segments, "COLUMN_ORDER_MIN_VECTORS", 1)
    monkeypatch.setattr(segments, "COLUMN_ORDER_WINDOW_VECTORS", sum(vectors) // len(vectors))
    by_length = segments_for(row_ptr, 64)
    by_column = segments_for(row_ptr, 64, col_idx)
    assert (
        segments_for(row_ptr, 64) is by_length and segments_for(row_ptr, 64, col_idx) is by_column
    )
    key = [(int(col_idx[f]), int(w)) for f, w in zip(by_column.first, by_column.window)]
    assert key == sorted(key)

    def rows(s):
        fields = (s.window, s.first, s.count, s.part, s.split)
        return sorted(zip(*(t.tolist() for t in fields)))

    assert rows(by_column) == rows(by_length)
    for name in ("split_window", "split_part", "split_count"):
        assert torch.equal(getattr(by_column, name), getattr(by_length, name))
    monkeypatch.setattr(segments, "COLUMN_ORDER_WINDOW_VECTORS", sum(vectors))  # rows too short now
    assert segments.column_ordered(sum(vectors), len(vectors)) is False


def test_spmm_lanes_take_8_features_only_on_wide_work_and_tf32_only_on_huge_graphs():
    """8 features per lane need N > 64 and, for 16-bit storage, n_vectors x N past
    WIDE_LANES_MIN_WORK; tf32 gathers 16-byte groups at 4 already and takes 8 only from
    TF32_WIDE_LANES_MIN_VECTORS vectors."""
    from flashgnn._cuda.spmm import TF32_WIDE_LANES_MIN_VECTORS, WIDE_LANES_MIN_WORK, lane_features

    mid = WIDE_LANES_MIN_WORK // 128  # 100k vectors: wide work at N = 128
    assert lane_features(128, mid, "fp16") == lane_features(128, mid, "bf16") == 8
    assert lane_features(128, mid - 1, "fp16") == 4
    assert lane_features(64, 10**8, "fp16") == lane_features(64, 10**8, "tf32") == 4
    assert lane_features(256, TF32_WIDE_LANES_MIN_VECTORS - 1, "tf32") == 4
    assert lane_features(128, TF32_WIDE_LANES_MIN_VECTORS, "tf32") == 8
    assert lane_features(16, 10**8, "tf32") == 2
