// The exact fp32 SDDMM on CUDA cores: out[slot(i, j)] = x[i] . y[j] for every nonzero (i, j)
// of A, written straight into A's ME-BCRS value layout; padding slots get exactly 0.
//
// One warp per window segment (at most seg_vectors vectors), one lane per vector: in batches
// of 32 vectors, lane j gathers row y[col_j] and forms its dot products with the window's 8
// rows of x, which the warp stages in shared memory a chunk of KC features at a time (every
// lane reads the same x word: a broadcast). Only the rows whose vec_mask bit is set are
// multiplied; the products of a row accumulate in fp32 in feature order, as a dot product
// does. With K a multiple of 4 and 16-byte aligned rows, y is read in 16-byte loads.
#include "mma.cuh"  // round_to_tf32

namespace fg::sddmm32 {

constexpr unsigned ALL_LANES = 0xffffffffu;
constexpr int WARPS = 4;  // per block (sddmm.py: WARPS_PER_BLOCK)
constexpr int KC = 64;    // features of x staged per chunk
// Staged row stride: 4 floats of padding put row r's 16-byte groups in bank quad r, so lanes
// reading different rows of the window in one LDS.128 do not conflict.
constexpr int XS = KC + 4;

// acc[r] += the dot product of y's row chunk with x's staged row r, for every r in mask, in
// feature order (the same sums whatever the path). WALK (16-byte loads): each lane walks its
// own vector's set bits, reading its row r of x at a run-time offset (acc[r] read and written
// by a select: registers cannot be indexed at run time), so the warp runs as many iterations
// as its fullest vector; else every row any lane needs is a step of the warp, which pays where
// vectors hold several nonzeros (the launcher, flashgnn/_cuda/sddmm.py, has the measured split).
template <bool VEC, bool WALK>
__device__ __forceinline__ void dot_chunk(float (&acc)[WINDOW], const float* __restrict__ yrow, const float* xs,
                                          int len, u32 mask) {
    if constexpr (WALK) {
        for (u32 m = mask; m != 0; m &= m - 1) {
            const int r = __ffs(m) - 1;
            float dot = 0.f;
#pragma unroll
            for (int i = 0; i < WINDOW; ++i) dot = i == r ? acc[i] : dot;
            const float* xr = xs + r * XS;
            for (int c = 0; c < len; c += 4) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(yrow + c));
                const float4 w = *reinterpret_cast<const float4*>(xr + c);
                dot = fmaf(w.x, v.x, dot);
                dot = fmaf(w.y, v.y, dot);
                dot = fmaf(w.z, v.z, dot);
                dot = fmaf(w.w, v.w, dot);
            }
#pragma unroll
            for (int i = 0; i < WINDOW; ++i) acc[i] = i == r ? dot : acc[i];
        }
    } else if constexpr (VEC) {
        for (int c = 0; c < len; c += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(yrow + c));
#pragma unroll
            for (int r = 0; r < WINDOW; ++r) {
                if ((mask >> r) & 1) {
                    const float* xr = xs + r * XS + c;
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
                if ((mask >> r) & 1) acc[r] = fmaf(xs[r * XS + c], v, acc[r]);
            }
        }
    }
}

// x [n_rows, K], y [n_cols, K] fp32; out [8 * n_vectors]; format block width k. WALK needs VEC.
template <bool VEC, bool WALK>
__global__ void __launch_bounds__(32 * WARPS) sddmm_fp32(const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                                                         const int* __restrict__ seg_window, const i64* __restrict__ seg_first,
                                                         const int* __restrict__ seg_count, i64 n_segments, int n_rows,
                                                         int kdim, int k, const float* __restrict__ x,
                                                         const float* __restrict__ y, float* __restrict__ out) {
    wait_for_previous_kernel();
    __shared__ __align__(16) float staged[WARPS][WINDOW * XS];
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
                xs[r * XS + c] = c < len && row0 + r < n_rows ? x[(row0 + r) * kdim + c0 + c] : 0.f;
            }
            __syncwarp();
            if (active) dot_chunk<VEC, WALK>(acc, yrow + c0, xs, len, mask);
        }
        if (active) {
            const int b0 = j & -k;  // k, the block width, is 4 or 8
            const int kb = min(k, count - b0);
            float* dst = out + WINDOW * (first + b0) + (j - b0);
#pragma unroll
            for (int r = 0; r < WINDOW; ++r) dst[r * kb] = acc[r];
        }
    }
}

