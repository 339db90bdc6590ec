// ME-BCRS SDDMM on tensor cores: out[slot(i, j)] = x[i] . y[j] for every nonzero (i, j) of A,
// written straight into A's value layout; slots outside the pattern get exactly 0.
//
// One warp takes one window segment (at most seg_vectors vectors). Per MMA the sparse side is
// again the n = 8 dimension: D (16 vectors x 8 window rows) = Y[col] (16 vectors x K) times
// X[window rows]^T (K x 8), summed over K in steps of 8 (fp16/bf16, m16n8k8) or 4 (tf32,
// m16n8k4). The K order inside a step is free, so lane (g, t) loads a run of consecutive
// features of vectors g and g + 8 and of window row g with 16-byte loads, and MMA step s takes
// the s-th pair (or element) of each run.
#include "mma.cuh"

namespace fg {

__device__ __forceinline__ i64 slot_of(i64 start, int nv, int j, int r, int k) {
    const int b = j / k;
    const int kb = min(k, nv - b * k);
    return WINDOW * (start + (i64)b * k) + (i64)r * kb + (j - b * k);
}

// Stores D of one 16-vector group: lane (g, t) holds rows 2t, 2t + 1 of vectors j0 + g, j0 + g + 8.
__device__ __forceinline__ void store_group(const float (&d)[4], float* out, const u8* vec_mask, i64 start,
                                            int nv, int j0, int end, int k) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int j = j0 + g + (i >> 1) * 8;
        const int r = 2 * t + (i & 1);
        if (j < end) {
            const bool real = (vec_mask[start + j] >> r) & 1;
            out[slot_of(start, nv, j, r, k)] = real ? d[i] : 0.f;
        }
    }
}

// One precision's chunk of K: the dense element type, the features each lane loads per chunk
// (16 bytes), and the four MMAs that consume them.
template <int P> struct SddmmChunk {
    typedef u16 T;
    static constexpr int RUN = 8;
    static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&ya)[4], const u32 (&yb)[4],
                                               const u32 (&xr)[4]) {
#pragma unroll
        for (int s = 0; s < 4; ++s) mma_16x8x8<P>(d, ya[s], yb[s], xr[s]);
    }
};

template <> struct SddmmChunk<TF32> {
    typedef float T;
    static constexpr int RUN = 4;
    static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&ya)[4], const u32 (&yb)[4],
                                               const u32 (&xr)[4]) {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            mma_16x8x4_tf32(d, float_to_tf32(__uint_as_float(ya[s])), float_to_tf32(__uint_as_float(yb[s])),
                            float_to_tf32(__uint_as_float(xr[s])));
        }
    }
};

template <int P>
__global__ void __launch_bounds__(128) sddmm_kernel(
    const i64* __restrict__ row_ptr, const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
    const int* __restrict__ seg_window, const int* __restrict__ seg_begin, i64 n_segments, int seg_vectors,
    int n_rows, int kdim, int k, int aligned, float* __restrict__ out,
    const typename SddmmChunk<P>::T* __restrict__ x, const typename SddmmChunk<P>::T* __restrict__ y) {
    typedef SddmmChunk<P> Chunk;
    const i64 seg = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (seg >= n_segments) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int w = seg_window[seg];
    const i64 start = row_ptr[w];
    const int nv = (int)(row_ptr[w + 1] - start);
    const int begin = seg_begin[seg], end = min(begin + seg_vectors, nv);
    const i64 row = (i64)w * WINDOW + g;
    // the segment's column indices, staged in shared memory
    extern __shared__ int smem[];
    int* cols = smem + (threadIdx.x >> 5) * seg_vectors - begin;
    for (int j = begin + lane; j < end; j += 32) cols[j] = col_idx[start + j];
    __syncwarp();
    for (int j0 = begin; j0 < end; j0 += 16) {
        const int ja = j0 + g, jb = j0 + g + 8;
        const i64 ca = ja < end ? cols[ja] : -1;
        const i64 cb = jb < end ? cols[jb] : -1;
        float d[4] = {};
        for (int c = 0; c < kdim; c += 4 * Chunk::RUN) {  // uniform across the warp: mma.sync needs all lanes
            const int f0 = c + t * Chunk::RUN;
            const int valid = kdim - f0;
            u32 ya[4] = {}, yb[4] = {}, xr[4] = {};
            if (ca >= 0) load_group<typename Chunk::T, Chunk::RUN>(ya, y + ca * kdim + f0, valid, aligned);
            if (cb >= 0) load_group<typename Chunk::T, Chunk::RUN>(yb, y + cb * kdim + f0, valid, aligned);
            if (row < n_rows) load_group<typename Chunk::T, Chunk::RUN>(xr, x + row * kdim + f0, valid, aligned);
            Chunk::mma(d, ya, yb, xr);
        }
        store_group(d, out, vec_mask, start, nv, j0, end, k);
    }
}

}  // namespace fg
