// TCA-SpMM (Tensor Core-Adapted SpMM) on plain CSR: Y = A X, X [n_cols, N] and Y [n_rows, N]
// row-major, fp16 / bf16 / tf32 operands on m16n8k8 MMAs, fp32 accumulators.
//
// The trace construction. The dot product of a sparse row s (its nonzeros s_0 .. s_{nnz-1} in
// columns c_0 ..) with a column j of X is written as an MMA whose diagonal carries it. The
// 8 x 8 right operand B holds up to 64 nonzeros, one column of B per 8: B[k][h] = s_{8h + k}
// (0 past the row's end). The 16 x 8 left operand A holds, in q consecutive rows per output,
// the entries of X that meet them: A[o q + h][k] = X[c_{8h + k}][j_o], so
//     C[o q + h][h] = sum_k X[c_{8h + k}][j_o] s_{8h + k}    and    Y[i][j_o] = sum_{h < q} C[o q + h][h],
// the trace of the q x q diagonal block o of C. A row of nnz <= 8 q nonzeros uses q = 1, 2, 4
// or 8 columns of B, and one MMA yields 16 / q outputs j_0 .. j_{16/q - 1}: 16 products of
// 8 terms out of the MMA's 16 x 8 x 8, so at most 1/8 of each MMA is useful work, whatever q.
// A row of more than 64 nonzeros takes q = 8 and adds one MMA per chunk of 64 into the same
// accumulators before taking the trace. Padding (past the row's end, or past N) is 0 in both
// operands; the entries off the diagonal blocks are never read, so no product of padding with
// an inf or NaN of X reaches an output.
//
// The schedule (flashgnn/formats/tca.py) gives each row as many warps as keep them near N / 16
// MMAs: warp `rank` of a row's `warps` takes the row's output tiles (16 / q columns of Y each)
// rank, rank + warps, ..., over all of the row's nonzeros, so a warp writes finished outputs
// and no partial sums cross warps. Consecutive warps of the schedule share a block, so short
// rows pack several to a block. The trace is a butterfly of shuffles: over the 4 lanes holding
// a row of C, then over the q rows of a block (lanes 4 apart).
//
// Fragments (lane = 4 g + t): m16n8k8 f16/bf16 take A[g or g + 8][2t, 2t + 1] and B[2t, 2t + 1][g]
// (mma.cuh); m16n8k8 tf32 takes A[g or g + 8][t, t + 4] and B[t, t + 4][g]. C[g][2t, 2t + 1]
// and C[g + 8][2t, 2t + 1] in both.
#include "mma.cuh"

