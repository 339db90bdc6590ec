// Edge softmax over ME-BCRS values, forward and backward, fp32.
//
// Forward: out = exp(s - max_row) / sum_row exp(s - max_row) over each row's real nonzeros
// (vec_mask bit set), s = scale * score with scale read from the device (AGNN's beta; 1 when
// the pointer is null), rounded before the subtraction as the separate product would be;
// padding slots get exactly 0. Backward: d = p * (g - sum_row p * g).
//
// The value slots of one window are contiguous, so a warp sweeps a window's slots in order
// (coalesced) and decodes each slot's row from the layout: a full block is 8 x k row-major,
// the window's last block 8 x width. Each lane keeps one accumulator per window row (8
// registers, indexed through selects, never local memory); butterfly shuffles give every
// lane the row totals, bitwise identical across lanes and runs.
//
// Work is one warp per window segment (at most seg_vectors vectors, see common.cuh), so a
// hub window is spread over many warps:
//   edge_softmax_segments  a window held by one segment: statistics and output in one warp;
//                          a split window's segment: its partial statistics to part_stats.
//   edge_softmax_finish    one warp per segment of a split window: the window's row statistics
//                          from its segments' (each warp combines them in segment order, so
//                          all get the same bits: re-reading a few kilobytes per warp costs
//                          less than a launch in between), then the output.
// Statistics per row: forward (max, sum of exp(s - max)); backward sum of p * g. Partial
// forward sums are rescaled when combined: Z = sum_p z_p exp(m_p - M).
#include "common.cuh"

namespace fg::softmax {

constexpr unsigned ALL_LANES = 0xffffffffu;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// The slots of vectors [begin, end) of one window: 8 * (end - begin) consecutive slots.
struct SlotRun {
    const u8* mask;  // vec_mask of the run's first vector
    int rem;         // vectors from the run's first to the window's end
    int n_slots;
    int k_log2;      // log2 of the block width k

    // Row (0..7) of slot q of the run, or -1 for a padding slot. The run starts on a block
    // boundary, so block b of the run holds slots [8 k b, 8 k b + 8 width).
    __device__ __forceinline__ int row(int q) const {
        const int k = 1 << k_log2;
        const int vb = (q >> (3 + k_log2)) << k_log2;  // the block's first vector
        const int o = q & (WINDOW * k - 1);
        const int width = min(rem - vb, k);
        int r, j;
        if (width == k) {
            r = o >> k_log2;
            j = o & (k - 1);
        } else {
            r = o / width;
            j = o - r * width;
        }
        return (__ldg(mask + vb + j) >> r) & 1 ? r : -1;
    }
};

__device__ __forceinline__ SlotRun slot_run(const u8* vec_mask, const WindowSegment& s, int k_log2) {
    return SlotRun{vec_mask + s.start + s.begin, s.n_vec - s.begin, WINDOW * (s.end - s.begin), k_log2};
}

__device__ __forceinline__ i64 run_offset(const WindowSegment& s) { return WINDOW * (s.start + s.begin); }

// a[r], r in 0..7, without dynamic register indexing (which would go to local memory).
__device__ __forceinline__ float row_get(const float (&a)[WINDOW], int r) {
    float v = a[0];
#pragma unroll
    for (int i = 1; i < WINDOW; ++i) v = (i == r) ? a[i] : v;
    return v;
}

__device__ __forceinline__ void row_add(float (&a)[WINDOW], int r, float x) {
#pragma unroll
    for (int i = 0; i < WINDOW; ++i) {
        if (i == r) a[i] += x;
    }
}

// fmaxf ignores NaN; a NaN score still reaches every output of its row through the sum.
__device__ __forceinline__ void row_max(float (&a)[WINDOW], int r, float x) {
#pragma unroll
    for (int i = 0; i < WINDOW; ++i) {
        if (i == r) a[i] = fmaxf(a[i], x);
    }
}

__device__ __forceinline__ void warp_sum(float (&a)[WINDOW]) {
#pragma unroll
    for (int i = 0; i < WINDOW; ++i) {
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) a[i] += __shfl_xor_sync(ALL_LANES, a[i], m);
    }
}

