// ME-BCRS SpMM on tensor cores with swap-and-transpose: Y = A X computed as Y^T = X^T A^T.
//
// One warp computes 16 * TILES feature columns of the 8 rows of one window segment (a run of at
// most seg_vectors vectors of one window; long windows are split over several warps). Per MMA
// step the warp takes KM vectors (8 for fp16/bf16 m16n8k8, 4 for tf32 m16n8k4): the gathered
// dense rows X[col] form the left operand (16 features x KM vectors), the 8 x KM sparse block
// the right operand (n = 8 window rows), and the accumulators hold 16 features x 8 rows, fp32.
//
// Coalesced mapping of the gather: lane (g, t) loads E = 2 * TILES consecutive features
// f0 + E g .. + E - 1 of its vector(s) in 8- or 16-byte loads, so the 8 lanes sharing a vector
// read 16 * TILES contiguous features. MMA tile i takes feature f0 + E g + 2i as its row g and
// f0 + E g + 2i + 1 as its row g + 8; for 16-bit operands the pairs are regrouped with byte
// permutes (2 features x 2 vectors per lane). The accumulators then hold, for rows 2t and
// 2t + 1 of the window, the E consecutive features f0 + E g ..: stores are vectors too.
//
// A window split over several segments: each segment writes fp32 partial sums to a workspace,
// and spmm_reduce sums them in segment order: the result is deterministic, with no atomics.
// (Summing in the last segment to finish, found with an atomic counter, saves that launch but
// was 1.3x to 2.6x slower on an H200 on graphs with many split windows: the serial tail of a
// hub window's sum outlasts the kernel.)
#include "mma.cuh"

