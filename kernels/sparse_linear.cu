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
//
// sparse_linear_window (below) is the second kernel of the forward, chosen per layer by
// flashgnn/_cuda/sparse_linear.py; its own comment says how it differs.
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

// ---------------------------------------------------------------------------------------------
// sparse_linear_window: the same product and MMA roles, a block of WS * NW strips and M = 16 MT
// tokens (warp w: strips w WS .. w WS + WS - 1, all M tokens, WS x MT x 4 accumulators a lane),
// with three differences from sparse_linear_forward.
// 1. Windows. The input features are cut into chunks of U rows (U a runtime multiple of 32);
//    three chunk slots form a ring in shared memory, and window w computes while chunks w and
//    w + 1 are resident (slot c % 3 holds chunk c), so a k16 step may take its 16 vectors from
//    two consecutive chunks: a strip's vectors are cut into steps in column order, a step closed
//    early only where its next vector lies two chunks on, so padding is rare where a chunk holds
//    about 16 of a strip's vectors (the plan chooses U so). A step's row code (u16) is its
//    row counted from window w's first row (< 2U), or 2U + r for the zero row of residue r
//    (ring rows 3U .. 3U + 7, zeroed once).
// 2. The plan in shared memory. A step is one 288-byte record: 16 row codes, then lane 4g + t's
//    B fragment (as `frags` above), built once per weight version in step order. The plan orders
//    steps by (group, window, warp, strip of the warp), so window w's steps of a block are one
//    run, which cp.async copies into one of two plan buffers (`cap` steps each, the plan's
//    largest run) while the window before it computes; offs [groups x windows x NW WS + 1] holds
//    the first step of every (group, window, warp, strip) list. So the step loop reads shared
//    memory only, and one __syncthreads per window orders the staging.
// 3. DIRECT: x [n_tokens, n_in] is read token-major, in the operand type, without a transpose
//    kernel: window w loads chunk w + 2 into registers (a warp's units of 8 tokens x 32
//    features, a lane holding two features of one token per word), transposes each 8 x 8 block
//    by movmatrix and stores it after computing, into the slot that window w - 1 freed. Without
//    DIRECT, chunks of X^T (transpose_tokens) are copied by cp.async as above.
// Rows of a slot are 16 (2 MT + 1) bytes apart (one 16-byte piece of padding), so rows of
// distinct residues mod 8 fall on distinct banks for ldmatrix and for the transposed stores;
// the plan deals a step's vectors over its two 8-row groups by residue, as the plan above does.
// The grid is one-dimensional, the groups of a token tile on consecutive blocks, so that blocks
// running together share the staged rows of x in L2. Y is written in out_type (0: fp16, 1:
// bf16, 2: fp32), one instantiation serving all three.

constexpr int STEP_BYTES = 288;
constexpr int STEP_PIECES = STEP_BYTES / 16;
constexpr int HELD_WORDS = 32;  // DIRECT: words of the next chunk a lane holds, at one block an SM

template <int MT> struct WindowRows {
    static constexpr int M = 16 * MT;
    static constexpr int PIECES = 2 * MT;
    static constexpr int STRIDE = 16 * (PIECES + 1);
};

// An 8 x 8 matrix of 16-bit elements transposed across the warp (the fragment layout of mma.cuh:
// lane 4r + q holds row r, columns 2q and 2q + 1, the lower column in the low half)
__device__ __forceinline__ u32 movmatrix_trans(u32 a) {
    u32 d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(a));
    return d;
}

__device__ __forceinline__ void st_shared_u32(u32 address, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(address), "r"(v) : "memory");
}

