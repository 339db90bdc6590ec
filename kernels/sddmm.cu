// ME-BCRS SDDMM on tensor cores: out[slot(i, j)] = x[i] . y[j] for every nonzero (i, j) of A,
// written straight into A's value layout; slots outside the pattern get exactly 0.
//
// One warp takes one window segment (at most seg_vectors vectors), whose column indices and
// vector masks it first stages in shared memory. Per MMA the sparse side is again the n = 8
// dimension: D (16 vectors x 8 window rows) = Y[col] (16 vectors x K) times X[window rows]^T
// (K x 8), summed over K in chunks of 32 (fp16/bf16, two m16n8k16; 16 and one at K <= 16, 8 and
// one m16n8k8 at K <= 8) or 16 (tf32, four m16n8k4).
// The K order inside a chunk is free, so lane (g, t) loads a run of consecutive features of
// vectors g and g + 8 and of window row g with 16-byte loads, and each MMA takes the next two
// pairs (tf32: the next element) of each run. The window rows' first chunk is loaded once per
// segment, and two groups of 16 vectors are gathered together. WHOLE launches (rows aligned, K a
// multiple of the chunk) gather without per-load checks (gather in mma.cuh).
#include "mma.cuh"

namespace fg {

constexpr int GROUPS = 2;  // groups of 16 vectors per loop step

// Stores D of one 16-vector group: lane (g, t) holds rows 2t, 2t + 1 of vectors j0 + g, j0 + g + 8
// (relative to the segment's first vector `first`; format block width k).
__device__ __forceinline__ void store_group(const float (&d)[4], float* out, const u8* masks, i64 first,
                                            int count, int j0, int k) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (j0 + 16 <= count) {
        // all 16 vectors in whole blocks (j0 is a multiple of 16): vector j0 + g + 8h, row
        // 2t + e at a fixed offset from the lane's first slot, so the stores take no per-slot
        // index arithmetic (which would be half the instructions of a K = 32 loop step)
        float* slot = out + WINDOW * (first + j0) + (8 * (g & -k) + 2 * t * k + (g & (k - 1)));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned rows = masks[j0 + g + 8 * h] >> (2 * t);
            slot[64 * h] = rows & 1 ? d[2 * h] : 0.f;
            slot[64 * h + k] = rows & 2 ? d[2 * h + 1] : 0.f;
        }
        return;
    }
    // the segment's last group: its last block may be narrower (kb < k), so a vector's rows
    // are kb apart
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int j = j0 + g + 8 * h;
        if (j >= count) continue;
        const int b0 = j & -k;  // k, the block width, is 4 or 8
        const int kb = min(k, count - b0);
        float* slot = out + WINDOW * (first + b0) + (2 * t * kb + (j - b0));
        const unsigned rows = masks[j] >> (2 * t);
        slot[0] = rows & 1 ? d[2 * h] : 0.f;
        slot[kb] = rows & 2 ? d[2 * h + 1] : 0.f;
    }
}

// One precision's chunk of K: the dense element type, the RUN features each lane loads per chunk
// (16 bytes; 8 or 4 for 16-bit types at K <= 16 or 8, where a chunk of 32 left lanes and MMAs
// on zeros), and the MMAs that consume them: an m16n8k16 per two 32-bit words of the run (half
// the MMAs and dependent steps of an m16n8k8 per word: docs/TUNING.md), an m16n8k8 for a
// one-word run.
template <int P, int RUN_> struct SddmmChunk {
    typedef u16 T;
    static constexpr int RUN = RUN_, WORDS = RUN / 2;
    static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&ya)[WORDS], const u32 (&yb)[WORDS],
                                               const u32 (&xr)[WORDS]) {
        if constexpr (WORDS == 1) {
            mma_16x8x8<P>(d, ya[0], yb[0], xr[0]);
        } else {  // words s and s + 1 as k pairs 2t and 2t + 8 of one m16n8k16
#pragma unroll
            for (int s = 0; s < WORDS; s += 2) mma_16x8x16<P>(d, ya[s], yb[s], ya[s + 1], yb[s + 1], xr[s], xr[s + 1]);
        }
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

// A loop step's gathers: y's rows col[q][h] (-1: none) of its GROUPS x 2 x 8 vectors, n features
// apart, from src = y + (this lane's first feature of the chunk).
template <bool WHOLE, class Chunk>
__device__ __forceinline__ void gather_step(u32 (&yv)[GROUPS][2][Chunk::WORDS], const typename Chunk::T* src,
                                            const int (&col)[GROUPS][2], int n, int valid, bool aligned) {
#pragma unroll
    for (int q = 0; q < GROUPS; ++q) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            gather<WHOLE, typename Chunk::T, Chunk::RUN>(yv[q][h], src, col[q][h], col[q][h] >= 0, n, valid, aligned);
        }
    }
}

