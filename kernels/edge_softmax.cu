// Edge softmax over ME-BCRS values, forward and backward, fp32.
//
// Forward: out = exp(s - max_row) / sum_row exp(s - max_row) over each row's real nonzeros
// (vec_mask bit set); padding slots get exactly 0. The scores s come from one of two sources:
//   StoredScores  scale * score read from the value layout, with scale read from the device
//                 (AGNN's beta; 1 when the pointer is null), rounded before the subtraction as
//                 the separate product would be;
//   GatScores     GAT's leaky_relu(er_i + el_j), computed from the slot's row i and column j
//                 instead of read: the bits of the rank-2 SDDMM [er, 1] . [1, el] (one rounding)
//                 followed by torch's leaky ReLU, without the two passes over a slot-sized
//                 tensor that those ops cost.
// Backward: d = p * (g - sum_row p * g), with GatScores also through the leaky ReLU
// (d, or d * slope where er_i + el_j <= 0, as torch's leaky_relu_backward).
//
// A warp takes a run of a window's vectors, a lane one vector at a time: the statistics visit
// each vector's set bits (for_each_nonzero: an 8x1 vector holds about one nonzero on power-law
// graphs, so 8 slots cost one visit, not eight), and the output is written for all 8 rows of
// the vector (write_vectors: 0 in padding slots, the vectors of a block side by side in each
// row, coalesced). Each
// lane keeps one accumulator per window row (8 registers, indexed through selects, never
// local memory); butterfly shuffles give every lane the row totals, bitwise identical across
// lanes and runs.
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

// Vectors [begin, end) of one window, whose value slots are 8 * (end - begin) consecutive
// slots. The run starts on a block boundary, so block b of the run holds slots
// [8 k b, 8 k b + 8 width), row-major 8 x width.
struct VectorRun {
    const u8* mask;  // vec_mask of the run's first vector
    int rem;         // vectors from the run's first to the window's end
    int n_vec;       // vectors in the run
    int k_log2;      // log2 of the block width k

    // The slot of vector v's row 0 (row r's is slot + r * stride), v counted from the run's first.
    __device__ __forceinline__ void slots(int v, int& slot, int& stride) const {
        const int vb = (v >> k_log2) << k_log2;  // the block's first vector
        stride = min(rem - vb, 1 << k_log2);     // the block's width
        slot = WINDOW * vb + (v - vb);
    }
};

