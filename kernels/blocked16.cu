// SpMM and SDDMM on the 16x1 blocked format (flashgnn/formats/blocked16.py): the baseline design that
// ME-BCRS and swap-and-transpose improve on. fp16 / bf16 operands, mma.m16n8k8, fp32 accumulators.
//
// SpMM, Y = A X, no swap-and-transpose: the stored 16 x 8 block is the left operand (row-major,
// 16 window rows x 8 block columns), 8 gathered rows of X (one per block column) the right
// operand, and the accumulators hold 16 window rows x 8 features. One warp owns one window and
// 8 E feature columns (E MMA tiles); hub windows are not split (a baseline). Gather mapping:
// lane (g, t) loads E consecutive features f0 + E g .. of X rows col[2t] and col[2t + 1], and
// tile i takes feature f0 + E g + i as its column g. Lane (g, t) then holds, for window rows
// g and g + 8, the 2E consecutive features f0 + 2E t .., stored as one run.
//
// SDDMM, out = (X Y^T) on A's pattern: per block, D (16 window rows x 8 block columns) =
// X[window rows] (16 x K) times Y[block columns]^T (K x 8), K in chunks of 32. Lane (g, t)
// loads 8 consecutive features of window rows g and g + 8 and of block column g's Y row; MMA
// step s takes the s-th pair of each run (the K order inside a chunk is free, as long as both
// operands follow it). D is the block's value layout (c0, c1 = slots 8g + 2t, 8g + 2t + 1):
// every slot is written, 0 where vec_mask says it is not a nonzero.
#include "mma.cuh"
#include "store.cuh"

namespace fg {
namespace b16 {

constexpr int ROWS = 16, COLS = 8, BLOCK = ROWS * COLS;

template <int P, int E, typename OutTag>
__global__ void __launch_bounds__(128) spmm16(const i64* __restrict__ row_ptr, const int* __restrict__ col_idx,
                                              const float* __restrict__ values, i64 n_windows, int n_rows, int n,
                                              int aligned, const u16* __restrict__ x,
                                              typename OutTag::T* __restrict__ out) {
    wait_for_previous_kernel();
    constexpr int FEATURES = 8 * E;
    const int n_chunks = (n + FEATURES - 1) / FEATURES;
    const i64 warp = global_thread() >> 5;
    if (warp >= n_windows * n_chunks) return;
    const i64 w = warp / n_chunks;
    const int f0 = (int)(warp - w * n_chunks) * FEATURES;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int gathered = f0 + E * g;  // first feature this lane loads
    float acc[E][4] = {};
    const i64 end = row_ptr[w + 1];
#pragma unroll 2
    for (i64 b = row_ptr[w]; b < end; ++b) {
        const float* block = values + BLOCK * b;
        const float2 lo = __ldg(reinterpret_cast<const float2*>(block + COLS * g + 2 * t));
        const float2 hi = __ldg(reinterpret_cast<const float2*>(block + COLS * (g + 8) + 2 * t));
        const u32 a0 = pack2(Operand<P>::round(lo.x), Operand<P>::round(lo.y));
        const u32 a1 = pack2(Operand<P>::round(hi.x), Operand<P>::round(hi.y));
        const i64 ca = __ldg(col_idx + COLS * b + 2 * t), cb = __ldg(col_idx + COLS * b + 2 * t + 1);
        u32 xa[E / 2], xb[E / 2];
        load_group<u16, E>(xa, x + ca * n + gathered, n - gathered, aligned);
        load_group<u16, E>(xb, x + cb * n + gathered, n - gathered, aligned);
#pragma unroll
        for (int i = 0; i < E; ++i) {
            // b0 = {X[ca][f], X[cb][f]} for this lane's feature of tile i (low half: row 2t)
            mma_16x8x8<P>(acc[i], a0, a1, __byte_perm(xa[i / 2], xb[i / 2], i & 1 ? 0x7632 : 0x5410));
        }
    }
    const int first = f0 + 2 * E * t;  // first feature this lane stores
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const i64 row = ROWS * w + g + 8 * h;
        if (row >= n_rows) continue;
        float v[2 * E];
#pragma unroll
        for (int i = 0; i < E; ++i) {
            v[i] = acc[i][2 * h];
            v[E + i] = acc[i][2 * h + 1];
        }
        store_run<OutTag, 2 * E>(out + row * n + first, v, n - first, aligned);
    }
}

template <int P>
__global__ void __launch_bounds__(128) sddmm16(const i64* __restrict__ row_ptr, const int* __restrict__ col_idx,
                                               const u16* __restrict__ vec_mask, i64 n_windows, int n_rows, int kdim,
                                               int aligned, const u16* __restrict__ x, const u16* __restrict__ y,
                                               float* __restrict__ out) {
    wait_for_previous_kernel();
    const i64 w = global_thread() >> 5;
    if (w >= n_windows) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const i64 r0 = ROWS * w + g, r1 = r0 + 8;
    const i64 end = row_ptr[w + 1];
    for (i64 b = row_ptr[w]; b < end; ++b) {
        const i64 col = __ldg(col_idx + COLS * b + g);
        float d[4] = {};
        for (int c = 0; c < kdim; c += 32) {  // uniform across the warp: mma.sync needs all lanes
            const int f = c + 8 * t, valid = kdim - f;
            u32 xa[4] = {}, xb[4] = {}, yc[4];
            if (r0 < n_rows) load_group<u16, 8>(xa, x + r0 * kdim + f, valid, aligned);
            if (r1 < n_rows) load_group<u16, 8>(xb, x + r1 * kdim + f, valid, aligned);
            load_group<u16, 8>(yc, y + col * kdim + f, valid, aligned);
#pragma unroll
            for (int s = 0; s < 4; ++s) mma_16x8x8<P>(d, xa[s], xb[s], yc[s]);
        }
        const u32 m0 = vec_mask[COLS * b + 2 * t], m1 = vec_mask[COLS * b + 2 * t + 1];
        float* block = out + BLOCK * b;
        *reinterpret_cast<float2*>(block + COLS * g + 2 * t) =
            make_float2((m0 >> g) & 1 ? d[0] : 0.f, (m1 >> g) & 1 ? d[1] : 0.f);
        *reinterpret_cast<float2*>(block + COLS * (g + 8) + 2 * t) =
            make_float2((m0 >> (g + 8)) & 1 ? d[2] : 0.f, (m1 >> (g + 8)) & 1 ? d[3] : 0.f);
    }
}

}  // namespace b16
}  // namespace fg
