// AGNN's attention forward in one pass (FlashAttention-2 style) on CUDA cores: for each row i of
// A, out_i = sum_j p_ij x_j with p_ij = softmax_j(beta * u_i . u_j) over the row's nonzeros,
// without writing a score: the scores, an online softmax and the weighted sum of X's rows run in
// one kernel, which keeps per row only its max m and its sum l of exp(s - m) (fp32 [n_rows],
// what a backward that recomputes the scores needs).
//
// One warp takes one window segment (flashgnn/_cuda/segments.py) and one chunk of 32 * LF
// features (grid y): lane `lane` holds features f0 + lane + 32 i, i < LF, of the 8 window rows'
// accumulators, so its loads of X's rows are coalesced across the warp. The segment's vectors
// go by in blocks of 32, a lane per vector: the lane computes its vector's scores (a dot product
// over all features per set bit, fp32 FMAs on operands rounded as the SDDMM rounds them), the
// warp takes each row's block max, rescales the accumulators and sums by exp(m_old - m_new),
// and adds p_ij x_j for every vector of the block (its column, mask and p broadcast by
// shuffles); at the end out = acc * (1 / l). The weights stay fp32 (the three-kernel path rounds P to the SpMM's operand type).
// Every feature chunk's warp computes the same scores in the same order, so all chunks share
// one set of statistics; chunk 0 stores them.
//
// A window split over several segments: each segment leaves its unnormalised accumulators
// (workspace [n_parts, 8, F]) and statistics (part_stats [n_parts, 8, 2]: m, l) in its slot,
// and agnn_one_pass_combine merges the window's slots in slot order (M = max m_p,
// L = sum l_p exp(m_p - M), out = sum acc_p exp(m_p - M) / L): the same bits whatever order
// the segments ran in.
#include "mma.cuh"

namespace fg::agnn {

constexpr unsigned ALL_LANES = 0xffffffffu;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// A dense operand as the three-kernel path's kernels read it: the storage type (Tag) as fp32,
// rounded to tf32 when TF (tf32 operands are stored in fp32).
template <class Tag, bool TF>
__device__ __forceinline__ float operand(typename Tag::T v) {
    const float f = to_float(v, Tag());
    if constexpr (TF) return tf32_rounded(f);
    else return f;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(ALL_LANES, v, m));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(ALL_LANES, v, m);
    return v;
}

// The factor that moves sums kept against max `before` to max `after` (>= before): 1 when the
// max is unchanged, which also covers a row without a score yet (-inf on both sides).
__device__ __forceinline__ float rescale(float before, float after) {
    return before == after ? 1.f : expf(before - after);
}

// The factor of a row's accumulator that gives its output, 1 / l: 0 for a row without a nonzero
// (l = 0). A multiply by the rounded reciprocal, not a division per feature, whose slow path
// is a call that spills.
__device__ __forceinline__ float inverse_sum(float l) { return l > 0.f ? __frcp_rn(l) : 0.f; }

