// The sparse linear layer's forward, Y = X W^T + b (flashgnn/ops/sparse_linear.py), with W
// [out, in] in CVSE: strips of V output rows (V = 2, 4, 8), each nonzero a V x 1 vector in one
// input column. fp16 / bf16 operands, mma.m16n8k16, fp32 accumulators.
//
// MMA roles: m = 16 tokens, n = 8 = one strip's output rows (rows n >= V are zero: V = 2 and 4
// spend 8 / V times the MMAs of V = 8), k = 16 of the strip's vectors. A[token][k] is the input
// feature of vector k, read from X^T [in, tokens_pad], which transpose_tokens writes first (x
// rounded to the operand type, tokens padded with zeros to a multiple of 8), so that a feature's
// tokens are one contiguous row.
//
// Block tiling: a block owns M = 16 MT consecutive tokens and 64 consecutive strips (8 warps x
// 8 strips; a warp keeps all M tokens of its 8 strips in registers, 32 MT floats). The input
// features are cut into chunks of U = 8192 / M rows; the block stages chunk c of X^T (U rows x
// M tokens, 16 KB) in shared memory by cp.async while it computes chunk c - 1 from the other
// buffer, so every feature row is read from L2 once per block and shared by its 64 strips.
// Each strip's vectors in chunk c form a list, padded to whole k16 steps; ldmatrix.trans
// gathers a step's 16 rows from the staged chunk (per-lane row addresses), and the B fragment
// is read as one 8-byte word per lane.
//
// The plan (flashgnn/_cuda/sparse_linear.py, once per pattern) orders steps by (64-strip group,
// warp, chunk, strip of the warp), so a warp's steps are one run that it prefetches two steps
// ahead across strips and chunks:
//   offs   int32 [groups x 8 x chunks x 8 + 1], the first step of each (strip, chunk) list.
//   rows   int32 [steps x 16], the chunk row of each k slot (U + r: the zero row of residue r,
//          for padding slots).
//   frags  u32 x 2 [steps x 32], lane 4g + t's B fragment {B[2t][g], B[2t+1][g]},
//          {B[2t+8][g], B[2t+9][g]} (low half: lower k), gathered from W's values per call.
// Shared memory rows are swizzled (16-byte piece q of row r at q ^ (r >> SHIFT) mod PIECES) so
// that rows of distinct r mod 8 hit distinct banks; the plan deals a list's vectors over its
// 8-row groups by r mod 8 and gives padding the residues a group lacks, so one ldmatrix phase
// mostly reads 8 distinct residues.
//
// Tails: chunk rows past `in` and tokens past tokens_pad are staged as zeros (cp.async with 0
// source bytes) and never read by a real slot; strips past the last hold no steps; outputs are
// stored only for tokens < n_tokens, rows n < V and output features < n_out. Y [n_tokens, out]
// is written in the output type, bias (float32) added to the fp32 sums.
#include "mma.cuh"