// A lane's four words of a unit: features f + 8 i and f + 8 i + 1 of a token's row (i = 0..3,
// zero past n_in), one 4-byte load each where the row and f are 4-byte aligned (`aligned`)
// and all eight features lie before n_in; else a feature at a time, out of line (the rare
// path: a misaligned x or the last chunk).
__device__ __noinline__ uint4 feature_words_checked(const u16* __restrict__ row, int f, int n_in) {
    u32 w[4];
    for (int i = 0; i < 4; ++i) {
        const int e = f + 8 * i;
        const u32 lo = e < n_in ? row[e] : 0u;
        const u32 hi = e + 1 < n_in ? row[e + 1] : 0u;
        w[i] = lo | hi << 16;
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void feature_words(u32 (&w)[4], const u16* __restrict__ row, int f, int n_in, bool aligned) {
    if (aligned && f + 25 < n_in) {
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = __ldg(reinterpret_cast<const u32*>(row + f + 8 * i));
    } else {
        const uint4 v = feature_words_checked(row, f, n_in);
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
    }
}

// y[index] = v0 and, where `second`, y[index + 1] = v1, in out_type; `paired`: both in range
// and the pair aligned.
__device__ __forceinline__ void store_pair(void* y, i64 index, float v0, float v1, bool second, bool paired,
                                           int out_type) {
    if (out_type == 2) {
        float* d = static_cast<float*>(y) + index;
        if (paired) {
            *reinterpret_cast<float2*>(d) = make_float2(v0, v1);
        } else {
            d[0] = v0;
            if (second) d[1] = v1;
        }
        return;
    }
    u16* d = static_cast<u16*>(y) + index;
    const u16 h0 = out_type == 0 ? float_to_half(v0) : float_to_bf16(v0);
    const u16 h1 = out_type == 0 ? float_to_half(v1) : float_to_bf16(v1);
    if (paired) {
        *reinterpret_cast<u32*>(d) = pack2(h0, h1);
    } else {
        d[0] = h0;
        if (second) d[1] = h1;
    }
}

template <int P, int MT, int WS, int NW, int MINB, bool DIRECT>
__global__ void __launch_bounds__(32 * NW, MINB)
    sparse_linear_window(const int* __restrict__ offs, const uint4* __restrict__ steps,
                         const float* __restrict__ bias, const u16* __restrict__ x, void* __restrict__ y,
                         int out_type, int n_groups, int n_chunks, int chunk_rows, int cap, int n_tokens,
                         int x_stride, int n_in, int n_out, int vector, int aligned) {
    wait_for_previous_kernel();
    typedef WindowRows<MT> L;
    constexpr int THREADS = 32 * NW, NWS = NW * WS;
    constexpr int UNITS = DIRECT ? HELD_WORDS / 4 / MINB : 1;  // 8 x 32 units a warp holds
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int group = blockIdx.x % n_groups;
    const int m0 = (blockIdx.x / n_groups) * L::M;
    const int U = chunk_rows;
    const u32 base = shared_address(smem);
    const u32 ring_bytes = (u32)(3 * U + 8) * L::STRIDE;
    const int* group_offs = offs + (i64)group * n_chunks * NWS;

    for (int i = threadIdx.x; i < 8 * L::PIECES; i += THREADS) {
        const int r = i / L::PIECES, q = i % L::PIECES;
        *reinterpret_cast<uint4*>(smem + (3 * U + r) * L::STRIDE + 16 * q) = make_uint4(0, 0, 0, 0);
    }

    auto stage_plan = [&](int w, int first, int last) {  // window w's steps [first, last)
        const u32 dst = base + ring_bytes + (u32)((w & 1) * cap * STEP_BYTES);
        const uint4* src = steps + (i64)first * STEP_PIECES;
        const int n = (last - first) * STEP_PIECES;
        for (int i = threadIdx.x; i < n; i += THREADS) cp_async_16(dst + 16 * i, src + i, 16);
    };
    auto stage_xt = [&](int c) {  // chunk c of X^T [n_in, x_stride] into slot c % 3
        const u32 slot = base + (u32)((c % 3) * U * L::STRIDE);
        const int row0 = c * U;
        for (int i = threadIdx.x; i < U * L::PIECES; i += THREADS) {
            const int r = i / L::PIECES, q = i % L::PIECES;
            const int feature = row0 + r, token = m0 + 8 * q;
            const bool in = feature < n_in && token < x_stride;
            const u16* src = in ? x + (i64)feature * x_stride + token : x;
            cp_async_16(slot + r * L::STRIDE + 16 * q, src, in ? 16 : 0);
        }
    };
    // DIRECT: unit u = warp + k NW of a chunk covers tokens 8 (u % (M / 8)) + 0..7 and features
    // 32 (u / (M / 8)) + 0..31; word i of a lane: its token's features 8 i + 2 (lane & 3) + 0..1
    u32 held[UNITS][4];
    const int n_units = (L::M / 8) * (U / 32);
    auto load_direct = [&](int c) {
#pragma unroll
        for (int k = 0; k < UNITS; ++k) {
            const int u = warp + k * NW;
            const int token = m0 + 8 * (u % (L::M / 8)) + g;
            const int f = c * U + 32 * (u / (L::M / 8)) + 2 * t;
            if (u < n_units && token < n_tokens) {
                feature_words(held[k], x + (i64)token * x_stride, f, n_in, aligned);
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) held[k][i] = 0u;
            }
        }
    };
    auto store_direct = [&](int c) {
        const u32 slot = base + (u32)((c % 3) * U * L::STRIDE);
#pragma unroll
        for (int k = 0; k < UNITS; ++k) {
            const int u = warp + k * NW;
            if (u >= n_units) break;  // warp-uniform: movmatrix needs the whole warp
            const u32 at = slot + (u32)(32 * (u / (L::M / 8)) + g) * L::STRIDE + 16 * (u % (L::M / 8)) + 4 * t;
#pragma unroll
            for (int i = 0; i < 4; ++i) st_shared_u32(at + 8 * i * L::STRIDE, movmatrix_trans(held[k][i]));
        }
    };

    int first = 0, last = 0;
    if (n_chunks > 0) {
        first = __ldg(group_offs);
        last = __ldg(group_offs + NWS);
        if constexpr (DIRECT) {
            load_direct(0);
            store_direct(0);
            if (n_chunks > 1) {
                load_direct(1);
                store_direct(1);
            }
        } else {
            stage_xt(0);
            if (n_chunks > 1) stage_xt(1);
        }
        stage_plan(0, first, last);
    }
    cp_async_commit();
    // lane j <= WS: the first step of the warp's list j in the current window (j = WS: its end),
    // counted from the window's first; the next window's steps [next_first, next_last)
    int lists = lane <= WS && n_chunks > 0 ? __ldg(group_offs + warp * WS + lane) - first : 0;
    int next_first = last, next_last = n_chunks > 1 ? __ldg(group_offs + 2 * NWS) : last;

    float acc[WS][MT][4] = {};
    const int k_lane = ((lane >> 4) << 3) | (lane & 7);  // the step row this lane addresses
    const u32 x_lane = base + 16 * ((lane >> 3) & 1);     // and its 8 tokens of an m16 tile
    const u32 two_u = 2 * U, three_u = 3 * U;
    for (int w = 0; w < n_chunks; ++w) {
        if constexpr (DIRECT) {
            if (w + 2 < n_chunks) load_direct(w + 2);
        }
        int lists_next = 0;
        if (w + 1 < n_chunks && lane <= WS) {
            lists_next = __ldg(group_offs + (i64)(w + 1) * NWS + warp * WS + lane) - next_first;
        }
        const int after_last = w + 2 < n_chunks ? __ldg(group_offs + (i64)(w + 3) * NWS) : next_last;
        cp_async_wait<0>();
        __syncthreads();  // window w's plan and chunk w + 1 are in; window w - 1's buffers are free
        if (w + 1 < n_chunks) {
            stage_plan(w + 1, next_first, next_last);
            if constexpr (!DIRECT) {
                if (w + 2 < n_chunks) stage_xt(w + 2);
            }
        }
        cp_async_commit();

        const unsigned char* plan = smem + ring_bytes + (w & 1) * cap * STEP_BYTES;
        const u32 ring0 = (u32)((w % 3) * U);
        int s = __shfl_sync(0xffffffffu, lists, 0);
        const int s_end = __shfl_sync(0xffffffffu, lists, WS);
        u32 code_next = 0;
        uint2 f_next = make_uint2(0, 0);
        if (s < s_end) {
            code_next = *reinterpret_cast<const u16*>(plan + s * STEP_BYTES + 2 * k_lane);
            f_next = *reinterpret_cast<const uint2*>(plan + s * STEP_BYTES + 32 + 8 * lane);
        }
#pragma unroll
        for (int j = 0; j < WS; ++j) {
            const int e = __shfl_sync(0xffffffffu, lists, j + 1);
            for (; s < e; ++s) {
                const u32 code = code_next;
                const uint2 f = f_next;
                if (s + 1 < s_end) {
                    code_next = *reinterpret_cast<const u16*>(plan + (s + 1) * STEP_BYTES + 2 * k_lane);
                    f_next = *reinterpret_cast<const uint2*>(plan + (s + 1) * STEP_BYTES + 32 + 8 * lane);
                }
                u32 row = code + ring0;
                row = code >= two_u ? code + U : row >= three_u ? row - three_u : row;
                const u32 a_row = x_lane + row * L::STRIDE;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    u32 a[4];
                    ldmatrix_x4_trans(a, a_row + 32 * mt);
                    mma_16x8x16<P>(acc[j][mt], a[0], a[1], a[2], a[3], f.x, f.y);
                }
            }
        }

        if constexpr (DIRECT) {
            if (w + 2 < n_chunks) store_direct(w + 2);
        }
        lists = lists_next;
        next_first = next_last;
        next_last = after_last;
    }

    const bool paired = (n_out & 1) == 0;
#pragma unroll
    for (int j = 0; j < WS; ++j) {
        const i64 strip = (i64)group * NWS + warp * WS + j;
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
                store_pair(y, (i64)token * n_out + o, acc[j][mt][2 * h] + b0, acc[j][mt][2 * h + 1] + b1, second,
                           paired, out_type);
            }
        }
    }
}

}  // namespace sl
}  // namespace fg
