// ME-BCRS SDDMM on tensor cores: out[slot(i, j)] = x[i] . y[j] for every nonzero (i, j) of A,
// written straight into A's value layout; slots outside the pattern get exactly 0.
//
// One warp takes one window segment (at most seg_vectors vectors), whose column indices and
// vector masks it first stages in shared memory. Per MMA the sparse side is again the n = 8
// dimension: D (16 vectors x 8 window rows) = Y[col] (16 vectors x K) times X[window rows]^T
// (K x 8), summed over K in chunks of 32 (fp16/bf16, four m16n8k8; 16 and two at K <= 16, 8 and
// one at K <= 8) or 16 (tf32, four m16n8k4).
// The K order inside a chunk is free, so lane (g, t) loads a run of consecutive features of
// vectors g and g + 8 and of window row g with 16-byte loads, and MMA s takes the s-th pair (or
// element) of each run. The window rows' first chunk is loaded once per segment, and two groups
// of 16 vectors are gathered together. WHOLE launches (rows aligned, K a multiple of the chunk)
// gather without per-load checks (gather in mma.cuh).
#include "mma.cuh"

namespace fg {

constexpr int GROUPS = 2;  // groups of 16 vectors per loop step

// Stores D of one 16-vector group: lane (g, t) holds rows 2t, 2t + 1 of vectors j0 + g, j0 + g + 8
// (relative to the segment's first vector `first`; format block width k).
__device__ __forceinline__ void store_group(const float (&d)[4], float* out, const u8* masks, i64 first,
                                            int count, int j0, int k) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int j = j0 + g + (i >> 1) * 8;
        const int r = 2 * t + (i & 1);
        if (j < count) {
            const int b0 = j & -k;  // k, the block width, is 4 or 8
            const int kb = min(k, count - b0);
            out[WINDOW * (first + b0) + r * kb + (j - b0)] = (masks[j] >> r) & 1 ? d[i] : 0.f;
        }
    }
}

// One precision's chunk of K: the dense element type, the RUN features each lane loads per chunk
// (16 bytes; 8 or 4 for 16-bit types at K <= 16 or 8, where a chunk of 32 left lanes and MMAs
// on zeros), and the MMAs that consume them, one per 32-bit word of the run.
template <int P, int RUN_> struct SddmmChunk {
    typedef u16 T;
    static constexpr int RUN = RUN_, WORDS = RUN / 2;
    static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&ya)[WORDS], const u32 (&yb)[WORDS],
                                               const u32 (&xr)[WORDS]) {
#pragma unroll
        for (int s = 0; s < WORDS; ++s) mma_16x8x8<P>(d, ya[s], yb[s], xr[s]);
    }
};

template <int RUN_> struct SddmmChunk<TF32, RUN_> {
    typedef float T;
    static constexpr int RUN = RUN_, WORDS = RUN;
    static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&ya)[WORDS], const u32 (&yb)[WORDS],
                                               const u32 (&xr)[WORDS]) {
#pragma unroll
        for (int s = 0; s < WORDS; ++s) {
            mma_16x8x4_tf32(d, float_to_tf32(__uint_as_float(ya[s])), float_to_tf32(__uint_as_float(yb[s])),
                            float_to_tf32(__uint_as_float(xr[s])));
        }
    }
};

// Dynamic shared memory: seg_vectors column indices and vector masks per warp.
template <int P, bool WHOLE, int RUN>
__global__ void __launch_bounds__(128) sddmm_kernel(
    const int* __restrict__ col_idx, const u8* __restrict__ vec_mask, const int* __restrict__ seg_window,
    const i64* __restrict__ seg_first, const int* __restrict__ seg_count, i64 n_segments, int seg_vectors,
    int n_rows, int kdim, int k, int aligned, float* __restrict__ out,
    const typename SddmmChunk<P, RUN>::T* __restrict__ x, const typename SddmmChunk<P, RUN>::T* __restrict__ y) {
    typedef SddmmChunk<P, RUN> Chunk;
    typedef typename Chunk::T T;
    constexpr int FEATURES = 4 * Chunk::RUN;  // per chunk
    const i64 seg = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (seg >= n_segments) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const i64 first = seg_first[seg];
    const int count = seg_count[seg];
    const i64 row = (i64)seg_window[seg] * WINDOW + g;
    extern __shared__ int smem[];
    const int warp = threadIdx.x >> 5;
    int* cols = smem + warp * seg_vectors;
    u8* masks = reinterpret_cast<u8*>(smem + (blockDim.x >> 5) * seg_vectors) + warp * seg_vectors;
    for (int j = lane; j < count; j += 32) {
        cols[j] = col_idx[first + j];
        masks[j] = vec_mask[first + j];
    }
    __syncwarp();
    u32 x0[Chunk::WORDS] = {};
    if (row < n_rows) load_group<T, Chunk::RUN>(x0, x + row * kdim + t * Chunk::RUN, kdim - t * Chunk::RUN, aligned);
    for (int j0 = 0; j0 < count; j0 += 16 * GROUPS) {
        int col[GROUPS][2];
#pragma unroll
        for (int h = 0; h < 2 * GROUPS; ++h) {
            const int j = j0 + 8 * h + g;
            col[h / 2][h % 2] = j < count ? cols[j] : -1;
        }
        float d[GROUPS][4] = {};
        for (int c = 0; c < kdim; c += FEATURES) {  // uniform across the warp: mma.sync needs all lanes
            const int f0 = c + t * Chunk::RUN;
            const int valid = kdim - f0;
            u32 yv[GROUPS][2][Chunk::WORDS], xr[Chunk::WORDS] = {};
#pragma unroll
            for (int q = 0; q < GROUPS; ++q) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    gather<WHOLE, T, Chunk::RUN>(yv[q][h], y + f0, col[q][h], col[q][h] >= 0, kdim, valid, aligned);
                }
            }
            if (c == 0) {
#pragma unroll
                for (int i = 0; i < Chunk::WORDS; ++i) xr[i] = x0[i];
            } else if (row < n_rows) {
                load_group<T, Chunk::RUN>(xr, x + row * kdim + f0, valid, aligned);
            }
#pragma unroll
            for (int q = 0; q < GROUPS; ++q) Chunk::mma(d[q], yv[q][0], yv[q][1], xr);
        }
#pragma unroll
        for (int q = 0; q < GROUPS; ++q) store_group(d[q], out, masks, first, count, j0 + 16 * q, k);
    }
}

}  // namespace fg