__device__ __forceinline__ VectorRun vector_run(const u8* vec_mask, const WindowSegment& s, int k_log2) {
    return VectorRun{vec_mask + s.start + s.begin, s.n_vec - s.begin, s.end - s.begin, k_log2};
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

// The kernels' inputs that say where scores come from (each source reads its own).
struct ScoreArgs {
    const float* scores;  // StoredScores: the value layout's scores
    const float* scale;   // StoredScores: [1] or null
    const int* col_idx;   // GatScores: the pattern's columns
    const float* er;      // GatScores: destination terms [n_rows]
    const float* el;      // GatScores: source terms [n_cols]
    float slope;          // GatScores: leaky ReLU's negative slope
    const float4* row_info;  // GatScores, backward: the forward's row records (store_row_info)
};

// A source's scores are read per vector: column(v) fetches what the vector's slots share, then
// at(slot, r, c) gives the score of its row r; in the backward, prob(p, slot, r, c) the
// forward's output there (p: the stored one).

// scale * the stored score.
struct StoredScores {
    struct Column {};
    static constexpr bool SUMS_ROWS = false;  // the backward's output is not summed per row
    const float* a;  // the run's scores
    float scale;

    __device__ __forceinline__ StoredScores(const ScoreArgs& in, const WindowSegment&, i64 off)
        : a(in.scores + off), scale(in.scale ? __ldg(in.scale) : 1.f) {}
    __device__ __forceinline__ Column column(int) const { return {}; }
    __device__ __forceinline__ float row_term(int) const { return 0.f; }
    __device__ __forceinline__ float at(int slot, int, Column) const { return __fmul_rn(a[slot], scale); }
    __device__ __forceinline__ float prob(const float* p, int slot, int, Column) const { return p[slot]; }
    __device__ __forceinline__ float backprop(float d, int, Column) const { return d; }
};

// leaky_relu(er_i + el_j) for the slot's row i and the vector's column j; in the backward
// the forward's output is computed again from the row records, as Forward::write computed it
// (the same bits, without reading P).
struct GatScores {
    using Column = float;  // el_j
    static constexpr bool SUMS_ROWS = true;  // the backward sums its output per row (er's gradient)
    const int* col;        // the run's columns
    const float* er;       // the term of the window's first row
    const float* el;
    float slope;
    const float4* info;    // the record of the window's first row (backward)

    __device__ __forceinline__ GatScores(const ScoreArgs& in, const WindowSegment& s, i64)
        : col(in.col_idx + s.start + s.begin), er(in.er + WINDOW * s.window), el(in.el), slope(in.slope),
          info(in.row_info + WINDOW * s.window) {}
    __device__ __forceinline__ float column(int v) const { return __ldg(el + __ldg(col + v)); }
    __device__ __forceinline__ float row_term(int r) const { return __ldg(er + r); }  // er holds whole windows
    // the score before the activation; r a real row
    __device__ __forceinline__ float pre(int r, float el_j) const { return __ldg(er + r) + el_j; }
    __device__ __forceinline__ float at(int, int r, float el_j) const { return leaky_relu(pre(r, el_j), slope); }
    __device__ __forceinline__ float prob(const float*, int slot, int r, float el_j) const {
        const float4 ri = __ldg(info + r);  // max, sum
        return expf(at(slot, r, el_j) - ri.x) / ri.y;
    }
    __device__ __forceinline__ float backprop(float d, int r, float el_j) const {
        return pre(r, el_j) > 0.f ? d : d * slope;
    }
};

// visit(v, bits, column(v)) for each vector v of this lane (lane, lane + 32, ...) in order,
// bits its vec_mask; the next vector's mask and column are loaded before the current one is
// visited, so two vectors' loads are in flight (the visits' own loads depend on them).
template <class Column, class Visit>
__device__ __forceinline__ void for_each_vector(const VectorRun& run, Column column, Visit visit) {
    int v = lane_id();
    if (v >= run.n_vec) return;
    u32 bits = __ldg(run.mask + v);
    auto c = column(v);
    for (; v < run.n_vec; v += 32) {
        const int next = v + 32;
        u32 next_bits = 0;
        auto next_c = c;
        if (next < run.n_vec) {
            next_bits = __ldg(run.mask + next);
            next_c = column(next);
        }
        visit(v, bits, c);
        bits = next_bits;
        c = next_c;
    }
}

// f(slot, r, column(v)) for each set bit r of each vector v of this lane (lane, lane + 32, ...):
// the slot of row r of vector v, counted from the run's first.
template <class Column, class F>
__device__ __forceinline__ void for_each_nonzero(const VectorRun& run, Column column, F f) {
    using C = decltype(column(0));
    for_each_vector(run, column, [&](int v, u32 bits, C c) {
        int slot, stride;
        run.slots(v, slot, stride);
        for (; bits; bits &= bits - 1) {
            const int r = __ffs(bits) - 1;
            f(slot + r * stride, r, c);
        }
    });
}

// out[slot] = f(slot, r, column(v)) for all 8 rows r of each vector v of this lane, 0 in the
// padding slots: the vectors of a block side by side in each row (coalesced).
template <class Column, class F>
__device__ __forceinline__ void write_vectors(const VectorRun& run, Column column, float* out, F f) {
    using C = decltype(column(0));
    for_each_vector(run, column, [&](int v, u32 bits, C c) {
        int slot, stride;
        run.slots(v, slot, stride);
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) {
            const int q = slot + r * stride;
            float x = 0.f;
            if ((bits >> r) & 1) x = f(q, r, c);
            out[q] = x;
        }
    });
}

// Forward. a, b: unused (the scores come from Scores).
template <class Scores>
struct Forward {
    using Source = Scores;
    using Column = typename Scores::Column;  // named in lambdas: NVRTC 13.0 takes generic ones for host code
    static constexpr bool FORWARD = true;  // stores row records (store_row_info) when asked
    static constexpr int STATS = 2;  // row max, row sum of exp(s - max)

    static __device__ __forceinline__ void stats(const VectorRun& run, const Scores& sc, const float*, const float*,
                                                 float (&st)[STATS][WINDOW]) {
#pragma unroll
        for (int i = 0; i < WINDOW; ++i) {
            st[0][i] = neg_inf();
            st[1][i] = 0.f;
        }
        const auto column = [&](int v) { return sc.column(v); };
        for_each_nonzero(run, column, [&](int q, int r, Column c) { row_max(st[0], r, sc.at(q, r, c)); });
        warp_max(st[0]);
        for_each_nonzero(run, column, [&](int q, int r, Column c) {
            row_add(st[1], r, expf(sc.at(q, r, c) - row_get(st[0], r)));
        });
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

    static __device__ __forceinline__ void write(const VectorRun& run, const Scores& sc, const float*, const float*,
                                                 const float (&st)[STATS][WINDOW], float* out, float (&)[WINDOW]) {
        write_vectors(run, [&](int v) { return sc.column(v); }, out,
                      [&](int q, int r, Column c) { return expf(sc.at(q, r, c) - st[0][r]) / st[1][r]; });
    }
};

// Backward. a: the forward's output p (StoredScores; GatScores computes it); b: the output
// gradient g; Scores: also the activation's derivative (GatScores) or none (StoredScores; the
// scale is not used).
template <class Scores>
struct Backward {
    using Source = Scores;
    using Column = typename Scores::Column;
    static constexpr bool FORWARD = false;
    static constexpr int STATS = 1;  // row sum of p * g