// The segment of one warp: its vectors' columns and masks, staged in shared memory.
struct SddmmSegment {
    i64 first;     // its first vector in the format
    int count;     // its vectors
    i64 window;
    const int* cols;
    const u8* masks;
};

// Segment `seg` of one warp (dynamic shared memory: seg_vectors column indices and vector masks
// per warp), its facts, columns and masks staged before waiting for the previous kernel when
// `preamble` (common.cuh): D = x[window rows] . y[col] for its vectors, handed to epi.group(d, segment, j0, q)
// a group q of 16 vectors at a time (lane (g, t) holds rows 2t, 2t + 1 of vectors j0 + g and
// j0 + g + 8), after epi.columns(col) has seen, before their products, the columns of the
// GROUPS groups of a loop step (col[q][h]: vector j0 + 8h + g of group q, -1 past the end).
// ONE (WHOLE launches only): K is exactly one chunk, so no K loop and y's row stride is a
// constant; a kernel of its own, whose registers do not set those of the loop (sharing one
// kernel slowed the loop: docs/TUNING.md). Returns the segment.
template <int P, bool WHOLE, int RUN, bool ONE, class Epilogue>
__device__ __forceinline__ SddmmSegment sddmm_segment(const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                                                      const int* __restrict__ seg_window,
                                                      const i64* __restrict__ seg_first,
                                                      const int* __restrict__ seg_count, i64 seg, int seg_vectors,
                                                      int n_rows, int kdim, int aligned, bool preamble,
                                                      const typename SddmmChunk<P, RUN>::T* __restrict__ x,
                                                      const typename SddmmChunk<P, RUN>::T* __restrict__ y,
                                                      Epilogue& epi) {
    typedef SddmmChunk<P, RUN> Chunk;
    typedef typename Chunk::T T;
    constexpr int FEATURES = 4 * Chunk::RUN;  // per chunk
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    extern __shared__ int smem[];
    const int warp = threadIdx.x >> 5;
    int* cols = smem + warp * seg_vectors;
    u8* masks = reinterpret_cast<u8*>(smem + (blockDim.x >> 5) * seg_vectors) + warp * seg_vectors;
    const SddmmSegment s{seg_first[seg], seg_count[seg], seg_window[seg], cols, masks};
    const i64 row = s.window * WINDOW + g;
    for (int j = lane; j < s.count; j += 32) {
        cols[j] = col_idx[s.first + j];
        masks[j] = vec_mask[s.first + j];
    }
    __syncwarp();
    wait_for_previous_kernel(preamble);
    allow_next_kernel();  // early: the next grid's preamble beside this grid's loop (docs/TUNING.md)
    u32 x0[Chunk::WORDS] = {};
    if (row < n_rows) load_group<T, Chunk::RUN>(x0, x + row * kdim + t * Chunk::RUN, kdim - t * Chunk::RUN, aligned);
    for (int j0 = 0; j0 < s.count; j0 += 16 * GROUPS) {
        int col[GROUPS][2];
#pragma unroll
        for (int h = 0; h < 2 * GROUPS; ++h) {
            const int j = j0 + 8 * h + g;
            col[h / 2][h % 2] = j < s.count ? cols[j] : -1;
        }
        epi.columns(col);
        float d[GROUPS][4] = {};
        if constexpr (ONE) {
            u32 yv[GROUPS][2][Chunk::WORDS];
            gather_step<WHOLE, Chunk>(yv, y + t * Chunk::RUN, col, FEATURES, Chunk::RUN, aligned);
#pragma unroll
            for (int q = 0; q < GROUPS; ++q) Chunk::mma(d[q], yv[q][0], yv[q][1], x0);
        } else {
            for (int c = 0; c < kdim; c += FEATURES) {  // uniform across the warp: mma.sync needs all lanes
                const int f0 = c + t * Chunk::RUN;
                const int valid = kdim - f0;
                u32 yv[GROUPS][2][Chunk::WORDS], xr[Chunk::WORDS] = {};
                gather_step<WHOLE, Chunk>(yv, y + f0, col, kdim, valid, aligned);
                if (c == 0) {
#pragma unroll
                    for (int i = 0; i < Chunk::WORDS; ++i) xr[i] = x0[i];
                } else if (row < n_rows) {
                    load_group<T, Chunk::RUN>(xr, x + row * kdim + f0, valid, aligned);
                }
#pragma unroll
                for (int q = 0; q < GROUPS; ++q) Chunk::mma(d[q], yv[q][0], yv[q][1], xr);
            }
        }
#pragma unroll
        for (int q = 0; q < GROUPS; ++q) epi.group(d[q], s, j0 + 16 * q, q);
    }
    return s;
}

