// SpMM on CUDA cores, Y = A X, read straight from ME-BCRS (no CSR kept), over a list of window
// segments: the exact fp32 SpMM and the tf32 one where CUDA cores beat the tensor cores
// (spmm_fp32.cu), and the sparse windows of the hybrid SpMM (spmm_hybrid.cu), whose inputs are
// rounded as read to the precision the tensor cores would see.
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
// result is deterministic.
//
// A warp's lanes form 32 / L groups of L lanes; a group gathers one vector's row of X, each
// lane VW consecutive features (16-byte loads when VW = 4), so a tile is L * VW features and
// a warp gathers 32 / L rows at once: narrow X (N = 32 takes L = 8) keeps the whole warp
// loading. The warp walks its segment in batches of 32 vectors: lane j loads vector j's
// column, mask and real values (coalesced; with PREFETCH the next batch's are loaded while
// this one is used), then in each step every group takes one vector of the batch by shuffles
// and gathers its row; U steps are issued before their products are summed, so a lane keeps U
// gathers in flight (8, or 4 where the registers saved raise occupancy). A lane sums its
// vectors' products per window row, in one of two places (SHARED):
// - registers, acc[row][feature]: registers cannot be indexed at run time, so every vector
//   tests the eight rows (one test per row for the warp, the values shuffled from the batch).
// - shared memory, a slot per (row, lane): a product goes straight to its row's slot, one
//   load-add-store per real nonzero and no test of the other rows. Fewer instructions, which
//   pays off on wide X, while narrow X, whose lane groups each loop over their own vector's
//   rows, runs faster in registers (docs/TUNING.md).
// Graphs whose vectors hold several nonzeros (1.15-2.1 per vector on hetero_chameleon,
// snap_email_enron, the squirrels, hetero_minesweeper) run fastest in registers with 4 gathers
// in flight and no prefetch (PREFETCH = false): the ladder's tests then mostly find a nonzero,
// and the fewer registers let more warps hide the gathers of an X small enough to stay in L1.
// The launcher (flashgnn/_cuda/spmm_fp32.py, kernel_variant) picks the variant per graph and N.
// The groups' sums are then added by a butterfly of shuffles, in a fixed order
// (deterministic).
#pragma once
#include "mma.cuh"  // round_to_tf32, Operand

