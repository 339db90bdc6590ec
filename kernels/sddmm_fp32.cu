// The exact fp32 SDDMM on CUDA cores: out[slot(i, j)] = x[i] . y[j] for every nonzero (i, j)
// of A, written straight into A's ME-BCRS value layout; padding slots get exactly 0.
//
// One warp per window segment (at most seg_vectors vectors), one lane per vector: in batches
// of 32 vectors, lane j gathers row y[col_j] and forms its dot products with the window's 8
// rows of x, which the warp stages in shared memory a chunk of KC features at a time (every
// lane reads the same x word: a broadcast). Only the rows whose vec_mask bit is set are
// multiplied; the products of a row accumulate in fp32 in feature order, as a dot product
// does. With K a multiple of 4 and 16-byte aligned rows, y is read in 16-byte loads.
#include "common.cuh"

namespace fg::sddmm32 {

constexpr int WARPS = 4;  // per block (sddmm.py: WARPS_PER_BLOCK)
constexpr int KC = 64;    // features of x staged per chunk

template <bool VEC>
__device__ __forceinline__ void dot_chunk(float (&acc)[WINDOW], const float* __restrict__ yrow, const float* xs,
                                          int len, u32 mask) {
    if constexpr (VEC) {
        for (int c = 0; c < len; c += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(yrow + c));
#pragma unroll
            for (int r = 0; r < WINDOW; ++r) {
                if ((mask >> r) & 1) {
                    const float* xr = xs + r * KC + c;
                    acc[r] = fmaf(xr[0], v.x, acc[r]);
                    acc[r] = fmaf(xr[1], v.y, acc[r]);
                    acc[r] = fmaf(xr[2], v.z, acc[r]);
                    acc[r] = fmaf(xr[3], v.w, acc[r]);
                }
            }
        }
    } else {
        for (int c = 0; c < len; ++c) {
            const float v = __ldg(yrow + c);
#pragma unroll
            for (int r = 0; r < WINDOW; ++r) {
                if ((mask >> r) & 1) acc[r] = fmaf(xs[r * KC + c], v, acc[r]);
            }
        }
    }
}

// x [n_rows, K], y [n_cols, K] fp32; out [8 * n_vectors]; format block width k.
template <bool VEC>
__global__ void __launch_bounds__(32 * WARPS) sddmm_fp32(const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                                                         const int* __restrict__ seg_window, const i64* __restrict__ seg_first,
                                                         const int* __restrict__ seg_count, i64 n_segments, int n_rows,
                                                         int kdim, int k, const float* __restrict__ x,
                                                         const float* __restrict__ y, float* __restrict__ out) {
    __shared__ float staged[WARPS][WINDOW * KC];
    const i64 seg = (i64)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (seg >= n_segments) return;
    const int lane = threadIdx.x & 31;
    float* xs = staged[threadIdx.x >> 5];
    const i64 first = seg_first[seg];
    const int count = seg_count[seg];
    const i64 row0 = (i64)seg_window[seg] * WINDOW;
    for (int j0 = 0; j0 < count; j0 += 32) {
        const int j = j0 + lane;
        const bool active = j < count;
        const u32 mask = active ? vec_mask[first + j] : 0u;
        const float* yrow = y + (i64)(active ? col_idx[first + j] : 0) * kdim;
        float acc[WINDOW] = {};
        for (int c0 = 0; c0 < kdim; c0 += KC) {
            const int len = min(KC, kdim - c0);
            __syncwarp();
            for (int e = lane; e < WINDOW * KC; e += 32) {
                const int r = e / KC, c = e % KC;
                xs[e] = c < len && row0 + r < n_rows ? x[(row0 + r) * kdim + c0 + c] : 0.f;
            }
            __syncwarp();
            if (active) dot_chunk<VEC>(acc, yrow + c0, xs, len, mask);
        }
        if (active) {
            const int b0 = j / k * k;
            const int kb = min(k, count - b0);
            float* dst = out + WINDOW * (first + b0) + (j - b0);
#pragma unroll
            for (int r = 0; r < WINDOW; ++r) dst[r * kb] = acc[r];
        }
    }
}

}  // namespace fg::sddmm32