// The SDDMM's epilogue: D into A's value layout (format block width k).
struct StoreValues {
    float* out;
    int k;
    __device__ __forceinline__ void columns(const int (&)[GROUPS][2]) {}
    __device__ __forceinline__ void group(const float (&d)[4], const SddmmSegment& s, int j0, int) {
        store_group(d, out, s.masks, s.first, s.count, j0, k);
    }
};

template <int P, bool WHOLE, int RUN, bool ONE>
__global__ void __launch_bounds__(128) sddmm_kernel(
    const int* __restrict__ col_idx, const u8* __restrict__ vec_mask, const int* __restrict__ seg_window,
    const i64* __restrict__ seg_first, const int* __restrict__ seg_count, i64 n_segments, int seg_vectors,
    int n_rows, int kdim, int k, int aligned, int preamble, float* __restrict__ out,
    const typename SddmmChunk<P, RUN>::T* __restrict__ x, const typename SddmmChunk<P, RUN>::T* __restrict__ y) {
    wait_for_previous_kernel(!preamble);
    const i64 seg = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (seg >= n_segments) return;  // touched nothing (another warp of the grid waits first)
    StoreValues epi{out, k};
    sddmm_segment<P, WHOLE, RUN, ONE>(col_idx, vec_mask, seg_window, seg_first, seg_count, seg, seg_vectors, n_rows,
                                      kdim, aligned, preamble, x, y, epi);
}

// GAT's backward through its softmax without its scores' gradient d in memory: with
// g_ij = dOut_i . H_j (this SDDMM's D), P from the forward's row records (gat_attention: the
// softmax's bits) and c_ij = leaky_relu'(er_i + el_j) (1, or slope where er_i + el_j <= 0),
// d_ij = c_ij P_ij (g_ij - s_i), s_i = sum_j P_ij g_ij (the softmax backward's formula). Two
// passes, neither writes a slot:
//   ROWS     on A: per row i, s_i, a_i = sum_j c_ij P_ij g_ij and b_i = sum_j c_ij P_ij, from
//            which er's gradient sum_j d_ij = a_i - s_i b_i (STATS = 3 sums per row);
//   COLUMNS  on A^T (window rows j, vector columns i, g from x = H and y = dOut): per row j,
//            el's gradient sum_i d_ij, with s_i in the record's fourth float (STATS = 1).
// Row results go to rows[(8 * window + r) * STATS + f], or for a split window's segment to
// parts[(8 * part + r) * STATS + f] (spmm_reduce adds them in part order). A lane holds rows 2t
// and 2t + 1; what it needs of a vector's column (ROWS: el_j, COLUMNS: record i) is gathered
// before the vector's products (a gather after them stalled every step); its sums run over the
// segment's vectors in order, then across the 8 lanes of t.
enum GatPass { GAT_ROWS = 0, GAT_COLUMNS = 1 };

// What a pass gathers per vector column: ROWS el_j, COLUMNS the record of i.
template <int PASS> struct GatColumn { typedef float T; };
template <> struct GatColumn<GAT_COLUMNS> { typedef float4 T; };

template <int PASS>
struct GatSoftmaxBackward {
    static constexpr int STATS = PASS == GAT_ROWS ? 3 : 1;
    typedef typename GatColumn<PASS>::T Column;
    const float* el;
    const float4* records;
    float slope;
    float el_row[2];      // COLUMNS: el of rows 2t, 2t + 1
    float acc[2][STATS];
    Column column[GROUPS][2];  // ROWS: el, COLUMNS: the record of the step's vectors' columns

