// CSR -> ME-BCRS on the GPU, the same arrays as flashgnn.format.build_pattern.
//
// No sort and no per-window merge loop: every nonzero is handled by its own thread, so a hub
// row (or a window of eight hubs) costs O(8 log degree) per nonzero like any other row.
// Rows are sorted in CSR, so whether a column occurs in a row of the window is one binary
// search in that row.
//
//   pass 1  mark_first   first[e] = 1 when nonzero e (row r, column c) is the first occurrence
//                        of c in its window, i.e. no earlier row of the window holds c. Each
//                        vector (a distinct column of a window) has exactly one such nonzero.
//   scan    (torch)      offs = exclusive prefix sum of first, [nnz + 1]. offs[indptr[8w]] is
//                        the number of vectors before window w, i.e. row_ptr[w] (window_starts).
//   pass 2  place_nonzeros  for nonzero e: the vector's rank in its window is the number of
//                        distinct columns < c of the window = sum over the window's rows q of
//                        the first-occurrence nonzeros of q with column < c
//                        = offs[lower_bound_q(c)] - offs[indptr[q]]. The same searches give
//                        vec_mask (bit q set when row q holds c). The first occurrence writes
//                        col_idx and vec_mask of its vector (one writer per vector); every
//                        nonzero writes its slot to perm with the formula of formats/mebcrs.py.
//   values  move_values.cu  values_out[perm[i]] = values_in[i] into a zero-filled array.
//
// Only totals cross to the host (n_vectors, to allocate col_idx, vec_mask and values). Every
// read is of memory written before: indices[p] only for p inside its row, offs[p] for
// p <= nnz.
#include "common.cuh"

namespace fg {

constexpr int BUILD_THREADS = 256;
constexpr int BUILD_ITEMS = 4;  // nonzeros per thread
constexpr int BUILD_TILE = BUILD_THREADS * BUILD_ITEMS;

// The row holding nonzero e: the last r in [lo, hi] with indptr[r] <= e (so the row is not empty).
__device__ __forceinline__ i64 row_of_nonzero(const i64* __restrict__ indptr, i64 e, i64 lo, i64 hi) {
    while (lo < hi) {
        const i64 mid = (lo + hi + 1) >> 1;
        if (__ldg(indptr + mid) <= e) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// First position p in [lo, hi) with indices[p] >= c (hi when there is none).
__device__ __forceinline__ i64 lower_bound(const i64* __restrict__ indices, i64 lo, i64 hi, i64 c) {
    while (lo < hi) {
        const i64 mid = (lo + hi) >> 1;
        if (__ldg(indices + mid) < c) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Calls f(e, row) for every nonzero e of this block's tile of BUILD_TILE nonzeros and its row.
// The rows of the tile's first and last nonzero are found once per block, so each thread
// searches for its row among the tile's rows only.
template <typename F>
__device__ __forceinline__ void for_tile_nonzeros(const i64* __restrict__ indptr, i64 n_rows, i64 nnz, F f) {
    __shared__ i64 span[2];
    const i64 tile = (i64)blockIdx.x * BUILD_TILE;
    if (threadIdx.x == 0) span[0] = row_of_nonzero(indptr, tile, 0, n_rows - 1);
    if (threadIdx.x == 32) span[1] = row_of_nonzero(indptr, min(tile + BUILD_TILE, nnz) - 1, 0, n_rows - 1);
    __syncthreads();
    for (int it = 0; it < BUILD_ITEMS; ++it) {
        const i64 e = tile + it * BUILD_THREADS + threadIdx.x;
        if (e >= nnz) break;
        f(e, row_of_nonzero(indptr, e, span[0], span[1]));
    }
}

__global__ void mark_first(const i64* __restrict__ indptr, const i64* __restrict__ indices,
                           u8* __restrict__ first, i64 n_rows, i64 nnz) {
    wait_for_previous_kernel();
    for_tile_nonzeros(indptr, n_rows, nnz, [&](i64 e, i64 row) {
        const i64 c = __ldg(indices + e);
        u8 is_first = 1;
        for (i64 q = row & ~(i64)(WINDOW - 1); q < row; ++q) {
            const i64 lo = __ldg(indptr + q), hi = __ldg(indptr + q + 1);
            const i64 p = lower_bound(indices, lo, hi, c);
            if (p < hi && __ldg(indices + p) == c) {
                is_first = 0;
                break;
            }
        }
        first[e] = is_first;
    });
}

// row_ptr[w] = offs[indptr[min(8 w, n_rows)]] for w in [0, n_windows]: the vectors before window w.
__global__ void window_starts(const i64* __restrict__ indptr, const i64* __restrict__ offs, i64 n_rows,
                              i64 n_windows, i64* __restrict__ row_ptr) {
    wait_for_previous_kernel();
    for (i64 w = global_thread(); w <= n_windows; w += grid_stride())
        row_ptr[w] = offs[indptr[min(w * WINDOW, n_rows)]];
}

// offs: exclusive prefix sum of mark_first's output, [nnz + 1]; k_log2: log2 of the block width.
__global__ void place_nonzeros(const i64* __restrict__ indptr, const i64* __restrict__ indices,
                               const i64* __restrict__ offs, int* __restrict__ col_idx,
                               u8* __restrict__ vec_mask, i64* __restrict__ perm, i64 n_rows, i64 nnz,
                               int k_log2) {
    wait_for_previous_kernel();
    for_tile_nonzeros(indptr, n_rows, nnz, [&](i64 e, i64 row) {
        const i64 c = __ldg(indices + e);
        const i64 row0 = row & ~(i64)(WINDOW - 1);
        const int r = (int)(row - row0);
        const i64 start = __ldg(offs + __ldg(indptr + row0));  // row_ptr[w]
        const i64 end = __ldg(offs + __ldg(indptr + min(row0 + WINDOW, n_rows)));  // row_ptr[w + 1]
        i64 rank = __ldg(offs + e) - __ldg(offs + __ldg(indptr + row));
        u32 mask = 1u << r;
#pragma unroll
        for (int q = 0; q < WINDOW; ++q) {
            if (q == r || row0 + q >= n_rows) continue;
            const i64 lo = __ldg(indptr + row0 + q), hi = __ldg(indptr + row0 + q + 1);
            const i64 p = lower_bound(indices, lo, hi, c);
            rank += __ldg(offs + p) - __ldg(offs + lo);
            if (p < hi && __ldg(indices + p) == c) mask |= 1u << q;
        }
        const i64 v = start + rank;
        if ((mask & ((1u << r) - 1)) == 0) {  // the first occurrence: the vector's only writer
            col_idx[v] = (int)c;
            vec_mask[v] = (u8)mask;
        }
        const i64 block_start = start + (((v - start) >> k_log2) << k_log2);
        const i64 width = min(end - block_start, (i64)1 << k_log2);
        perm[e] = WINDOW * block_start + r * width + (v - block_start);
    });
}

}  // namespace fg
