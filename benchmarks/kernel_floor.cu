// Floors for benchmarks/kernel_floor.py: kernels that do less than any ME-BCRS SpMM or SDDMM
// must, on the same format, so that their time bounds what such a kernel can reach on a graph.
//
// Both take VECS consecutive vectors of the format per warp (4 warps per block) and keep only
// the dependent chain every such kernel has: the vectors' columns (with their masks and one
// value each, read beside them) -> the gathered dense rows -> the results' stores. Neither
// keeps a window's 8 rows apart (one sum per warp, one dot per vector), splits nothing and
// stages nothing; they write at most as many bytes as a real kernel (one output row per warp,
// one fp32 per vector). Dense operands fp16, rows 16-byte aligned, fp32 accumulation.
#include "mma.cuh"

namespace fg::floor {

// 8 halves of a 16-byte load, times s, added to acc.
__device__ __forceinline__ void scaled_add(float (&acc)[8], const uint4& q, float s) {
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        acc[2 * i] = fmaf(half_to_float((u16)w[i]), s, acc[2 * i]);
        acc[2 * i + 1] = fmaf(half_to_float((u16)(w[i] >> 16)), s, acc[2 * i + 1]);
    }
}

// Where a lane is: its warp, the warp's first vector, and with LANES lanes per dense row, the
// row of a warp-wide load it takes (sub) and its 16-byte part of that row; after read(), the
// columns and masks of its vectors v0 + 32p + lane (0 past the last).
template <int LANES, int VECS>
struct Place {
    static constexpr int PER_LANE = VECS / 32;
    i64 warp = global_thread() >> 5;
    i64 v0 = warp * VECS;
    int lane = threadIdx.x & 31, sub = lane / LANES, part = lane % LANES;
    int col[PER_LANE];
    u32 mask[PER_LANE];

    __device__ __forceinline__ void read(const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                                         i64 n_vectors) {
#pragma unroll
        for (int p = 0; p < PER_LANE; ++p) {
            const i64 v = v0 + 32 * p + lane;
            col[p] = v < n_vectors ? col_idx[v] : 0;
            mask[p] = v < n_vectors ? vec_mask[v] : 0;
        }
    }
};

// SpMM floor, N features (a multiple of 8, at most 256): LANES = N / 8 lanes load a row of x
// (16 bytes each), 32 / LANES rows per warp load; the warp's sum of value * x[col] over its
// vectors goes to out row (warp % n_rows).
template <int N, int VECS>
__global__ void __launch_bounds__(128) spmm_floor(const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                                                   const float* __restrict__ values, i64 n_vectors,
                                                   const uint4* __restrict__ x, int n_rows,
                                                   uint4* __restrict__ out) {
    wait_for_previous_kernel();
    constexpr int LANES = N / 8, ROWS = 32 / LANES, PER_LANE = VECS / 32;
    Place<LANES, VECS> at;
    if (at.v0 >= n_vectors) return;
    at.read(col_idx, vec_mask, n_vectors);
    const int lane = at.lane, sub = at.sub, part = at.part;
    float val[PER_LANE];  // read beside the columns, not after the masks: A's layout has every slot written
#pragma unroll
    for (int p = 0; p < PER_LANE; ++p) val[p] = values[8 * min(at.v0 + 32 * p + lane, n_vectors - 1)];
#pragma unroll
    for (int p = 0; p < PER_LANE; ++p) val[p] = at.mask[p] ? val[p] : 0.f;
    float acc[8] = {};
#pragma unroll
    for (int p = 0; p < PER_LANE; ++p) {
        uint4 q[32 / ROWS];
#pragma unroll
        for (int j = 0; j < 32 / ROWS; ++j) {
            const int c = __shfl_sync(0xffffffffu, at.col[p], j * ROWS + sub);
            q[j] = x[(i64)c * LANES + part];
        }
#pragma unroll
        for (int j = 0; j < 32 / ROWS; ++j) scaled_add(acc, q[j], __shfl_sync(0xffffffffu, val[p], j * ROWS + sub));
    }
#pragma unroll
    for (int m = LANES; m < 32; m <<= 1) {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], m);
    }
    if (lane < LANES) {
        u32 w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = pack2(float_to_half(acc[2 * i]), float_to_half(acc[2 * i + 1]));
        out[(at.warp % n_rows) * LANES + lane] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// SDDMM floor, K features (a multiple of 8, at most 256): out[v] = x[row] . y[col(v)] with one
// row of x per warp (row = warp % n_rows), LANES = K / 8 lanes per vector.
template <int K, int VECS>
__global__ void __launch_bounds__(128)
    sddmm_floor(const int* __restrict__ col_idx, const u8* __restrict__ vec_mask, i64 n_vectors,
                const uint4* __restrict__ x, const uint4* __restrict__ y, int n_rows, float* __restrict__ out) {
    wait_for_previous_kernel();
    constexpr int LANES = K / 8, ROWS = 32 / LANES, PER_LANE = VECS / 32;
    Place<LANES, VECS> at;
    if (at.v0 >= n_vectors) return;
    at.read(col_idx, vec_mask, n_vectors);
    const int sub = at.sub, part = at.part;
    float xr[8] = {};
    scaled_add(xr, x[(at.warp % n_rows) * LANES + part], 1.f);
#pragma unroll
    for (int p = 0; p < PER_LANE; ++p) {
        uint4 q[32 / ROWS];
#pragma unroll
        for (int j = 0; j < 32 / ROWS; ++j) {
            q[j] = y[(i64)__shfl_sync(0xffffffffu, at.col[p], j * ROWS + sub) * LANES + part];
        }
#pragma unroll
        for (int j = 0; j < 32 / ROWS; ++j) {
            float prod[8] = {};
            scaled_add(prod, q[j], 1.f);
            float dot = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i) dot = fmaf(prod[i], xr[i], dot);
#pragma unroll
            for (int m = 1; m < LANES; m <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, m);
            const int owner = j * ROWS + sub;  // the vector's lane in the column load
            const bool real = __shfl_sync(0xffffffffu, at.mask[p], owner) != 0;
            const i64 v = at.v0 + 32 * p + owner;
            if (part == 0 && v < n_vectors) out[v] = real ? dot : 0.f;
        }
    }
}

}  // namespace fg::floor
