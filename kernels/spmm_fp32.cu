// The exact fp32 SpMM on CUDA cores, Y = A X, read straight from ME-BCRS (no CSR kept).
//
// Why ME-BCRS and not CSR: the time goes into gathering rows of X. In ME-BCRS one gathered
// row X[col] serves every nonzero of its 8x1 vector (1.03 to 1.3 on real graphs), so fewer
// rows are gathered than nonzeros, and the kernel takes the same arrays as the tensor-core
// SpMM (the op never needs the CSR, and A^T is already an ME-BCRS for the backward).
// vec_mask tells real nonzeros from padding, so only real products are formed: a padding slot
// never meets an inf or NaN of X (0 * inf would be NaN), as in the reference.
//
// One warp per (window segment, feature tile): a segment is at most seg_vectors vectors of one
// window, so a hub window is spread over many warps; a split window's segments write fp32
// partial sums to a workspace that spmm_reduce (spmm.cu) adds up in segment order, so the
// result is deterministic. Per batch of 32 vectors, lane j loads vector j's column, mask and
// real values (coalesced), then the warp walks the batch: the column, mask and values are
// broadcast by shuffles, every lane gathers its features of X[col] (16-byte loads when
// VW = 4) and adds value * x into one accumulator per window row. UNROLL gathers are issued
// before they are used, to keep loads in flight.
#include "common.cuh"

namespace fg::spmm32 {

constexpr unsigned ALL_LANES = 0xffffffffu;
constexpr int UNROLL = 4;

template <int VW>
__device__ __forceinline__ void load_features(float (&dst)[VW], const float* src) {
    if constexpr (VW == 4) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(src));
        dst[0] = t.x;
        dst[1] = t.y;
        dst[2] = t.z;
        dst[3] = t.w;
    } else {
#pragma unroll
        for (int e = 0; e < VW; ++e) dst[e] = __ldg(src + e);
    }
}

template <int VW>
__device__ __forceinline__ void store_features(float* dst, const float (&src)[VW]) {
    if constexpr (VW == 4) {
        *reinterpret_cast<float4*>(dst) = make_float4(src[0], src[1], src[2], src[3]);
    } else {
#pragma unroll
        for (int e = 0; e < VW; ++e) dst[e] = src[e];
    }
}

// Lane features: G groups of VW consecutive columns; group g starts at
// tile * 32 VW G + (32 g + lane) VW. With VW = 4, N is a multiple of 4 and x is 16-byte
// aligned (the launcher checks), so a group is either wholly inside N or wholly outside.
template <int VW, int G>
__global__ void spmm_fp32(const i64* __restrict__ row_ptr, const int* __restrict__ col_idx,
                          const u8* __restrict__ vec_mask, const float* __restrict__ values,
                          const int* __restrict__ seg_window, const int* __restrict__ seg_begin,
                          const int* __restrict__ seg_part, i64 n_segments, int seg_vectors, int k_log2,
                          i64 n_rows, int n, int n_tiles, const float* __restrict__ x, float* __restrict__ y,
                          float* __restrict__ workspace) {
    constexpr int TILE = 32 * VW * G;
    const i64 warp = fg::global_thread() >> 5;
    if (warp >= n_segments * n_tiles) return;
    const i64 seg = warp / n_tiles;
    const int lane = threadIdx.x & 31;
    const int f0 = (int)(warp - seg * n_tiles) * TILE + lane * VW;  // feature of group 0
    const WindowSegment s = window_segment(row_ptr, seg_window, seg_begin, seg_part, seg, seg_vectors);
    const int k = 1 << k_log2;

    float acc[WINDOW][G][VW] = {};
    for (int j0 = s.begin; j0 < s.end; j0 += 32) {
        const int j = j0 + lane;
        int col = 0;
        u32 mask = 0;
        float val[WINDOW];
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) val[r] = 0.f;
        if (j < s.end) {
            col = __ldg(col_idx + s.start + j);
            mask = __ldg(vec_mask + s.start + j);
            const int vb = (j >> k_log2) << k_log2;  // first vector of j's block
            const int width = min(s.n_vec - vb, k);
            const float* slot0 = values + WINDOW * (s.start + vb) + (j - vb);
#pragma unroll
            for (int r = 0; r < WINDOW; ++r) {
                if ((mask >> r) & 1) val[r] = __ldg(slot0 + r * width);
            }
        }
        const int batch = min(32, s.end - j0);  // lanes >= batch hold mask 0
        for (int u0 = 0; u0 < batch; u0 += UNROLL) {
            int cu[UNROLL];
            u32 mu[UNROLL];
            float xu[UNROLL][G][VW];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                cu[u] = __shfl_sync(ALL_LANES, col, u0 + u);
                mu[u] = __shfl_sync(ALL_LANES, mask, u0 + u);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    const int f = f0 + g * 32 * VW;
                    if (mu[u] != 0 && f < n) {
                        load_features<VW>(xu[u][g], x + (i64)cu[u] * n + f);
                    } else {
#pragma unroll
                        for (int e = 0; e < VW; ++e) xu[u][g][e] = 0.f;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
                for (int r = 0; r < WINDOW; ++r) {
                    if ((mu[u] >> r) & 1) {  // the same in every lane: no divergence
                        const float a = __shfl_sync(ALL_LANES, val[r], u0 + u);
#pragma unroll
                        for (int g = 0; g < G; ++g) {
#pragma unroll
                            for (int e = 0; e < VW; ++e) acc[r][g][e] = fmaf(a, xu[u][g][e], acc[r][g][e]);
                        }
                    }
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < WINDOW; ++r) {
        const i64 row = s.window * WINDOW + r;
        if (s.part < 0 && row >= n_rows) break;
        float* dst = s.part >= 0 ? workspace + ((i64)s.part * WINDOW + r) * n : y + row * n;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int f = f0 + g * 32 * VW;
            if (f < n) store_features<VW>(dst + f, acc[r][g]);
        }
    }
}

}  // namespace fg::spmm32