namespace fg::spmm32 {

constexpr unsigned ALL_LANES = 0xffffffffu;
constexpr int FP32 = 3;  // beside mma.cuh's Precision: inputs read as they are (the exact SpMM)

// The tag of X's storage type for precision P: 16-bit for fp16/bf16, float for tf32 and fp32.
template <int P> struct Input { typedef typename Operand<P>::Tag Tag; };
template <> struct Input<FP32> { typedef Float Tag; };

// v rounded to precision P's operand type and widened back: the value the tensor cores multiply.
template <int P>
__device__ __forceinline__ float rounded(float v) {
    if constexpr (P == TF32) return tf32_rounded(v);
    else if constexpr (P == FP16) return half_to_float(float_to_half(v));
    else if constexpr (P == BF16) return bf16_to_float(float_to_bf16(v));
    else return v;
}

// dst = src[0 .. VW) as fp32, rounded as the tensor cores see it: 16-bit types widened (8-byte
// loads when VW = 4, src then 8-byte aligned), tf32 rounded, fp32 as read.
template <int P, int VW>
__device__ __forceinline__ void load_operand(float (&dst)[VW], const typename Input<P>::Tag::T* src) {
    if constexpr (P == FP16 || P == BF16) {
        typedef typename Operand<P>::Tag Tag;
        if constexpr (VW == 4) {
            const uint2 t = __ldg(reinterpret_cast<const uint2*>(src));
            dst[0] = to_float((u16)(t.x & 0xffffu), Tag());
            dst[1] = to_float((u16)(t.x >> 16), Tag());
            dst[2] = to_float((u16)(t.y & 0xffffu), Tag());
            dst[3] = to_float((u16)(t.y >> 16), Tag());
        } else {
#pragma unroll
            for (int e = 0; e < VW; ++e) dst[e] = to_float((u16)__ldg(src + e), Tag());
        }
    } else {
        fg::load_features<VW>(dst, src);
        if constexpr (P == TF32) round_to_tf32(dst);
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

// sum[0..VW) += a * x, in shared memory (one 16-byte load and store when VW = 4).
template <int VW>
__device__ __forceinline__ void add_product(float* sum, float a, const float (&x)[VW]) {
    if constexpr (VW == 4) {
        float4 t = *reinterpret_cast<float4*>(sum);
        t.x = fmaf(a, x[0], t.x);
        t.y = fmaf(a, x[1], t.y);
        t.z = fmaf(a, x[2], t.z);
        t.w = fmaf(a, x[3], t.w);
        *reinterpret_cast<float4*>(sum) = t;
    } else {
#pragma unroll
        for (int e = 0; e < VW; ++e) sum[e] = fmaf(a, x[e], sum[e]);
    }
}

// A value of A, rounded to the precision P as the tensor cores would see it.
template <int P>
__device__ __forceinline__ float load_value(const float* __restrict__ slot) {
    return rounded<P>(__ldg(slot));
}

// Vector j of segment s (relative to its window): column, mask, the values of its real
// nonzeros (0 elsewhere) and the first of them; all zero past the segment's end.
struct Vector {
    int col = 0;
    u32 mask = 0;
    float val[WINDOW] = {};
    float first = 0.f;
};

// Where the values of vector j of segment s lie: row r's at slot[r * width] (the value
// layout's blocks of 2^k_log2 vectors, fewer in a window's last).
struct ValueColumn {
    const float* slot;
    int width;
};

__device__ __forceinline__ ValueColumn value_column(const float* __restrict__ values, const WindowSegment& s, int j,
                                                    int k_log2) {
    const int vb = (j >> k_log2) << k_log2;  // first vector of j's block
    return {values + WINDOW * (s.start + vb) + (j - vb), min(s.n_vec - vb, 1 << k_log2)};
}

template <int P>
__device__ __forceinline__ Vector load_vector(const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                                              const float* __restrict__ values, const WindowSegment& s, int j,
                                              int k_log2) {
    Vector v;
    if (j >= s.end) return v;
    v.col = __ldg(col_idx + s.start + j);
    v.mask = __ldg(vec_mask + s.start + j);
    const ValueColumn c = value_column(values, s, j, k_log2);
#pragma unroll
    for (int r = 0; r < WINDOW; ++r) {
        if ((v.mask >> r) & 1) v.val[r] = load_value<P>(c.slot + r * c.width);
    }
    // a load of its own (a kernel reads either val or first, the other is never computed): a
    // select over val would chain eight loads into one register, and a warp waits on each
    if (v.mask != 0) v.first = load_value<P>(c.slot + (__ffs(v.mask) - 1) * c.width);
    return v;
}

// Where row r of segment s goes: its partial-sum row in the workspace (a split window), else
// its row of y; nullptr past the matrix's last row.
__device__ __forceinline__ float* row_out(const WindowSegment& s, int r, i64 n_rows, int n, float* y,
                                          float* workspace) {
    if (s.part >= 0) return workspace + ((i64)s.part * WINDOW + r) * n;
    const i64 row = s.window * WINDOW + r;
    return row < n_rows ? y + row * n : nullptr;
}

// Stores the sums v of row r of segment s (features f ..): to its fp32 partial-sum row in the
// workspace (a split window), else to its row of y in OutTag's type; nothing past the last row.
template <typename OutTag, int VW>
__device__ __forceinline__ void store_row(const WindowSegment& s, int r, i64 n_rows, int n, int f,
                                          typename OutTag::T* y, float* workspace, const float (&v)[VW]) {
    if constexpr (sizeof(typename OutTag::T) == 4) {
        float* dst = row_out(s, r, n_rows, n, y, workspace);
        if (dst != nullptr) store_features<VW>(dst + f, v);
    } else if (s.part >= 0) {
        store_features<VW>(workspace + ((i64)s.part * WINDOW + r) * n + f, v);
    } else if (s.window * WINDOW + r < n_rows) {
        typename OutTag::T* dst = y + (s.window * WINDOW + r) * n + f;
#pragma unroll
        for (int e = 0; e < VW; ++e) dst[e] = from_float(v[e], OutTag());
    }
}

// VW features per lane, L lanes per vector (a power of two), U steps in flight (dividing L),
// sums in registers or (SHARED) in dynamic shared memory of WINDOW * 32 * VW floats per warp;
// PREFETCH: the next batch's vectors are loaded while this one is summed; P: x and the values
// rounded to that precision as read (FP32: as they are), x in its storage type; OutTag: y's
// type. With VW = 4, N is a multiple of 4 and x is 16-byte aligned (the launcher checks), so
// a lane's features are either wholly inside N or wholly outside. The body of a kernel: every
// thread of the launch calls it, after waiting for the previous kernel.
template <int VW, int L, int U, bool SHARED, bool PREFETCH, int P, typename OutTag>
__device__ __forceinline__ void sum_segments(const i64* __restrict__ row_ptr, const int* __restrict__ col_idx,
                                             const u8* __restrict__ vec_mask, const float* __restrict__ values,
                                             const int* __restrict__ seg_window, const int* __restrict__ seg_begin,
                                             const int* __restrict__ seg_part, i64 n_segments, int seg_vectors,
                                             int k_log2, i64 n_rows, int n, int n_tiles,
                                             const typename Input<P>::Tag::T* __restrict__ x,
                                             typename OutTag::T* __restrict__ y, float* __restrict__ workspace) {
    constexpr int GROUPS = 32 / L;  // vectors gathered per step
    constexpr int STEPS = L;        // steps per batch of 32 vectors
    static_assert(32 % L == 0 && STEPS % U == 0, "L must divide 32 and U must divide L");
    const i64 warp = fg::global_thread() >> 5;
    if (warp >= n_segments * n_tiles) return;
    const i64 seg = warp / n_tiles;
    const int lane = threadIdx.x & 31;
    const int group = lane / L;
    const int f = (int)(warp - seg * n_tiles) * L * VW + (lane % L) * VW;
    const bool inside = f < n;
    const typename Input<P>::Tag::T* x_lane = x + (inside ? f : 0);  // lanes past N gather features they never store
    const WindowSegment s = window_segment(row_ptr, seg_window, seg_begin, seg_part, seg, seg_vectors);

    float acc[WINDOW][VW] = {};
    extern __shared__ float4 shared_sums[];  // float4: 16-byte aligned
    // this lane's slot of row r: slot + r * 32 * VW
    float* slot = reinterpret_cast<float*>(shared_sums) + ((threadIdx.x >> 5) * WINDOW * 32 + lane) * VW;
    if constexpr (SHARED) {
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) store_features<VW>(slot + r * 32 * VW, acc[r]);
    }
    Vector next;
    if constexpr (PREFETCH) next = load_vector<P>(col_idx, vec_mask, values, s, s.begin + lane, k_log2);
    for (int j0 = s.begin; j0 < s.end; j0 += 32) {
        Vector cur;
        if constexpr (PREFETCH) {
            cur = next;
            if (j0 + 32 < s.end) next = load_vector<P>(col_idx, vec_mask, values, s, j0 + 32 + lane, k_log2);
        } else {
            cur = load_vector<P>(col_idx, vec_mask, values, s, j0 + lane, k_log2);
        }
        const int steps = (min(32, s.end - j0) + GROUPS - 1) / GROUPS;  // the same in every lane
        for (int t0 = 0; t0 < steps; t0 += U) {  // t0 + u < STEPS: src stays a lane of the batch
            int src[U];
            u32 mu[U];
            float au[U];  // shared sums: the first value, shuffled ahead of the sums
            float xu[U][VW];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                src[u] = (t0 + u) * GROUPS + group;
                mu[u] = __shfl_sync(ALL_LANES, cur.mask, src[u]);
                if constexpr (SHARED) au[u] = __shfl_sync(ALL_LANES, cur.first, src[u]);
                // unconditional: past the segment's end col is 0, a row of X that exists (the
                // batch holds a vector), and a mask of 0 leaves the features unused
                load_operand<P, VW>(xu[u], x_lane + (i64)__shfl_sync(ALL_LANES, cur.col, src[u]) * n);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if constexpr (SHARED) {
                    float a = au[u];
                    for (u32 m = mu[u]; m != 0;) {  // the same in a group's lanes
                        add_product<VW>(slot + (__ffs(m) - 1) * 32 * VW, a, xu[u]);
                        m &= m - 1;
                        if (m != 0) {  // a vector's further nonzeros are rare: read from memory
                            const ValueColumn c = value_column(values, s, j0 + src[u], k_log2);
                            a = load_value<P>(c.slot + (__ffs(m) - 1) * c.width);
                        }
                    }
                } else {
                    const u32 rows = GROUPS == 1 ? mu[u] : fg::warp_or(mu[u]);  // rows any group needs
#pragma unroll
                    for (int r = 0; r < WINDOW; ++r) {
                        if ((rows >> r) & 1) {  // the same in every lane: no divergence
                            const float a = __shfl_sync(ALL_LANES, cur.val[r], src[u]);
                            if ((mu[u] >> r) & 1) {
#pragma unroll
                                for (int e = 0; e < VW; ++e) acc[r][e] = fmaf(a, xu[u][e], acc[r][e]);
                            }
                        }
                    }
                }
            }
        }
    }

    if constexpr (SHARED) {
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) {
#pragma unroll
            for (int e = 0; e < VW; ++e) acc[r][e] = slot[r * 32 * VW + e];
        }
    }
#pragma unroll
    for (int r = 0; r < WINDOW; ++r) {
#pragma unroll
        for (int e = 0; e < VW; ++e) {
#pragma unroll
            for (int offset = L; offset < 32; offset <<= 1) acc[r][e] += __shfl_xor_sync(ALL_LANES, acc[r][e], offset);
        }
    }
    if (!inside) return;
#pragma unroll
    for (int r = 0; r < WINDOW; ++r) {
        if (r % GROUPS != group) continue;  // every group holds the sums; each stores its rows
        store_row<OutTag, VW>(s, r, n_rows, n, f, y, workspace, acc[r]);
    }
}

}  // namespace fg::spmm32
