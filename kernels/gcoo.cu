// The fp32 SpMM on CUDA cores on GCOO (flashgnn/formats/gcoo.py), after GCOOSpDM: Y = A X with
// X [n_cols, N] and Y [n_rows, N] row-major; with its inputs rounded as read, also tf32.
//
// GCOO keeps each strip of P rows as one list of nonzeros sorted by column. One warp takes a
// segment of a strip's list (at most seg_nnz nonzeros, so a hub row is spread over several
// warps) and a tile of 32 VW output columns: lane l owns the VW consecutive columns
// f = tile * 32 VW + l VW of the P rows of the strip, as P x VW sums in registers.
// - Broadcast: the warp stages 32 nonzeros at a time in shared memory (one coalesced load of
//   columns, rows and values by its lanes), with a flag on each nonzero whose column differs
//   from the one before it; every lane then reads the same entry, a broadcast without bank
//   conflicts.
// - Register reuse: a lane reads X[col, f .. f + VW) (16-byte loads at VW = 4; the warp's reads
//   of one row of X are contiguous, coalesced) only at a flagged nonzero and keeps it in
//   registers for the nonzeros that follow in the same column, the other rows of the strip
//   holding that column: one read of X serves every row of the strip that needs it.
// - Latency: U nonzeros are read from shared memory and their loads of X issued before any of
//   them is summed, so a lane keeps up to U loads in flight.
// A nonzero adds into the sums of its row of the strip, a run-time index: registers cannot be
// indexed at run time, so each of the P rows is tested (the same test in every lane).
//
// A strip split over several segments writes fp32 partial sums to a workspace slot per segment
// (part); gcoo_reduce then adds each strip's parts in order, so the result is deterministic.
// Only real nonzeros are multiplied (no padding), so an inf or NaN of X reaches exactly the
// outputs it reaches in the reference.
#include "mma.cuh"  // tf32_rounded

namespace fg::gcoo {

constexpr unsigned ALL_LANES = 0xffffffffu;
constexpr int BATCH = 32;  // nonzeros a warp stages at once
constexpr int WARPS = 4;   // warps per block (the launcher's block is 32 * WARPS threads)

// dst = src[0 .. VW) through the read-only path: one 4-, 8- or 16-byte load (src aligned to it).
template <int VW>
__device__ __forceinline__ void load_x(float (&dst)[VW], const float* src) {
    if constexpr (VW == 4) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(src));
        dst[0] = t.x, dst[1] = t.y, dst[2] = t.z, dst[3] = t.w;
    } else if constexpr (VW == 2) {
        const float2 t = __ldg(reinterpret_cast<const float2*>(src));
        dst[0] = t.x, dst[1] = t.y;
    } else {
        dst[0] = __ldg(src);
    }
}

template <int VW>
__device__ __forceinline__ void store_y(float* dst, const float (&src)[VW]) {
    if constexpr (VW == 4) {
        *reinterpret_cast<float4*>(dst) = make_float4(src[0], src[1], src[2], src[3]);
    } else if constexpr (VW == 2) {
        *reinterpret_cast<float2*>(dst) = make_float2(src[0], src[1]);
    } else {
        dst[0] = src[0];
    }
}

// acc[r] += a * xv for the run-time row r of the strip, as a chain of tests: written as
// acc[r], the sums would leave the registers for local memory.
template <int Q, int P, int VW>
__device__ __forceinline__ void add_to_row(float (&acc)[P][VW], int r, float a, const float (&xv)[VW]) {
    if constexpr (Q < P) {
        if (r == Q) {
#pragma unroll
            for (int i = 0; i < VW; ++i) acc[Q][i] = fmaf(a, xv[i], acc[Q][i]);
        } else {
            add_to_row<Q + 1, P, VW>(acc, r, a, xv);
        }
    }
}