// unit_dst [n_rows, F]: the destinations' normalised features; unit, x [n_cols, F]: the
// sources' normalised and raw features, all in the storage type of Tag (tf32: fp32, rounded
// here); beta [1] fp32 on the device. Outputs: out [n_rows, F] in OutTag's type and
// row_max, row_sum [n_rows] fp32 for the rows of windows held by one segment; workspace
// [n_parts, 8, F] and part_stats [n_parts, 8, 2] fp32 for the segments of split windows.
template <class Tag, bool TF, int LF, class OutTag>
__global__ void __launch_bounds__(128) agnn_one_pass(
    const int* __restrict__ col_idx, const u8* __restrict__ vec_mask, const int* __restrict__ seg_window,
    const i64* __restrict__ seg_first, const int* __restrict__ seg_count, const int* __restrict__ seg_part,
    i64 n_segments, int n_rows, int n_features, const typename Tag::T* __restrict__ unit_dst,
    const typename Tag::T* __restrict__ unit, const typename Tag::T* __restrict__ x,
    const float* __restrict__ beta, typename OutTag::T* __restrict__ out, float* __restrict__ row_max,
    float* __restrict__ row_sum, float* __restrict__ workspace, float* __restrict__ part_stats) {
    wait_for_previous_kernel();
    typedef typename Tag::T T;
    const i64 seg = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (seg >= n_segments) return;  // a whole warp: the shuffles below see all 32 lanes
    const int lane = threadIdx.x & 31;
    const i64 window = seg_window[seg];
    const i64 first = seg_first[seg];
    const int count = seg_count[seg];
    const int part = seg_part[seg];
    const i64 nf = n_features;
    const int f0 = (int)blockIdx.y * 32 * LF + lane;  // this lane's features: f0 + 32 i
    const float scale = __ldg(beta);
    const T* rows = unit_dst + window * WINDOW * nf;  // row r of the window at rows + r * nf

    float m[WINDOW], l[WINDOW], acc[WINDOW][LF];
#pragma unroll
    for (int r = 0; r < WINDOW; ++r) {
        m[r] = neg_inf();
        l[r] = 0.f;
#pragma unroll
        for (int i = 0; i < LF; ++i) acc[r][i] = 0.f;
    }

    for (int j0 = 0; j0 < count; j0 += 32) {
        // this lane's vector of the block: its mask (0 past the segment), column and scores
        const int j = j0 + lane;
        u32 bits = 0;
        int col = 0;
        if (j < count) {
            bits = __ldg(vec_mask + first + j);
            col = __ldg(col_idx + first + j);
        }
        const T* ucol = unit + (i64)col * nf;
        float s[WINDOW];
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) s[r] = neg_inf();
        for (u32 b = bits; b; b &= b - 1) {  // a set bit's row is below n_rows (docs/FORMAT.md §1.6)
            const int r = __ffs(b) - 1;
            const T* urow = rows + r * nf;
            float d = 0.f;
            for (i64 f = 0; f < nf; ++f) d = fmaf(operand<Tag, TF>(urow[f]), operand<Tag, TF>(ucol[f]), d);
            const float v = __fmul_rn(d, scale);  // beta * cos rounded as the separate product
#pragma unroll
            for (int i = 0; i < WINDOW; ++i) {  // s[r] without dynamic register indexing
                if (i == r) s[i] = v;
            }
        }
        // the online softmax: the rows' new maxima, the old sums and accumulators rescaled
        float p[WINDOW];
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) {
            const float mx = fmaxf(m[r], warp_max(s[r]));
            const float a = rescale(m[r], mx);
            m[r] = mx;
            p[r] = (bits >> r) & 1 ? expf(s[r] - mx) : 0.f;
            l[r] = l[r] * a + warp_sum(p[r]);
#pragma unroll
            for (int i = 0; i < LF; ++i) acc[r][i] *= a;
        }
        // the block's vectors in order: acc[r] += p_rj * x[col_j] for each set bit r
        const int n_block = min(32, count - j0);
        for (int q = 0; q < n_block; ++q) {
            const u32 q_bits = __shfl_sync(ALL_LANES, bits, q);
            const i64 q_col = __shfl_sync(ALL_LANES, col, q);
            float xv[LF];
#pragma unroll
            for (int i = 0; i < LF; ++i) {
                const int f = f0 + 32 * i;
                xv[i] = f < n_features ? operand<Tag, TF>(__ldg(x + q_col * nf + f)) : 0.f;
            }
#pragma unroll
            for (int r = 0; r < WINDOW; ++r) {
                if ((q_bits >> r) & 1) {  // uniform across the warp
                    const float pq = __shfl_sync(ALL_LANES, p[r], q);
#pragma unroll
                    for (int i = 0; i < LF; ++i) acc[r][i] = fmaf(pq, xv[i], acc[r][i]);
                }
            }
        }
    }

    const bool stats = blockIdx.y == 0 && lane == 0;
#pragma unroll
    for (int r = 0; r < WINDOW; ++r) {
        const i64 row = window * WINDOW + r;
        if (part >= 0) {
            float* dst = workspace + ((i64)part * WINDOW + r) * nf;
#pragma unroll
            for (int i = 0; i < LF; ++i) {
                const int f = f0 + 32 * i;
                if (f < n_features) dst[f] = acc[r][i];
            }
            if (stats) {
                part_stats[((i64)part * WINDOW + r) * 2] = m[r];
                part_stats[((i64)part * WINDOW + r) * 2 + 1] = l[r];
            }
        } else if (row < n_rows) {
            const float inv = inverse_sum(l[r]);
#pragma unroll
            for (int i = 0; i < LF; ++i) {
                const int f = f0 + 32 * i;
                if (f < n_features) out[row * nf + f] = from_float(acc[r][i] * inv, OutTag());
            }
            if (stats) {
                row_max[row] = m[r];
                row_sum[row] = l[r];
            }
        }
    }
}

// The rows of split windows from their segments' slots (see the file's head): a thread per
// (split window, row, feature), the slots merged in order; the feature-0 thread stores the
// row's statistics.
template <class OutTag>
__global__ void agnn_one_pass_combine(const float* __restrict__ workspace, const float* __restrict__ part_stats,
                                      const int* __restrict__ split_window, const int* __restrict__ split_part,
                                      const int* __restrict__ split_count, i64 n_split, int n_rows,
                                      int n_features, typename OutTag::T* __restrict__ out,
                                      float* __restrict__ row_max, float* __restrict__ row_sum) {
    wait_for_previous_kernel();
    const i64 nf = n_features;
    const i64 total = n_split * WINDOW * nf;
    for (i64 idx = global_thread(); idx < total; idx += grid_stride()) {
        const i64 w = idx / (WINDOW * nf);
        const int r = (int)(idx / nf % WINDOW);
        const i64 f = idx % nf;
        const i64 row = (i64)split_window[w] * WINDOW + r;
        if (row >= n_rows) continue;
        const i64 first = split_part[w];
        const int parts = split_count[w];
        float mx = neg_inf();
        for (int p = 0; p < parts; ++p) mx = fmaxf(mx, part_stats[((first + p) * WINDOW + r) * 2]);
        float l = 0.f, acc = 0.f;
        for (int p = 0; p < parts; ++p) {
            const i64 slot = (first + p) * WINDOW + r;
            const float lp = part_stats[slot * 2 + 1];
            if (lp == 0.f) continue;  // a segment without the row: its -inf max must not meet -inf
            const float e = expf(part_stats[slot * 2] - mx);
            l += lp * e;
            acc += workspace[slot * nf + f] * e;
        }
        out[row * nf + f] = from_float(acc * inverse_sum(l), OutTag());
        if (f == 0) {
            row_max[row] = mx;
            row_sum[row] = l;
        }
    }
}

}  // namespace fg::agnn
