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
// before they are used, to keep loads in flight. For N <= 16 (spmm_fp32_narrow) the lanes of
// a warp split the segment's vectors instead of the features.
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

// The values of vector j of segment s's window (0 in the slots vec_mask leaves out).
__device__ __forceinline__ void load_vector_values(float (&val)[WINDOW], const float* __restrict__ values,
                                                   const WindowSegment& s, int j, u32 mask, int k_log2) {
    const int vb = (j >> k_log2) << k_log2;  // first vector of j's block
    const int width = min(s.n_vec - vb, 1 << k_log2);
    const float* slot0 = values + WINDOW * (s.start + vb) + (j - vb);
#pragma unroll
    for (int r = 0; r < WINDOW; ++r) val[r] = (mask >> r) & 1 ? __ldg(slot0 + r * width) : 0.f;
}

// Where row r of segment s goes: its partial-sum row in the workspace (a split window), else
// its row of y; nullptr past the matrix's last row.
__device__ __forceinline__ float* row_out(const WindowSegment& s, int r, i64 n_rows, int n, float* y,
                                          float* workspace) {
    if (s.part >= 0) return workspace + ((i64)s.part * WINDOW + r) * n;
    const i64 row = s.window * WINDOW + r;
    return row < n_rows ? y + row * n : nullptr;
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

    float acc[WINDOW][G][VW] = {};
    for (int j0 = s.begin; j0 < s.end; j0 += 32) {
        const int j = j0 + lane;
        int col = 0;
        u32 mask = 0;
        if (j < s.end) {
            col = __ldg(col_idx + s.start + j);
            mask = __ldg(vec_mask + s.start + j);
        }
        float val[WINDOW];
        load_vector_values(val, values, s, j, mask, k_log2);
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
        float* dst = row_out(s, r, n_rows, n, y, workspace);
        if (dst == nullptr) break;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int f = f0 + g * 32 * VW;
            if (f < n) store_features<VW>(dst + f, acc[r][g]);
        }
    }
}

// Narrow X (N <= L <= 16 columns), where one lane per feature would leave most of a warp idle:
// the warp spreads over vectors instead, 32 / L of them at a time with L lanes each (lane % L
// is the feature), every lane summing its vectors' products per window row; the 32 / L partial
// sums of a row are then added by a butterfly of shuffles, in a fixed order (deterministic).
template <int L>
__global__ void spmm_fp32_narrow(const i64* __restrict__ row_ptr, const int* __restrict__ col_idx,
                                 const u8* __restrict__ vec_mask, const float* __restrict__ values,
                                 const int* __restrict__ seg_window, const int* __restrict__ seg_begin,
                                 const int* __restrict__ seg_part, i64 n_segments, int seg_vectors, int k_log2,
                                 i64 n_rows, int n, const float* __restrict__ x, float* __restrict__ y,
                                 float* __restrict__ workspace) {
    const i64 warp = fg::global_thread() >> 5;
    if (warp >= n_segments) return;
    const int lane = threadIdx.x & 31;
    const int f = lane % L;
    const WindowSegment s = window_segment(row_ptr, seg_window, seg_begin, seg_part, warp, seg_vectors);

    float acc[WINDOW] = {};
#pragma unroll 4
    for (int j = s.begin + lane / L; j < s.end; j += 32 / L) {
        const u32 mask = __ldg(vec_mask + s.start + j);
        float val[WINDOW];
        load_vector_values(val, values, s, j, mask, k_log2);
        const float xf = f < n ? __ldg(x + (i64)__ldg(col_idx + s.start + j) * n + f) : 0.f;
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) {
            if ((mask >> r) & 1) acc[r] = fmaf(val[r], xf, acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < WINDOW; ++r) {
#pragma unroll
        for (int offset = L; offset < 32; offset <<= 1) acc[r] += __shfl_xor_sync(ALL_LANES, acc[r], offset);
    }
    if (lane >= L || f >= n) return;
#pragma unroll
    for (int r = 0; r < WINDOW; ++r) {
        float* dst = row_out(s, r, n_rows, n, y, workspace);
        if (dst == nullptr) break;
        dst[f] = acc[r];
    }
}

}  // namespace fg::spmm32