// P rows per strip (1, 2, 4, 8), VW features per lane (1, 2, 4; N % VW == 0 and x, y aligned to
// VW floats: the launcher checks), U loads in flight; TF32: x and the values rounded to tf32.
// Segment s covers nonzeros [seg_begin[s], min(seg_begin[s] + seg_nnz, end of its strip)) of
// strip seg_group[s]; seg_part[s] is its workspace slot, or -1 when it holds the whole strip.
// At least 4 blocks an SM (128 registers a thread at most): without that floor ptxas spilled a
// few registers of some instantiations.
template <int P, int VW, int U, bool TF32>
__global__ void __launch_bounds__(32 * WARPS, 4)
    gcoo_spmm(const i64* __restrict__ group_ptr, const int* __restrict__ rows, const int* __restrict__ cols,
              const float* __restrict__ values, const int* __restrict__ seg_group,
              const i64* __restrict__ seg_begin, const int* __restrict__ seg_part, i64 n_segments, int seg_nnz,
              i64 n_rows, int n, int n_tiles, const float* __restrict__ x, float* __restrict__ y,
              float* __restrict__ workspace) {
    wait_for_previous_kernel();
    static_assert(BATCH % U == 0, "U must divide the batch");
    __shared__ int4 staged[WARPS][BATCH];  // (column, row in the strip, value bits, new column)
    const i64 warp = global_thread() >> 5;
    if (warp >= n_segments * n_tiles) return;
    const i64 seg = warp / n_tiles;
    const int lane = threadIdx.x & 31;
    const int f = (int)(warp - seg * n_tiles) * 32 * VW + lane * VW;
    const bool inside = f < n;
    // lanes past N read the features of column 0 of X's rows, which they never store
    const float* x_lane = x + (inside ? f : 0);
    const int group = seg_group[seg];
    const i64 first_row = (i64)group * P;
    const i64 begin = seg_begin[seg];
    const i64 end = min(begin + seg_nnz, group_ptr[group + 1]);
    int4* stage = staged[threadIdx.x >> 5];

    float acc[P][VW] = {};
    float xv[VW] = {};  // X's features at the last column read
    int last_col = -1;  // the column of the nonzero staged last
    for (i64 j0 = begin; j0 < end; j0 += BATCH) {
        const int count = (int)min((i64)BATCH, end - j0);
        int col = -1, r = 0;
        float v = 0.f;
        if (lane < count) {
            col = __ldg(cols + j0 + lane);
            r = (int)(__ldg(rows + j0 + lane) - first_row);
            v = __ldg(values + j0 + lane);
            if constexpr (TF32) v = tf32_rounded(v);
        }
        int before = __shfl_up_sync(ALL_LANES, col, 1);
        if (lane == 0) before = last_col;
        last_col = __shfl_sync(ALL_LANES, col, count - 1);
        __syncwarp();  // the previous batch's entries are read
        stage[lane] = make_int4(col, r, __float_as_int(v), lane < count && col != before);
        __syncwarp();
        for (int k0 = 0; k0 < count; k0 += U) {
            int4 e[U];
            float xu[U][VW];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                e[u] = stage[k0 + u];  // k0 + u < BATCH: U divides it
                if (e[u].w) {
                    load_x<VW>(xu[u], x_lane + (i64)e[u].x * n);
                } else {
#pragma unroll
                    for (int i = 0; i < VW; ++i) xu[u][i] = 0.f;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (e[u].w) {
#pragma unroll
                    for (int i = 0; i < VW; ++i) xv[i] = TF32 ? tf32_rounded(xu[u][i]) : xu[u][i];
                }
                // past the batch's end: row P, which no sum has (the same in every lane)
                add_to_row<0, P, VW>(acc, k0 + u < count ? e[u].y : P, __int_as_float(e[u].z), xv);
            }
        }
    }
    if (!inside) return;
    const int part = seg_part[seg];
#pragma unroll
    for (int q = 0; q < P; ++q) {
        if (part >= 0) {
            store_y<VW>(workspace + ((i64)part * P + q) * n + f, acc[q]);
        } else if (first_row + q < n_rows) {
            store_y<VW>(y + (first_row + q) * n + f, acc[q]);
        }
    }
}

// y's rows of the split strips = the sums of their segments' partial sums, in segment order:
// strip split_group[s] has split_count[s] parts from workspace slot split_first[s] on, each
// p rows of n features.
__global__ void gcoo_reduce(const float* __restrict__ workspace, const int* __restrict__ split_group,
                            const int* __restrict__ split_first, const int* __restrict__ split_count, i64 n_split,
                            int p, i64 n_rows, int n, float* __restrict__ y) {
    wait_for_previous_kernel();
    const i64 per_strip = (i64)p * n;
    for (i64 i = global_thread(); i < n_split * per_strip; i += grid_stride()) {
        const i64 s = i / per_strip;
        const int q = (int)((i - s * per_strip) / n);
        const int f = (int)(i - s * per_strip - (i64)q * n);
        const i64 row = (i64)split_group[s] * p + q;
        if (row >= n_rows) continue;
        const float* part = workspace + ((i64)split_first[s] * p + q) * n + f;
        float sum = 0.f;
        for (int k = 0; k < split_count[s]; ++k) sum += part[k * per_strip];
        y[row * n + f] = sum;
    }
}

}  // namespace fg::gcoo