namespace fg {
namespace sl {

constexpr int WARPS = 8, THREADS = 32 * WARPS;
constexpr int WARP_STRIPS = 8;
constexpr int STAGE_ELEMENTS = 8192;  // U x M of one staged chunk
constexpr int ZERO_ROWS = 8;          // one per residue mod 8, after the chunk's U rows

__device__ __forceinline__ u32 shared_address(const void* p) {
    u32 a;
    asm("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 bytes from global to shared memory, bypassing L1; bytes past src_bytes (0 or 16) are zeros
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A[16 tokens][16 k] of one MMA from four 8 x 8 matrices of k-major rows, one row address per lane
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&a)[4], u32 address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(address)
                 : "memory");
}

template <int MT> struct Tile {
    static constexpr int M = 16 * MT;                  // tokens of a block
    static constexpr int PIECES = M / 8;               // 16-byte pieces of a staged row
    static constexpr int ROW_BYTES = 16 * PIECES;
    static constexpr int U = STAGE_ELEMENTS / M;       // feature rows of a chunk
    static constexpr int SHIFT = MT == 4 ? 0 : MT == 2 ? 1 : 2;  // log2(8 / PIECES)
    static constexpr int BUFFER_BYTES = (U + ZERO_ROWS) * ROW_BYTES;
    static __device__ __forceinline__ u32 offset(int row, int piece) {
        return (u32)row * ROW_BYTES + 16 * (piece ^ ((row >> SHIFT) & (PIECES - 1)));
    }
};

// x [n_tokens, n_in] (any float type) -> xt [n_in, tokens_pad] rounded to P's operand type,
// tokens n_tokens .. tokens_pad zero. 32 x 32 tiles: blockIdx.x tokens, blockIdx.y features.
template <typename InTag, int P>
__global__ void __launch_bounds__(256) transpose_tokens(const typename InTag::T* __restrict__ x,
                                                        u16* __restrict__ xt, int n_tokens, int n_in,
                                                        int tokens_pad) {
    wait_for_previous_kernel();
    __shared__ u16 tile[32][33];
    const int t0 = blockIdx.x * 32, f0 = blockIdx.y * 32;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (int i = ty; i < 32; i += 8) {
        const int token = t0 + i, feature = f0 + tx;
        u16 v = 0;
        if (token < n_tokens && feature < n_in) {
            v = Operand<P>::round(to_float(x[(i64)token * n_in + feature], InTag()));
        }
        tile[i][tx] = v;
    }
    __syncthreads();
    for (int i = ty; i < 32; i += 8) {
        const int feature = f0 + i, token = t0 + tx;
        if (feature < n_in && token < tokens_pad) xt[(i64)feature * tokens_pad + token] = tile[tx][i];
    }
}

template <int P, int MT, typename OutTag>
__global__ void __launch_bounds__(THREADS, 1)
    sparse_linear_forward(const int* __restrict__ offs, const int* __restrict__ rows,
                          const uint2* __restrict__ frags, const float* __restrict__ bias,
                          const u16* __restrict__ xt, typename OutTag::T* __restrict__ y, int n_chunks,
                          int n_tokens, int tokens_pad, int n_in, int n_out, int vector) {
    wait_for_previous_kernel();
    typedef Tile<MT> L;
    __shared__ __align__(128) unsigned char stage[2 * L::BUFFER_BYTES];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * L::M;
    const int group = blockIdx.y;
    const u32 base = shared_address(stage);

    // the zero rows of both buffers (never staged over)
    for (int i = threadIdx.x; i < 2 * ZERO_ROWS * L::PIECES; i += THREADS) {
        const int b = i / (ZERO_ROWS * L::PIECES), p = i % (ZERO_ROWS * L::PIECES);
        *reinterpret_cast<uint4*>(stage + b * L::BUFFER_BYTES + L::U * L::ROW_BYTES + 16 * p) =
            make_uint4(0, 0, 0, 0);
    }

    auto stage_chunk = [&](int c) {
        const u32 buffer = base + (c & 1) * L::BUFFER_BYTES;
        const int row0 = c * L::U;
        for (int i = threadIdx.x; i < L::U * L::PIECES; i += THREADS) {
            const int r = i / L::PIECES, q = i % L::PIECES;
            const int feature = row0 + r, token = m0 + 8 * q;
            const bool in = feature < n_in && token < tokens_pad;
            const u16* src = in ? xt + (i64)feature * tokens_pad + token : xt;
            cp_async_16(buffer + L::offset(r, q), src, in ? 16 : 0);
        }
        cp_async_commit();
    };

    const int* warp_offs = offs + ((i64)(group * WARPS + warp) * n_chunks) * WARP_STRIPS;
    const int k_lane = ((lane >> 4) << 3) | (lane & 7);  // the k row this lane addresses
    const int piece_lane = (lane >> 3) & 1;              // and its 8 tokens of an m16 tile
    int s = warp_offs[0];
    const int s_end = warp_offs[n_chunks * WARP_STRIPS];
    // steps s and s + 1, prefetched
    int row0 = 0, row1 = 0;
    uint2 f0 = make_uint2(0, 0), f1 = make_uint2(0, 0);
    if (s < s_end) {
        row0 = __ldg(rows + (i64)s * 16 + k_lane);
        f0 = __ldg(frags + (i64)s * 32 + lane);
    }
    if (s + 1 < s_end) {
        row1 = __ldg(rows + (i64)(s + 1) * 16 + k_lane);
        f1 = __ldg(frags + (i64)(s + 1) * 32 + lane);
    }

    float acc[WARP_STRIPS][MT][4] = {};
    if (n_chunks > 0) stage_chunk(0);
    for (int c = 0; c < n_chunks; ++c) {
        if (c + 1 < n_chunks) {
            stage_chunk(c + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const u32 buffer = base + (c & 1) * L::BUFFER_BYTES;
        const int ends = lane < WARP_STRIPS ? warp_offs[c * WARP_STRIPS + lane + 1] : 0;
#pragma unroll
        for (int j = 0; j < WARP_STRIPS; ++j) {
            const int e = __shfl_sync(0xffffffffu, ends, j);
            for (; s < e; ++s) {
                int row2 = 0;
                uint2 f2 = make_uint2(0, 0);
                if (s + 2 < s_end) {
                    row2 = __ldg(rows + (i64)(s + 2) * 16 + k_lane);
                    f2 = __ldg(frags + (i64)(s + 2) * 32 + lane);
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    u32 a[4];
                    ldmatrix_x4_trans(a, buffer + L::offset(row0, 2 * mt + piece_lane));
                    mma_16x8x16<P>(acc[j][mt], a[0], a[1], a[2], a[3], f0.x, f0.y);
                }
                row0 = row1;
                f0 = f1;
                row1 = row2;
                f1 = f2;
            }
        }
        __syncthreads();  // the buffer is staged over two chunks on
    }

    typedef typename OutTag::T T;
    const bool paired = (n_out & 1) == 0;
#pragma unroll
    for (int j = 0; j < WARP_STRIPS; ++j) {
        const i64 strip = (i64)group * (WARPS * WARP_STRIPS) + warp * WARP_STRIPS + j;
        const int n = 2 * t;
        const i64 o = strip * vector + n;
        if (n >= vector || o >= n_out) continue;
        const bool second = o + 1 < n_out && n + 1 < vector;
        const float b0 = bias != nullptr ? bias[o] : 0.f;
        const float b1 = bias != nullptr && second ? bias[o + 1] : 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int token = m0 + 16 * mt + g + 8 * h;
                if (token >= n_tokens) continue;
                const float v0 = acc[j][mt][2 * h] + b0, v1 = acc[j][mt][2 * h + 1] + b1;
                T* dst = y + (i64)token * n_out + o;
                if (paired) {  // o and n_out even: the pair is in range and aligned
                    if constexpr (sizeof(T) == 2) {
                        *reinterpret_cast<u32*>(dst) = pack2(from_float(v0, OutTag()), from_float(v1, OutTag()));
                    } else {
                        *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
                    }
                } else {
                    dst[0] = from_float(v0, OutTag());
                    if (second) dst[1] = from_float(v1, OutTag());
                }
            }
        }
    }
}

}  // namespace sl
}  // namespace fg