    __device__ __forceinline__ void columns(const int (&col)[GROUPS][2]) {
#pragma unroll
        for (int q = 0; q < GROUPS; ++q) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if constexpr (PASS == GAT_ROWS) column[q][h] = col[q][h] >= 0 ? __ldg(el + col[q][h]) : 0.f;
                else column[q][h] = col[q][h] >= 0 ? __ldg(records + col[q][h]) : float4{};
            }
        }
    }

    __device__ __forceinline__ void group(const float (&d)[4], const SddmmSegment& s, int j0, int q) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int j = j0 + g + 8 * h;
            if (j >= s.count) continue;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int r = 2 * t + e;
                if (!((s.masks[j] >> r) & 1)) continue;
                const float gd = d[2 * h + e];
                if constexpr (PASS == GAT_ROWS) {
                    const float4 record = __ldg(records + s.window * WINDOW + r);
                    const float el_j = column[q][h];
                    const float p = gat_attention(record, el_j, slope);
                    const bool positive = record.z + el_j > 0.f;
                    const float pg = p * gd;
                    acc[e][0] += pg;
                    acc[e][1] += positive ? pg : pg * slope;
                    acc[e][2] += positive ? p : p * slope;
                } else {
                    const float4 record = column[q][h];
                    const float p = gat_attention(record, el_row[e], slope);
                    const float v = p * (gd - record.w);
                    acc[e][0] += record.z + el_row[e] > 0.f ? v : v * slope;
                }
            }
        }
    }

    __device__ __forceinline__ void end(const SddmmSegment& s, int part, float* rows, float* parts) {
        const int lane = threadIdx.x & 31, t = lane & 3;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
            for (int f = 0; f < STATS; ++f) {
#pragma unroll
                for (int m = 4; m < 32; m <<= 1) acc[e][f] += __shfl_xor_sync(0xffffffffu, acc[e][f], m);
            }
        }
        if (lane >= 4) return;
        float* dst = (part < 0 ? rows + s.window * WINDOW * STATS : parts + (i64)part * WINDOW * STATS) + 2 * t * STATS;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
            for (int f = 0; f < STATS; ++f) dst[e * STATS + f] = acc[e][f];
        }
    }
};

// x: the window rows' operand, y: the columns' (ROWS: dOut, H; COLUMNS on A^T: H, dOut); el
// [n_cols of A], records [8 * n_windows of A, 4]; rows, parts: see GatSoftmaxBackward.
template <int P, bool WHOLE, int RUN, int PASS>
__global__ void __launch_bounds__(128) gat_softmax_backward_sddmm(
    const int* __restrict__ col_idx, const u8* __restrict__ vec_mask, const int* __restrict__ seg_window,
    const i64* __restrict__ seg_first, const int* __restrict__ seg_count, const int* __restrict__ seg_part,
    i64 n_segments, int seg_vectors, int n_rows, int kdim, int aligned,
    const typename SddmmChunk<P, RUN>::T* __restrict__ x, const typename SddmmChunk<P, RUN>::T* __restrict__ y,
    const float* __restrict__ el, const float4* __restrict__ records, float slope, float* __restrict__ rows,
    float* __restrict__ parts) {
    wait_for_previous_kernel();
    const i64 seg = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (seg >= n_segments) return;
    GatSoftmaxBackward<PASS> epi{el, records, slope, {}, {}, {}};
    if constexpr (PASS == GAT_COLUMNS) {
        const i64 row = seg_window[seg] * (i64)WINDOW + 2 * (threadIdx.x & 3);
        epi.el_row[0] = row < n_rows ? __ldg(el + row) : 0.f;
        epi.el_row[1] = row + 1 < n_rows ? __ldg(el + row + 1) : 0.f;
    }
    const SddmmSegment s = sddmm_segment<P, WHOLE, RUN, false>(col_idx, vec_mask, seg_window, seg_first, seg_count,
                                                               seg, seg_vectors, n_rows, kdim, aligned, false, x, y,
                                                               epi);
    epi.end(s, seg_part[seg], rows, parts);
}

}  // namespace fg
