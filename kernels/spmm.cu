// ME-BCRS SpMM on tensor cores with swap-and-transpose: Y = A X computed as Y^T = X^T A^T.
//
// One warp computes 64 feature columns of the 8 rows of one window segment (a run of at most
// seg_vectors vectors of one window; long windows are split over several warps). Per MMA step
// the warp takes KM vectors (8 for fp16/bf16 m16n8k8, 4 for tf32 m16n8k4): the gathered dense
// rows X[col] form the left operand (16 features x KM vectors), the 8 x KM sparse block the
// right operand (n = 8 window rows), and the accumulators hold 16 features x 8 rows, fp32.
//
// Coalesced mapping of the gather: lane (g, t) loads 8 consecutive features f0 + 8g .. +7 of
// its vector(s) with 16-byte loads, so the 8 lanes sharing a vector read 64 contiguous
// features. MMA tile i (of 4) takes feature f0 + 8g + 2i as its row g and f0 + 8g + 2i + 1 as
// its row g + 8; for 16-bit operands the pairs are regrouped with byte permutes (2 features x
// 2 vectors per lane). The accumulators then hold, for rows 2t and 2t + 1 of the window, the 8
// consecutive features f0 + 8g .. +7: stores are 16- or 32-byte vectors too.
//
// A window split over several segments writes fp32 partial sums to a workspace, summed in
// segment order by spmm_reduce: the result is deterministic, with no atomics.
#include "mma.cuh"

namespace fg {

constexpr int SPMM_FEATURES = 64;  // feature columns per warp
constexpr int LANE_FEATURES = 8;   // consecutive features per lane

struct SpmmArgs {
    const i64* row_ptr;
    const int* col_idx;
    const float* values;
    const u8* vec_mask;     // bit r: row r of the vector is a real nonzero
    const int* seg_window;  // window of each segment
    const int* seg_begin;   // first vector of the segment, relative to the window
    const int* seg_part;    // workspace slot of a split window's segment, or -1
    float* workspace;       // [n_parts, 8, N] fp32 partial sums
    i64 n_segments;
    int seg_vectors;
    int n_rows;
    int n;                  // feature columns N
    int aligned;            // x and out rows are 16-byte aligned
};

// Kernel parameters shared by both SpMM kernels (cuda.core passes scalars and pointers only).
#define SPMM_PARAMS                                                                                   \
    const i64 *row_ptr, const int *col_idx, const float *values, const u8 *vec_mask, const int *seg_window,              \
        const int *seg_begin, const int *seg_part, float *workspace, i64 n_segments, int seg_vectors, \
        int n_rows, int n, int aligned
#define SPMM_ARGS                                                                                     \
    SpmmArgs {                                                                                        \
        row_ptr, col_idx, values, vec_mask, seg_window, seg_begin, seg_part, workspace, n_segments, seg_vectors, \
            n_rows, n, aligned                                                                        \
    }

// Slot of row r of vector j (relative to window start `start`, window of nv vectors), for a
// format of block width K.
template <int K>
__device__ __forceinline__ i64 value_slot(i64 start, int nv, int j, int r) {
    const int b0 = j & ~(K - 1);
    const int kb = min(K, nv - b0);
    return WINDOW * (start + b0) + r * kb + (j - b0);
}

struct Segment {  // the warp's share of the work
    int window;
    i64 start;  // first vector of the window
    int nv;     // vectors in the window
    int begin, end;
    int part;
    int f0;     // first feature of this lane
};

__device__ __forceinline__ bool locate_segment(const SpmmArgs& a, Segment& s) {
    const int n_chunks = (a.n + SPMM_FEATURES - 1) / SPMM_FEATURES;
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (warp >= a.n_segments * n_chunks) return false;
    const i64 seg = warp / n_chunks;
    const int chunk = (int)(warp - seg * n_chunks);
    s.window = a.seg_window[seg];
    s.start = a.row_ptr[s.window];
    s.nv = (int)(a.row_ptr[s.window + 1] - s.start);
    s.begin = a.seg_begin[seg];
    s.end = min(s.begin + a.seg_vectors, s.nv);
    s.part = a.seg_part[seg];
    s.f0 = chunk * SPMM_FEATURES + (threadIdx.x & 31) / 4 * LANE_FEATURES;
    return true;
}

// Stages the segment's column indices in shared memory (one coalesced pass), so the gathers of
// each step depend on a shared-memory read instead of a global one.
__device__ __forceinline__ const int* stage_columns(const SpmmArgs& a, const Segment& s, int* smem) {
    int* cols = smem + (threadIdx.x >> 5) * a.seg_vectors;
    for (int j = s.begin + (threadIdx.x & 31); j < s.end; j += 32) cols[j - s.begin] = a.col_idx[s.start + j];
    __syncwarp();
    return cols - s.begin;
}

// Value of row r of vector j, or 0 where that slot is padding (whatever it holds).
template <int K>
__device__ __forceinline__ float real_value(const SpmmArgs& a, const Segment& s, int j, int r) {
    return (a.vec_mask[s.start + j] >> r) & 1 ? __ldg(a.values + value_slot<K>(s.start, s.nv, j, r)) : 0.f;
}

// Writes rows 2t and 2t + 1 of the window (8 features each, from 4 tiles of accumulators).
template <typename OutTag>
__device__ __forceinline__ void store_rows(const SpmmArgs& a, const Segment& s, const float (&acc)[4][4],
                                           typename OutTag::T* out) {
    const int t = threadIdx.x & 3;
    const int valid = a.n - s.f0;
    if (valid <= 0) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = 2 * t + h;
        float v[LANE_FEATURES];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = acc[i][h];
            v[2 * i + 1] = acc[i][h + 2];
        }
        if (s.part >= 0) {
            float* dst = a.workspace + ((i64)s.part * WINDOW + r) * a.n + s.f0;
            if (a.aligned && valid >= LANE_FEATURES) {
                reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
                reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
            } else {
                for (int e = 0; e < min(valid, LANE_FEATURES); ++e) dst[e] = v[e];
            }
            continue;
        }
        const i64 row = (i64)s.window * WINDOW + r;
        if (row >= a.n_rows) continue;
        typename OutTag::T* dst = out + row * a.n + s.f0;
        if (a.aligned && valid >= LANE_FEATURES) {
            if (sizeof(typename OutTag::T) == 4) {
                reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
                reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
            } else {
                u32 w[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    w[i] = pack2((u16)from_float(v[2 * i], OutTag()), (u16)from_float(v[2 * i + 1], OutTag()));
                }
                reinterpret_cast<uint4*>(dst)[0] = make_uint4(w[0], w[1], w[2], w[3]);
            }
        } else {
            for (int e = 0; e < min(valid, LANE_FEATURES); ++e) dst[e] = from_float(v[e], OutTag());
        }
    }
}