__device__ __forceinline__ void warp_max(float (&a)[WINDOW]) {
#pragma unroll
    for (int i = 0; i < WINDOW; ++i) {
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) a[i] = fmaxf(a[i], __shfl_xor_sync(ALL_LANES, a[i], m));
    }
}

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

// Forward. a: scores; b: unused; sc: the scale of the scores.
struct Forward {
    static constexpr int STATS = 2;  // row max, row sum of exp(s - max)

    static __device__ __forceinline__ void stats(const SlotRun& run, const float* a, const float*, float sc,
                                                 float (&st)[STATS][WINDOW]) {
#pragma unroll
        for (int i = 0; i < WINDOW; ++i) {
            st[0][i] = neg_inf();
            st[1][i] = 0.f;
        }
#pragma unroll 4
        for (int q = lane_id(); q < run.n_slots; q += 32) {
            const int r = run.row(q);
            if (r >= 0) row_max(st[0], r, __fmul_rn(a[q], sc));
        }
        warp_max(st[0]);
#pragma unroll 4
        for (int q = lane_id(); q < run.n_slots; q += 32) {
            const int r = run.row(q);
            if (r >= 0) row_add(st[1], r, expf(__fmul_rn(a[q], sc) - row_get(st[0], r)));
        }
        warp_sum(st[1]);
    }

    // parts: the statistics of a window's segments, [count][STATS][8].
    static __device__ __forceinline__ void combine(const float* parts, int count, float (&st)[STATS][WINDOW]) {
#pragma unroll
        for (int i = 0; i < WINDOW; ++i) {
            st[0][i] = neg_inf();
            st[1][i] = 0.f;
        }
        for (int p = lane_id(); p < count; p += 32) {
#pragma unroll
            for (int i = 0; i < WINDOW; ++i) st[0][i] = fmaxf(st[0][i], parts[(p * STATS) * WINDOW + i]);
        }
        warp_max(st[0]);
        for (int p = lane_id(); p < count; p += 32) {
#pragma unroll
            for (int i = 0; i < WINDOW; ++i) {
                const float z = parts[(p * STATS + 1) * WINDOW + i];
                // a segment without the row (z = 0, m = -inf) must not turn -inf - -inf into NaN
                if (z != 0.f) st[1][i] += z * expf(parts[(p * STATS) * WINDOW + i] - st[0][i]);
            }
        }
        warp_sum(st[1]);
    }

    static __device__ __forceinline__ void write(const SlotRun& run, const float* a, const float*, float sc,
                                                 const float (&st)[STATS][WINDOW], float* out) {
#pragma unroll 4
        for (int q = lane_id(); q < run.n_slots; q += 32) {
            const int r = run.row(q);
            out[q] = r >= 0 ? expf(__fmul_rn(a[q], sc) - row_get(st[0], r)) / row_get(st[1], r) : 0.f;
        }
    }
};

// Backward. a: the forward's output p; b: the output gradient g; the scale is not used.
struct Backward {
    static constexpr int STATS = 1;  // row sum of p * g

    static __device__ __forceinline__ void stats(const SlotRun& run, const float* a, const float* b, float,
                                                 float (&st)[STATS][WINDOW]) {
#pragma unroll
        for (int i = 0; i < WINDOW; ++i) st[0][i] = 0.f;
#pragma unroll 4
        for (int q = lane_id(); q < run.n_slots; q += 32) {
            const int r = run.row(q);
            if (r >= 0) row_add(st[0], r, a[q] * b[q]);
        }
        warp_sum(st[0]);
    }