// The coalesced kernel, for K up to 256 in 16-byte loads (the kernel above, a lane per vector,
// reads y 16 bytes per lane and instruction, 32 rows per warp load: on graphs whose y does not
// fit in L2 most of each DRAM sector is evicted before the next load uses it, and where y stays
// in L2 each load costs a wavefront per row; the launcher, flashgnn/_cuda/sddmm.py, has the
// measured split). Lanes form 32 / L groups of L; a group reads one vector's row of y, VW
// features per lane, so a warp load reads 32 / L whole rows. The warp stages the window's 8
// rows of x in shared memory. Per step every group takes one vector of the batch (its column
// and mask shuffled from the lane that loaded them), U steps of gathers in flight, and walks
// that vector's set bits: for row r a lane forms its VW-feature partial dot product with x's
// staged row r and the group adds its L partials by a butterfly of shuffles (a fixed order:
// deterministic). A step thus costs as many row passes as its fullest vector has nonzeros.
// Dot products go to a per-warp table of the batch's 8 x 32 slots in shared memory, zeros
// included, which lane j then writes to vector j's slots in the value layout.
// (The explicit minimum of 1 block per SM: without it ptxas held the 4-lane layouts to 48-56
// registers and spilled.)
template <int L, int VW, bool TF32>
__global__ void __launch_bounds__(32 * WARPS, 1) sddmm_fp32_rows(
        const int* __restrict__ col_idx, const u8* __restrict__ vec_mask, const int* __restrict__ seg_window,
        const i64* __restrict__ seg_first, const int* __restrict__ seg_count, i64 n_segments, int n_rows,
        int kdim, int k, const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out) {
    wait_for_previous_kernel();
    static_assert(VW % 4 == 0, "x is staged and read in 16-byte groups");
    constexpr int GROUPS = 32 / L, STEPS = L, U = L < 32 / VW ? L : 32 / VW;  // 32 floats of y in flight
    constexpr int XW = L * VW;  // features of a staged row of x
    __shared__ float results[WARPS][WINDOW * 32];  // [row][vector of the batch]: lanes hit distinct banks
    __shared__ __align__(16) float staged[WARPS][WINDOW * XW];
    const i64 seg = (i64)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (seg >= n_segments) return;
    const int lane = threadIdx.x & 31;
    const int group = lane / L;
    const int f = (lane % L) * VW;
    const bool inside = f < kdim;
    float* res = results[threadIdx.x >> 5];
    float* x_staged = staged[threadIdx.x >> 5];
    const i64 first = seg_first[seg];
    const int count = seg_count[seg];
    const i64 row0 = (i64)seg_window[seg] * WINDOW;
#pragma unroll
    for (int e = 4 * lane; e < WINDOW * XW; e += 128) {  // 16 bytes a lane, zeros past K and n_rows
        const int r = e / XW, c = e % XW;
        float v[4] = {};
        if (c < kdim && row0 + r < n_rows) fg::load_features<4>(v, x + (row0 + r) * kdim + c);
        if constexpr (TF32) round_to_tf32(v);
        *reinterpret_cast<float4*>(x_staged + e) = make_float4(v[0], v[1], v[2], v[3]);
    }
    __syncwarp();
    const float* xs = x_staged + f;  // this lane's features of row 0
    const float* y_lane = y + (inside ? f : 0);  // lanes past K gather features they never use
    for (int j0 = 0; j0 < count; j0 += 32) {
        const int j = j0 + lane;
        const bool active = j < count;
        const int col = active ? col_idx[first + j] : 0;  // col 0 past the end: a row that exists
        const u32 mask = active ? vec_mask[first + j] : 0u;
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) res[r * 32 + lane] = 0.f;
        __syncwarp();
        const int steps = (min(32, count - j0) + GROUPS - 1) / GROUPS;  // the same in every lane
        for (int t0 = 0; t0 < steps; t0 += U) {  // t0 + u < STEPS: src stays a lane of the batch
            int src[U];
            u32 mu[U];
            float yu[U][VW];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                src[u] = (t0 + u) * GROUPS + group;
                mu[u] = __shfl_sync(ALL_LANES, mask, src[u]);
                fg::load_features<VW>(yu[u], y_lane + (i64)__shfl_sync(ALL_LANES, col, src[u]) * kdim);
                if constexpr (TF32) round_to_tf32(yu[u]);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                // a pass per set bit of the fullest vector, the warp in step (a group whose
                // vector has no bit left computes and drops a product): no divergence
                for (u32 m = mu[u]; __any_sync(ALL_LANES, m != 0); m &= m - 1) {
                    const int r = m == 0 ? 0 : __ffs(m) - 1;
                    float p = 0.f;
                    if (inside) {
#pragma unroll
                        for (int e = 0; e < VW; e += 4) {
                            const float4 w = *reinterpret_cast<const float4*>(xs + r * XW + e);
                            p = fmaf(w.x, yu[u][e], p);
                            p = fmaf(w.y, yu[u][e + 1], p);
                            p = fmaf(w.z, yu[u][e + 2], p);
                            p = fmaf(w.w, yu[u][e + 3], p);
                        }
                    }
#pragma unroll
                    for (int offset = 1; offset < L; offset <<= 1) p += __shfl_xor_sync(ALL_LANES, p, offset);
                    if (m != 0 && lane % L == 0) res[r * 32 + src[u]] = p;
                }
            }
        }
        __syncwarp();
        if (active) {
            const int b0 = j & -k;  // k, the block width, is 4 or 8
            const int kb = min(k, count - b0);
            float* dst = out + WINDOW * (first + b0) + (j - b0);
#pragma unroll
            for (int r = 0; r < WINDOW; ++r) dst[r * kb] = res[r * 32 + lane];
        }
        __syncwarp();
    }
}

}  // namespace fg::sddmm32