namespace fg {

struct SpmmArgs {
    const i64* row_ptr;
    const int* col_idx;
    const float* values;
    const u8* vec_mask;      // bit r: row r of the vector is a real nonzero
    const int* seg_window;   // window of each segment
    const int* seg_begin;    // first vector of the segment, relative to the window
    const int* seg_part;     // workspace slot of the segment of a split window, or -1
    float* workspace;        // [n_parts, 8, N] fp32 partial sums
    int n_segments;
    int seg_vectors;
    int n_rows;
    int n;                   // feature columns N
    int aligned;             // x and out rows are 16-byte aligned
};

// Kernel parameters shared by both SpMM kernels (cuda.core passes scalars and pointers only).
#define SPMM_PARAMS                                                                                  \
    const i64 *row_ptr, const int *col_idx, const float *values, const u8 *vec_mask,                \
        const int *seg_window, const int *seg_begin, const int *seg_part, float *workspace,         \
        int n_segments, int seg_vectors, int n_rows, int n, int aligned
#define SPMM_ARGS                                                                                    \
    SpmmArgs {                                                                                       \
        row_ptr, col_idx, values, vec_mask, seg_window, seg_begin, seg_part, workspace, n_segments, \
            seg_vectors, n_rows, n, aligned                                                         \
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
    int part;   // workspace slot when the window is split, else -1
    int f0;     // first feature of this lane
};

template <int TILES>
__device__ __forceinline__ bool locate_segment(const SpmmArgs& a, Segment& s) {
    constexpr int FEATURES = 16 * TILES;
    const unsigned n_chunks = (a.n + FEATURES - 1) / FEATURES;
    const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (warp >= (unsigned)a.n_segments * n_chunks) return false;
    const int seg = warp / n_chunks;
    const int chunk = warp - seg * n_chunks;
    s.window = a.seg_window[seg];
    s.begin = a.seg_begin[seg];
    s.part = a.seg_part[seg];
    s.start = a.row_ptr[s.window];
    s.nv = (int)(a.row_ptr[s.window + 1] - s.start);
    s.end = min(s.begin + a.seg_vectors, s.nv);
    s.f0 = chunk * FEATURES + (threadIdx.x & 31) / 4 * (2 * TILES);
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

template <int E>
__device__ __forceinline__ void store_floats(float* dst, const float (&v)[E], int valid, bool vector) {
    if (vector && valid >= E) {
#pragma unroll
        for (int i = 0; i < E; i += 4) reinterpret_cast<float4*>(dst)[i / 4] = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
    } else {
        for (int e = 0; e < min(valid, E); ++e) dst[e] = v[e];
    }
}

template <typename OutTag, int E>
__device__ __forceinline__ void store_out(typename OutTag::T* dst, const float (&v)[E], int valid, bool vector) {
    if (sizeof(typename OutTag::T) == 4) {
        store_floats<E>(reinterpret_cast<float*>(dst), v, valid, vector);
    } else if (vector && valid >= E) {
        u32 w[E / 2];
#pragma unroll
        for (int i = 0; i < E / 2; ++i) {
            w[i] = pack2((u16)from_float(v[2 * i], OutTag()), (u16)from_float(v[2 * i + 1], OutTag()));
        }
        if (E == 8) {
            reinterpret_cast<uint4*>(dst)[0] = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
            reinterpret_cast<uint2*>(dst)[0] = make_uint2(w[0], w[1]);
        }
    } else {
        for (int e = 0; e < min(valid, E); ++e) dst[e] = from_float(v[e], OutTag());
    }
}

// Writes rows 2t and 2t + 1 of the window (E features each, from TILES tiles of accumulators),
// to the workspace when the window is split.
template <typename OutTag, int TILES>
__device__ __forceinline__ void finish_segment(const SpmmArgs& a, const Segment& s, const float (&acc)[TILES][4],
                                               typename OutTag::T* out) {
    constexpr int E = 2 * TILES;
    const int t = threadIdx.x & 3;
    const int valid = a.n - s.f0;
    if (valid <= 0) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float v[E];
#pragma unroll
        for (int i = 0; i < TILES; ++i) {
            v[2 * i] = acc[i][h];
            v[2 * i + 1] = acc[i][h + 2];
        }
        const i64 row = (i64)s.window * WINDOW + 2 * t + h;
        if (s.part >= 0) {
            store_floats<E>(a.workspace + ((i64)s.part * WINDOW + 2 * t + h) * a.n + s.f0, v, valid, a.aligned);
        } else if (row < a.n_rows) {
            store_out<OutTag, E>(out + row * a.n + s.f0, v, valid,
                                 a.aligned && E * sizeof(typename OutTag::T) % 16 == 0);
        }
    }
}

constexpr int UNROLL = 2;  // MMA steps whose loads are issued together

// fp16 / bf16 operands, m16n8k8: lane (g, t) gathers vectors 2t and 2t + 1 of each step.
template <int P, int K, int TILES, typename OutTag>
__global__ void __launch_bounds__(128, 8) spmm_mma16(SPMM_PARAMS, const u16* __restrict__ x,
                                                     typename OutTag::T* __restrict__ out) {
    constexpr int E = 2 * TILES, WORDS = TILES;  // halves and 32-bit words per lane and vector
    extern __shared__ int smem[];
    const SpmmArgs a = SPMM_ARGS;
    Segment s;
    if (!locate_segment<TILES>(a, s)) return;
    const int* cols = stage_columns(a, s, smem);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int valid = a.n - s.f0;
    float acc[TILES][4] = {};
    for (int j0 = s.begin; j0 < s.end; j0 += 8 * UNROLL) {
        u32 xw[UNROLL][2][WORDS];
        u16 val[UNROLL][2];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int j = j0 + 8 * u + 2 * t + q;
                if (j < s.end) {
                    const i64 col = cols[j];
                    load_group<u16, E>(xw[u][q], x + col * a.n + s.f0, valid, a.aligned);
                    val[u][q] = Operand<P>::round(real_value<K>(a, s, j, g));
                } else {
#pragma unroll
                    for (int i = 0; i < WORDS; ++i) xw[u][q][i] = 0;
                    val[u][q] = 0;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u32 b0 = pack2(val[u][0], val[u][1]);
#pragma unroll
            for (int i = 0; i < TILES; ++i) {
                mma_16x8x8<P>(acc[i], __byte_perm(xw[u][0][i], xw[u][1][i], 0x5410),
                              __byte_perm(xw[u][0][i], xw[u][1][i], 0x7632), b0);
            }
        }
    }
    finish_segment<OutTag, TILES>(a, s, acc, out);
}

// tf32 operands, m16n8k4: lane (g, t) gathers vector t of each step.
template <int K, int TILES, typename OutTag>
__global__ void __launch_bounds__(128, 8) spmm_tf32(SPMM_PARAMS, const float* __restrict__ x,
                                                    typename OutTag::T* __restrict__ out) {
    constexpr int E = 2 * TILES;
    extern __shared__ int smem[];
    const SpmmArgs a = SPMM_ARGS;
    Segment s;
    if (!locate_segment<TILES>(a, s)) return;
    const int* cols = stage_columns(a, s, smem);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int valid = a.n - s.f0;
    float acc[TILES][4] = {};
    for (int j0 = s.begin; j0 < s.end; j0 += 4 * UNROLL) {
        u32 xw[UNROLL][E];
        u32 b0[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int j = j0 + 4 * u + t;
            if (j < s.end) {
                const i64 col = cols[j];
                load_group<float, E>(xw[u], x + col * a.n + s.f0, valid, a.aligned);
                b0[u] = float_to_tf32(real_value<K>(a, s, j, g));
            } else {
#pragma unroll
                for (int i = 0; i < E; ++i) xw[u][i] = 0;
                b0[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int i = 0; i < TILES; ++i) {
                mma_16x8x4_tf32(acc[i], float_to_tf32(__uint_as_float(xw[u][2 * i])),
                                float_to_tf32(__uint_as_float(xw[u][2 * i + 1])), b0[u]);
            }
        }
    }
    finish_segment<OutTag, TILES>(a, s, acc, out);
}

// out[8w + r, f] = sum over the segments of split window w of their partial sums, in order.
// The exact fp32 SpMM (spmm_fp32.cu) finishes its split windows with it too.
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