    static __device__ __forceinline__ void stats(const VectorRun& run, const Scores& sc, const float* a, const float* b,
                                                 float (&st)[STATS][WINDOW]) {
#pragma unroll
        for (int i = 0; i < WINDOW; ++i) st[0][i] = 0.f;
        for_each_nonzero(run, [&](int v) { return sc.column(v); },
                         [&](int q, int r, Column c) { row_add(st[0], r, sc.prob(a, q, r, c) * b[q]); });
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

    // sums: this lane's sums per row of what it wrote (GAT: the gradient of er)
    static __device__ __forceinline__ void write(const VectorRun& run, const Scores& sc, const float* a, const float* b,
                                                 const float (&st)[STATS][WINDOW], float* out,
                                                 float (&sums)[WINDOW]) {
        write_vectors(run, [&](int v) { return sc.column(v); }, out, [&](int q, int r, Column c) {
            const float d = sc.backprop(sc.prob(a, q, r, c) * (b[q] - st[0][r]), r, c);
            if constexpr (Scores::SUMS_ROWS) sums[r] += d;
            return d;
        });
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

// Lanes 0..7 store row `lane`'s record of the forward's statistics and score term,
// dst[lane] = (max, sum of exp(s - max), the row's term, 0), which a reader gathers in one load.
template <class Scores>
__device__ __forceinline__ void store_row_info(const float (&st)[2][WINDOW], const Scores& sc, float4* dst) {
    const int lane = lane_id();
    if (lane < WINDOW) dst[lane] = make_float4(row_get(st[0], lane), row_get(st[1], lane), sc.row_term(lane), 0.f);
}

// The backward's row sums of a split window: each segment's warp leaves its own (summed over
// the warp) in part_sums, and the warp that counts last adds the window's in segment order
// (lane r + 8 g takes row r of segments g, g + 4, ...; the four groups added in order: the
// same bits whichever warp is last) into dst, then resets the counter for the next launch.
__device__ __forceinline__ void sum_split_rows(const float (&sums)[WINDOW], float* part_sums, int* counter,
                                               int first_part, int count, int part, float* dst) {
    const int lane = lane_id();
    if (lane < WINDOW) part_sums[(i64)part * WINDOW + lane] = row_get(sums, lane);
    if (!last_to_arrive(counter, count)) return;
    const int r = lane & (WINDOW - 1);
    float t = 0.f;
    for (int p = lane >> 3; p < count; p += 4) t += __ldcg(part_sums + (i64)(first_part + p) * WINDOW + r);
    const float total = ((__shfl_sync(ALL_LANES, t, r) + __shfl_sync(ALL_LANES, t, r + 8)) +
                         __shfl_sync(ALL_LANES, t, r + 16)) + __shfl_sync(ALL_LANES, t, r + 24);
    if (lane < WINDOW) dst[r] = total;
    if (lane == 0) *counter = 0;
}

__device__ __forceinline__ i64 global_warp() { return fg::global_thread() >> 5; }

// The kernels' parameters: the pattern (row_ptr, vec_mask, col_idx), a and b (Op's inputs in
// the value layout; a is the forward's stored scores), then the other ScoreArgs; out the output
// in the value layout (null: the forward keeps only its row records); row_info the forward's
// row records (written by Forward when not null, read by Backward<GatScores>);
// row_sums, when not null, the backward's output summed per row [8 * n_windows] (windows
// without vectors are the caller's to zero), with part_sums [n_parts * 8] and counters
// [n_split] (zero, and left zero) for split windows.
template <class Op>
__global__ void edge_softmax_segments(const i64* __restrict__ row_ptr, const u8* __restrict__ vec_mask,
                                      const int* __restrict__ col_idx, const float* __restrict__ a,
                                      const float* __restrict__ b, const float* __restrict__ scale,
                                      const float* __restrict__ er, const float* __restrict__ el, float slope,
                                      float* __restrict__ out, const int* __restrict__ seg_window,
                                      const int* __restrict__ seg_begin, const int* __restrict__ seg_part,
                                      i64 n_segments, int seg_vectors, int k_log2,
                                      float* __restrict__ part_stats, float4* __restrict__ row_info,
                                      float* __restrict__ row_sums) {
    wait_for_previous_kernel();
    const i64 seg = global_warp();
    if (seg >= n_segments) return;
    const WindowSegment s = window_segment(row_ptr, seg_window, seg_begin, seg_part, seg, seg_vectors);
    const VectorRun run = vector_run(vec_mask, s, k_log2);
    const i64 off = run_offset(s);
    const typename Op::Source sc(ScoreArgs{a, scale, col_idx, er, el, slope, row_info}, s, off);
    float st[Op::STATS][WINDOW];
    Op::stats(run, sc, a + off, b + off, st);
    if (s.part >= 0) {
        store_stats<Op::STATS>(st, part_stats + (i64)s.part * Op::STATS * WINDOW);
        return;
    }
    float sums[WINDOW] = {};
    if (out) Op::write(run, sc, a + off, b + off, st, out + off, sums);
    if constexpr (Op::FORWARD) {
        if (row_info) store_row_info(st, sc, row_info + WINDOW * s.window);
    } else if (row_sums) {
        warp_sum(sums);
        if (lane_id() < WINDOW) row_sums[WINDOW * s.window + lane_id()] = row_get(sums, lane_id());
    }
}

template <class Op>
__global__ void edge_softmax_finish(const i64* __restrict__ row_ptr, const u8* __restrict__ vec_mask,
                                    const int* __restrict__ col_idx, const float* __restrict__ a,
                                    const float* __restrict__ b, const float* __restrict__ scale,
                                    const float* __restrict__ er, const float* __restrict__ el, float slope,
                                    float* __restrict__ out, const int* __restrict__ split_window,
                                    const int* __restrict__ split_part, const int* __restrict__ split_count,
                                    i64 n_split, i64 n_parts, int seg_vectors, int k_log2,
                                    const float* __restrict__ part_stats, float4* __restrict__ row_info,
                                    float* __restrict__ row_sums, float* __restrict__ part_sums,
                                    int* __restrict__ counters) {
    wait_for_previous_kernel();
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
    const VectorRun run = vector_run(vec_mask, s, k_log2);
    const i64 off = run_offset(s);
    const typename Op::Source sc(ScoreArgs{a, scale, col_idx, er, el, slope, row_info}, s, off);
    // every warp of the window combines its segments' statistics in the same order: equal bits
    float st[Op::STATS][WINDOW];
    Op::combine(part_stats + (i64)split_part[lo] * Op::STATS * WINDOW, split_count[lo], st);
    float sums[WINDOW] = {};
    if (out) Op::write(run, sc, a + off, b + off, st, out + off, sums);
    if constexpr (Op::FORWARD) {
        if (row_info && part == split_part[lo]) store_row_info(st, sc, row_info + WINDOW * s.window);
    } else if (row_sums) {
        warp_sum(sums);
        sum_split_rows(sums, part_sums, counters + lo, (int)split_part[lo], split_count[lo], (int)part,
                       row_sums + WINDOW * s.window);
    }
}

// GAT's attention P^T in A^T's value layout, from the forward's row records instead of moving
// P (a random read and write per nonzero): A^T's rows are A's columns (sources j, term el_j)
// and its columns A's rows (destinations i: one 16-byte record of max_i, sum_i and er_i, a
// single gather per vector). Each slot gets expf(leaky_relu(er_i + el_j) - max_i) / sum_i, the
// very operations, operands and order of Forward<GatScores>::write, so P^T holds P's bits. One
// warp per segment of A^T (split windows need no combining here), a lane per vector as in the
// softmax.
__global__ void gat_softmax_transposed(const i64* __restrict__ row_ptr, const u8* __restrict__ vec_mask,
                                       const int* __restrict__ col_idx, const float* __restrict__ el, float slope,
                                       const float4* __restrict__ row_info, float* __restrict__ out,
                                       const int* __restrict__ seg_window, const int* __restrict__ seg_begin,
                                       const int* __restrict__ seg_part, i64 n_segments, int seg_vectors,
                                       int k_log2) {
    wait_for_previous_kernel();
    const i64 seg = global_warp();
    if (seg >= n_segments) return;
    const WindowSegment s = window_segment(row_ptr, seg_window, seg_begin, seg_part, seg, seg_vectors);
    const VectorRun run = vector_run(vec_mask, s, k_log2);
    const int* col = col_idx + s.start + s.begin;
    const float* el_rows = el + WINDOW * s.window;
    write_vectors(run, [&](int v) { return __ldg(row_info + __ldg(col + v)); }, out + run_offset(s),
                  [&](int, int r, float4 info) { return gat_attention(info, __ldg(el_rows + r), slope); });
}

}  // namespace fg::softmax
