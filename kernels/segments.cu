// Work segments of an ME-BCRS pattern (flashgnn/_cuda/segments.py) built on the GPU: two passes
// around one prefix sum, so that a new pattern (a mini-batch's block) costs a few launches
// instead of dozens of torch ops.
//
//   segment_sizes  per window w: sizes[0][w] = its segments (at least one: an empty window has
//                  one empty segment), sizes[1][w] = 1 when it is split (more than one segment),
//                  sizes[2][w] = its segments when split, else 0.
//   scan (torch)   inclusive prefix sums of the three rows, in place; their last column holds
//                  (n_segments, n_split, n_parts), the only values the host reads.
//   segment_fill   one thread per segment s, in window order: its window is the first w whose
//                  inclusive segment count exceeds s (a binary search). Writes the segment's
//                  column of the table, its first vector, and for the first segment of a split
//                  window that window's column of the split table; key[s] is what the segments
//                  are then ordered by (a stable sort, ascending): seg_vectors - length (longest
//                  first) or, given col_idx, the column of the first vector.
//
//   segment_totals  run by the format builder, whose host read of n_vectors takes these along:
//                  for seg_vectors 32, 64, 128 and 256 the totals segment_sizes' scan would give
//                  (segments, split windows, their segments) and the longest window's segments,
//                  so that a later build of those segments reads nothing (a mini-batch builds
//                  segments for every new block). Warp shuffles, then one integer atomic per warp
//                  and value: exact in any order.
#include "common.cuh"

namespace fg {

constexpr int TOTAL_SIZES = 4;  // seg_vectors 32 << i; flashgnn/_cuda/segments.py: TOTALS_SIZES

__global__ void segment_totals(const i64* __restrict__ row_ptr, i64 n_windows, u64* __restrict__ totals) {
    wait_for_previous_kernel();
    u64 sum[TOTAL_SIZES][3] = {};
    u64 most[TOTAL_SIZES] = {};
    for (i64 w = global_thread(); w < n_windows; w += grid_stride()) {
        const i64 vectors = row_ptr[w + 1] - row_ptr[w];
#pragma unroll
        for (int i = 0; i < TOTAL_SIZES; ++i) {
            const i64 seg = 32 << i;
            const u64 count = vectors > seg ? (u64)((vectors + seg - 1) / seg) : 1;
            sum[i][0] += count;
            sum[i][1] += count > 1;
            sum[i][2] += count > 1 ? count : 0;
            most[i] = max(most[i], count);
        }
    }
#pragma unroll
    for (int i = 0; i < TOTAL_SIZES; ++i) {
        for (int m = 16; m > 0; m >>= 1) {
#pragma unroll
            for (int j = 0; j < 3; ++j) sum[i][j] += __shfl_xor_sync(0xffffffffu, sum[i][j], m);
            most[i] = max(most[i], __shfl_xor_sync(0xffffffffu, most[i], m));
        }
        if ((threadIdx.x & 31) == 0) {
#pragma unroll
            for (int j = 0; j < 3; ++j) atomicAdd(totals + 4 * i + j, sum[i][j]);
            atomicMax(totals + 4 * i + 3, most[i]);
        }
    }
}

__global__ void segment_sizes(const i64* __restrict__ row_ptr, i64 n_windows, int seg_vectors,
                              i64* __restrict__ sizes) {
    wait_for_previous_kernel();
    for (i64 w = global_thread(); w < n_windows; w += grid_stride()) {
        const i64 vectors = row_ptr[w + 1] - row_ptr[w];
        const i64 count = vectors > seg_vectors ? (vectors + seg_vectors - 1) / seg_vectors : 1;
        sizes[w] = count;
        sizes[n_windows + w] = count > 1;
        sizes[2 * n_windows + w] = count > 1 ? count : 0;
    }
}

// table: int32 [6, n_segments], rows window, begin (relative to the window), count, part
// (workspace slot, -1 when not split), split (index among split windows, -1), key.
// split_table: int32 [3, n_split], rows window, part of its first segment, segments.
__global__ void segment_fill(const i64* __restrict__ row_ptr, const i64* __restrict__ scan, i64 n_windows,
                             i64 n_segments, i64 n_split, int seg_vectors, const int* __restrict__ col_idx,
                             i64 n_vectors, int* __restrict__ table, i64* __restrict__ first,
                             int* __restrict__ split_table) {
    wait_for_previous_kernel();
    const i64* seg_end = scan;
    const i64* split_end = scan + n_windows;
    const i64* part_end = scan + 2 * n_windows;
    for (i64 s = global_thread(); s < n_segments; s += grid_stride()) {
        i64 lo = 0, hi = n_windows - 1;
        while (lo < hi) {
            const i64 mid = (lo + hi) >> 1;
            if (seg_end[mid] > s) hi = mid;
            else lo = mid + 1;
        }
        const i64 w = lo;
        const i64 count = seg_end[w] - (w ? seg_end[w - 1] : 0);
        const i64 j = s - (seg_end[w] - count);  // the segment's rank in its window
        const i64 begin = j * seg_vectors;
        const i64 start = row_ptr[w];
        const int length = (int)min((i64)seg_vectors, row_ptr[w + 1] - start - begin);
        const bool split = count > 1;
        const int part = split ? (int)(part_end[w] - count + j) : -1;
        const int split_index = split ? (int)(split_end[w] - 1) : -1;
        table[s] = (int)w;
        table[n_segments + s] = (int)begin;
        table[2 * n_segments + s] = length;
        table[3 * n_segments + s] = part;
        table[4 * n_segments + s] = split_index;
        // an empty last window starts at n_vectors: its key reads the last column (any would do)
        table[5 * n_segments + s] = col_idx && n_vectors ? col_idx[min(start + begin, n_vectors - 1)]
                                                         : seg_vectors - length;
        first[s] = start + begin;
        if (split && j == 0) {
            split_table[split_index] = (int)w;
            split_table[n_split + split_index] = part;
            split_table[2 * n_split + split_index] = (int)count;
        }
    }
}

}  // namespace fg