constexpr int UNROLL = 2;  // MMA steps whose loads are issued together

// fp16 / bf16 operands, m16n8k8: lane (g, t) gathers vectors 2t and 2t + 1 of each step.
template <int P, int K, typename OutTag>
__global__ void __launch_bounds__(128, 8) spmm_mma16(SPMM_PARAMS, const u16* __restrict__ x,
                                                  typename OutTag::T* __restrict__ out) {
    extern __shared__ int smem[];
    const SpmmArgs a = SPMM_ARGS;
    Segment s;
    if (!locate_segment(a, s)) return;
    const int* cols = stage_columns(a, s, smem);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int valid = a.n - s.f0;
    float acc[4][4] = {};
    for (int j0 = s.begin; j0 < s.end; j0 += 8 * UNROLL) {
        u32 xw[UNROLL][2][4];
        u16 val[UNROLL][2];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int j = j0 + 8 * u + 2 * t + q;
                if (j < s.end) {
                    const i64 col = cols[j];
                    load_group<u16, LANE_FEATURES>(xw[u][q], x + col * a.n + s.f0, valid, a.aligned);
                    val[u][q] = Operand<P>::round(real_value<K>(a, s, j, g));
                } else {
#pragma unroll
                    for (int i = 0; i < 4; ++i) xw[u][q][i] = 0;
                    val[u][q] = 0;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u32 b0 = pack2(val[u][0], val[u][1]);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                mma_16x8x8<P>(acc[i], __byte_perm(xw[u][0][i], xw[u][1][i], 0x5410),
                              __byte_perm(xw[u][0][i], xw[u][1][i], 0x7632), b0);
            }
        }
    }
    store_rows<OutTag>(a, s, acc, out);
}

// tf32 operands, m16n8k4: lane (g, t) gathers vector t of each step.
template <int K, typename OutTag>
__global__ void __launch_bounds__(128, 8) spmm_tf32(SPMM_PARAMS, const float* __restrict__ x,
                                                 typename OutTag::T* __restrict__ out) {
    extern __shared__ int smem[];
    const SpmmArgs a = SPMM_ARGS;
    Segment s;
    if (!locate_segment(a, s)) return;
    const int* cols = stage_columns(a, s, smem);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int valid = a.n - s.f0;
    float acc[4][4] = {};
    for (int j0 = s.begin; j0 < s.end; j0 += 4 * UNROLL) {
        u32 xw[UNROLL][LANE_FEATURES];
        u32 b0[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int j = j0 + 4 * u + t;
            if (j < s.end) {
                const i64 col = cols[j];
                load_group<float, LANE_FEATURES>(xw[u], x + col * a.n + s.f0, valid, a.aligned);
                b0[u] = float_to_tf32(real_value<K>(a, s, j, g));
            } else {
#pragma unroll
                for (int i = 0; i < LANE_FEATURES; ++i) xw[u][i] = 0;
                b0[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                mma_16x8x4_tf32(acc[i], float_to_tf32(__uint_as_float(xw[u][2 * i])),
                                float_to_tf32(__uint_as_float(xw[u][2 * i + 1])), b0[u]);
            }
        }
    }
    store_rows<OutTag>(a, s, acc, out);
}

// out[8w + r, f] = sum over the segments of split window w of their partial sums, in order.
template <typename OutTag>
__global__ void spmm_reduce(const float* __restrict__ workspace, const int* __restrict__ split_window,
                            const int* __restrict__ split_part, const int* __restrict__ split_count,
                            i64 n_split, int n_rows, int n, typename OutTag::T* __restrict__ out) {
    const i64 total = n_split * WINDOW * n;
    for (i64 idx = global_thread(); idx < total; idx += grid_stride()) {
        const i64 s = idx / ((i64)WINDOW * n);
        const int r = (int)(idx / n % WINDOW);
        const int f = (int)(idx % n);
        const i64 row = (i64)split_window[s] * WINDOW + r;
        if (row >= n_rows) continue;
        float sum = 0.f;
        const i64 first = split_part[s];
        for (int p = 0; p < split_count[s]; ++p) sum += workspace[((first + p) * WINDOW + r) * n + f];
        out[row * n + f] = from_float(sum, OutTag());
    }
}

}  // namespace fg