namespace fg::tca {

constexpr unsigned ALL_LANES = 0xffffffffu;
constexpr int CHUNK = 64;  // nonzeros of one right operand

// d += a * b on one 16x8x8 tile, tf32 operands (raw bits from float_to_tf32): the paper's
// m16n8k8 shape, which mma.cuh has for 16-bit operands only.
__device__ __forceinline__ void mma_16x8x8_tf32(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// An element of X as the MMA's operand bits: 16-bit storage passes through, fp32 is rounded to
// tf32; 0 where the entry is padding.
__device__ __forceinline__ u32 x_bits(const u16* x, i64 at, bool real) { return real ? __ldg(x + at) : 0u; }
__device__ __forceinline__ u32 x_bits(const float* x, i64 at, bool real) {
    return real ? float_to_tf32(__ldg(x + at)) : 0u;
}

// What a lane holds of one chunk of the row: the columns of X behind its two k's (its two rows
// of A, g and g + 8, are row h of their diagonal blocks alike, so they meet the same nonzeros),
// and its two entries of B (rounded to the operand type).
struct Chunk {
    int col[2];    // [k]
    bool real[2];  // [k]: whether nonzero 8h + k lies in the chunk
    u32 b[2];      // [k]: B[k][g] as operand bits
};

template <int PREC>
__device__ __forceinline__ Chunk load_chunk(const int* __restrict__ indices, const float* __restrict__ values,
                                            i64 first, int count, int h, int g, const int (&k)[2]) {
    Chunk c;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int a = 8 * h + k[i];  // A's column k of row h meets nonzero a
        c.real[i] = a < count;
        c.col[i] = c.real[i] ? __ldg(indices + first + a) : 0;
        const int s = 8 * g + k[i];  // B[k][g] is nonzero s
        const float v = s < count ? __ldg(values + first + s) : 0.f;
        if constexpr (PREC == TF32) c.b[i] = float_to_tf32(v);
        else c.b[i] = Operand<PREC>::round(v);
    }
    return c;
}

// PREC: FP16, BF16 (x stored in it) or TF32 (x float32); OutTag: the output's element type.
template <int PREC, typename OutTag>
__global__ void __launch_bounds__(256)
    tca_spmm(const i64* __restrict__ indptr, const int* __restrict__ indices, const float* __restrict__ values,
             const int* __restrict__ warp_row, const int* __restrict__ warp_rank,
             const int* __restrict__ row_warps, i64 n_warps, int n,
             const typename Operand<PREC>::Tag::T* __restrict__ x, typename OutTag::T* __restrict__ out) {
    wait_for_previous_kernel();
    const i64 warp = global_thread() >> 5;
    if (warp >= n_warps) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const i64 row = warp_row[warp];
    const int rank = warp_rank[warp], warps = row_warps[warp];
    const i64 start = indptr[row];
    const i64 nnz = indptr[row + 1] - start;
    const int chunks = (int)((nnz + CHUNK - 1) / CHUNK);
    int q = 8;  // columns of B the row uses
    if (nnz <= 8) q = 1;
    else if (nnz <= 16) q = 2;
    else if (nnz <= 32) q = 4;
    const int outputs = 16 / q;  // per MMA
    const int tiles = (n + outputs - 1) / outputs;
    const int h = g % q;                                // this lane's rows g and g + 8 are row h of
    const int o_upper = g / q, o_lower = (g + 8) / q;  // the diagonal blocks o_upper, o_lower
    const int k[2] = {PREC == TF32 ? t : 2 * t, PREC == TF32 ? t + 4 : 2 * t + 1};

    const Chunk head = load_chunk<PREC>(indices, values, start, (int)min(nnz, (i64)CHUNK), h, g, k);
    for (int tile = rank; tile < tiles; tile += warps) {  // the same in every lane
        const int j_upper = tile * outputs + o_upper, j_lower = tile * outputs + o_lower;
        float d[4] = {};
        for (int c = 0; c < chunks; ++c) {
            const i64 first = start + (i64)c * CHUNK;
            const Chunk ch =
                c == 0 ? head : load_chunk<PREC>(indices, values, first, (int)min(nnz - c * CHUNK, (i64)CHUNK), h, g, k);
            u32 a[2][2];  // [upper / lower][k]
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                a[0][i] = x_bits(x, (i64)ch.col[i] * n + j_upper, ch.real[i] && j_upper < n);
                a[1][i] = x_bits(x, (i64)ch.col[i] * n + j_lower, ch.real[i] && j_lower < n);
            }
            if constexpr (PREC == TF32) {
                mma_16x8x8_tf32(d, a[0][0], a[1][0], a[0][1], a[1][1], ch.b[0], ch.b[1]);
            } else {
                mma_16x8x8<PREC>(d, pack2((u16)a[0][0], (u16)a[0][1]), pack2((u16)a[1][0], (u16)a[1][1]),
                                 pack2((u16)ch.b[0], (u16)ch.b[1]));
            }
        }
        // this lane's diagonal entries: C[g][h] and C[g + 8][h] where h is one of its columns
        const int c0 = 2 * t;
        float upper = h == c0 ? d[0] : (h == c0 + 1 ? d[1] : 0.f);
        float lower = h == c0 ? d[2] : (h == c0 + 1 ? d[3] : 0.f);
#pragma unroll
        for (int m = 1; m < 4; m <<= 1) {
            upper += __shfl_xor_sync(ALL_LANES, upper, m);
            lower += __shfl_xor_sync(ALL_LANES, lower, m);
        }
        for (int s = 1; s < q; s <<= 1) {  // the same q in every lane
            upper += __shfl_xor_sync(ALL_LANES, upper, 4 * s);
            lower += __shfl_xor_sync(ALL_LANES, lower, 4 * s);
        }
        if (t == 0 && h == 0) {
            typename OutTag::T* y = out + row * n;
            if (j_upper < n) y[j_upper] = from_float(upper, OutTag());
            if (j_lower < n) y[j_lower] = from_float(lower, OutTag());
        }
    }
}

}  // namespace fg::tca