    static __device__ __forceinline__ void combine(const float* parts, int count, float (&st)[STATS][WINDOW]) {
#pragma unroll
        for (int i = 0; i < WINDOW; ++i) st[0][i] = 0.f;
        for (int p = lane_id(); p < count; p += 32) {
#pragma unroll
            for (int i = 0; i < WINDOW; ++i) st[0][i] += parts[p * WINDOW + i];
        }
        warp_sum(st[0]);
    }

    static __device__ __forceinline__ void write(const SlotRun& run, const float* a, const float* b, float,
                                                 const float (&st)[STATS][WINDOW], float* out) {
#pragma unroll 4
        for (int q = lane_id(); q < run.n_slots; q += 32) {
            const int r = run.row(q);
            out[q] = r >= 0 ? a[q] * (b[q] - row_get(st[0], r)) : 0.f;
        }
    }
};

// Lanes 0..7 store row `lane` of every statistic: dst[t * 8 + lane].
template <int STATS>
__device__ __forceinline__ void store_stats(const float (&st)[STATS][WINDOW], float* dst) {
    const int lane = lane_id();
    if (lane < WINDOW) {
#pragma unroll
        for (int t = 0; t < STATS; ++t) dst[t * WINDOW + lane] = row_get(st[t], lane);
    }
}

__device__ __forceinline__ i64 global_warp() { return fg::global_thread() >> 5; }

template <class Op>
__global__ void edge_softmax_segments(const i64* __restrict__ row_ptr, const u8* __restrict__ vec_mask,
                                      const float* __restrict__ a, const float* __restrict__ b,
                                      const float* __restrict__ scale, float* __restrict__ out,
                                      const int* __restrict__ seg_window,
                                      const int* __restrict__ seg_begin, const int* __restrict__ seg_part,
                                      i64 n_segments, int seg_vectors, int k_log2,
                                      float* __restrict__ part_stats) {
    const i64 seg = global_warp();
    if (seg >= n_segments) return;
    const WindowSegment s = window_segment(row_ptr, seg_window, seg_begin, seg_part, seg, seg_vectors);
    const SlotRun run = slot_run(vec_mask, s, k_log2);
    const i64 off = run_offset(s);
    const float sc = scale ? __ldg(scale) : 1.f;
    float st[Op::STATS][WINDOW];
    Op::stats(run, a + off, b + off, sc, st);
    if (s.part < 0) Op::write(run, a + off, b + off, sc, st, out + off);
    else store_stats<Op::STATS>(st, part_stats + (i64)s.part * Op::STATS * WINDOW);
}

template <class Op>
__global__ void edge_softmax_finish(const i64* __restrict__ row_ptr, const u8* __restrict__ vec_mask,
                                    const float* __restrict__ a, const float* __restrict__ b,
                                    const float* __restrict__ scale, float* __restrict__ out,
                                    const int* __restrict__ split_window,
                                    const int* __restrict__ split_part, const int* __restrict__ split_count,
                                    i64 n_split, i64 n_parts, int seg_vectors, int k_log2,
                                    const float* __restrict__ part_stats) {
    const i64 part = global_warp();
    if (part >= n_parts) return;
    // the split window holding this part: the last w with split_part[w] <= part
    i64 lo = 0, hi = n_split - 1;
    while (lo < hi) {
        const i64 mid = (lo + hi + 1) >> 1;
        if (split_part[mid] <= part) lo = mid;
        else hi = mid - 1;
    }
    const int begin = (int)(part - split_part[lo]) * seg_vectors;
    const WindowSegment s = window_segment_at(row_ptr, split_window[lo], begin, (int)part, seg_vectors);
    const SlotRun run = slot_run(vec_mask, s, k_log2);
    const i64 off = run_offset(s);
    // every warp of the window combines its segments' statistics in the same order: equal bits
    float st[Op::STATS][WINDOW];
    Op::combine(part_stats + (i64)split_part[lo] * Op::STATS * WINDOW, split_count[lo], st);
    Op::write(run, a + off, b + off, scale ? __ldg(scale) : 1.f, st, out + off);
}

}  // namespace fg::softmax
