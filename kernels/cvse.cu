// SpMM and SDDMM on CVSE (flashgnn/formats/cvse.py): strips of V rows (V = 2, 4, 8), each
// nonzero column of a strip one V x 1 vector, a strip's vectors contiguous and its values
// vector after vector. fp16 / bf16 / tf32 on tensor cores with fp32 accumulators, exact fp32
// on CUDA cores.
//
// MMA shape. Every tensor-core kernel here works on windows of 8 rows: G = 8 / V consecutive
// strips, whose vectors are one contiguous range (row_ptr[G w] .. row_ptr[G w + G]). The 8 rows
// are the n = 8 of an m16n8 MMA (swap-and-transpose: Y^T = X^T A^T, 16 features of X as m), the
// window's vectors its k: m16n8k16 for fp16/bf16, two m16n8k4 for tf32 (8 vectors a step). At
// V = 8 the window is one strip and every B entry can be a nonzero. At V = 4 and 2 the vectors
// of 2 or 4 strips are concatenated along k, and a B entry (vector j, row r) is the value only
// where j belongs to r's strip, 0 elsewhere: one MMA serves G strips over the concatenation of
// their vectors. This is the "gather per strip, mask the rest" tiling: each vector's row of X
// is gathered once per feature chunk, exactly as at V = 8, and only the MMA's useful fraction
// drops (V / 8), which costs little on Hopper, where the SpMM is bound by the gathers of X, not
// by MMA issue. The paper's m8n8k4 (k = 4, n = 8 per strip) runs at a fraction of the m16n8k16
// rate on sm_90, and packing strips over the union of their columns needs a second layout
// built on the host; neither pays for its complexity here.
//
// SpMM (cvse_spmm_tc): a warp owns one window and a chunk of 16 TILES features (TILES MMA
// tiles), warps of a block take consecutive chunks of one window (so they share its columns
// and values in L1). Lane (g, t) gathers 2 TILES consecutive features f .. f + 2 TILES - 1 (f =
// chunk start + 2 TILES g) of its vectors (2t, 2t + 1, 2t + 8, 2t + 9 of a step; t, t + 4 for
// tf32) in one load of 4 TILES bytes (fp16/bf16) or 8 TILES bytes (tf32), so the 8 lanes that
// share a vector read 32 TILES contiguous bytes of its row of X. Tile i takes feature f + 2i as
// its row g and f + 2i + 1 as its row g + 8 (16-bit pairs regrouped by byte permutes), so the
// accumulators hold, for window rows 2t and 2t + 1, the 2 TILES consecutive features from f,
// stored as one vector store. Each lane loads the B entries of its own row g: the value and
// mask bit of a vector of its strip (vectors of other strips and masked slots are 0: padding is
// inert unless X holds inf or NaN, which 0 * inf turns into NaN on the tensor cores). The next
// step's gathers are issued before the current step's MMAs (the loop is bound by their latency).
// TILES = 2 for N <= 32, else 4 (64 features, 16-byte gathers for fp16/bf16): the launcher's
// choice, as 4 tiles at small N would leave half of every warp's lanes without features.
//
// SDDMM (cvse_sddmm_tc): a warp owns one window and walks its vectors 16 at a time: D (16
// vectors x 8 rows) = Y[vector columns] (16 x K) times X[window rows]^T (K x 8), K in chunks of
// 32 (16 for tf32); lane (g, t) loads 8 (tf32: 4) consecutive features of vectors g and g + 8's
// Y rows and of window row g's X row, and MMA step s takes the s-th pairs (tf32: words) of each
// run, the same K order for both operands. The lane holding D[j][r] writes slot V j + r % V of
// vector j when j belongs to row r's strip: every slot of the window's vectors is written once,
// 0 where vec_mask says it is not a nonzero.
//
// fp32 (cvse_spmm_fp32, cvse_sddmm_fp32): exact fp32 FMAs on CUDA cores. The SpMM gives a warp
// one strip and 32 F features (F per lane, 16-byte loads at F = 4), walks the strip's vectors
// (one column, mask and V values each, the same for the whole warp, so the mask tests do not
// diverge) and adds only real products. The SDDMM gives a warp one strip and a lane one vector
// of it: the lane reads its column's row of Y (16-byte loads where K allows) against the
// strip's V rows of X (the same address across the warp, one broadcast).
//
// Long rows are not split across warps (no segments): a hub window serialises its warp. The
// patterns this format serves first, pruned weights with every nonzero a V-vector, have
// balanced strips.
#include "mma.cuh"

namespace fg {
namespace cvse {

constexpr int WARPS = 4;  // per block
constexpr int ROWS = 8;   // rows of a tensor-core window: the MMA's n

// The vectors of window w (all its strips) and those of the strip holding window row r.
struct WindowRange {
    int begin, end;  // the window's vectors
    int lo, hi;      // row r's strip's vectors (empty past the last strip)
};

template <int V>
__device__ __forceinline__ WindowRange window_range(const int* __restrict__ row_ptr, int n_strips, int w, int r) {
    constexpr int G = ROWS / V;
    const int s0 = G * w, s = s0 + r / V;
    WindowRange out;
    out.begin = __ldg(row_ptr + s0);
    out.end = __ldg(row_ptr + min(s0 + G, n_strips));
    out.lo = s < n_strips ? __ldg(row_ptr + s) : out.end;
    out.hi = s < n_strips ? __ldg(row_ptr + s + 1) : out.end;
    return out;
}

// The B entry (vector v, window row r): its value when v is a vector of r's strip and row r % V
// of it is a real nonzero, else 0.
template <int V>
__device__ __forceinline__ float b_entry(const float* __restrict__ values, const u8* __restrict__ vec_mask, int v,
                                         const WindowRange& wr, int r) {
    if (v < wr.lo || v >= wr.hi) return 0.f;
    const int row = r % V;
    return (__ldg(vec_mask + v) >> row) & 1 ? __ldg(values + (i64)V * v + row) : 0.f;
}

// dst[0..CNT) = v in OutTag's type, elements at or past `valid` left alone; one vector store of
// CNT elements (at most 32 bytes) where the caller vouches for the alignment.
template <typename OutTag, int CNT>
__device__ __forceinline__ void store_group(typename OutTag::T* dst, const float (&v)[CNT], int valid, bool aligned) {
    typedef typename OutTag::T T;
    constexpr int WORDS = CNT * (int)sizeof(T) / 4;
    if (aligned && valid >= CNT) {
        u32 w[WORDS];
#pragma unroll
        for (int i = 0; i < WORDS; ++i) {
            if constexpr (sizeof(T) == 2) {
                w[i] = pack2(from_float(v[2 * i], OutTag()), from_float(v[2 * i + 1], OutTag()));
            } else {
                w[i] = __float_as_uint(v[i]);
            }
        }
        if constexpr (WORDS == 1) {
            *reinterpret_cast<u32*>(dst) = w[0];
        } else if constexpr (WORDS == 2) {
            *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
        } else {
#pragma unroll
            for (int q = 0; q < WORDS / 4; ++q) {
                reinterpret_cast<uint4*>(dst)[q] = make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
            }
        }
    } else {
        for (int i = 0; i < min(valid, CNT); ++i) dst[i] = from_float(v[i], OutTag());
    }
}

// One k step of the SpMM for lane (g, t): its gathered runs of X and its B fragments.
template <int P, int TILES>
struct SpmmStep {
    static constexpr bool TF = P == TF32;
    static constexpr int VECTORS = TF ? 2 : 4;                // vectors this lane gathers per step
    static constexpr int WORDS = TF ? 2 * TILES : TILES;      // 32-bit words of one gathered run
    static constexpr int KSTEP = TF ? 8 : 16;                 // vectors per step (the warp's)
    u32 x[VECTORS][WORDS];
    u32 b[2];

    // The lane's vectors of the step starting at vector `base`: (2t, 2t + 1, 2t + 8, 2t + 9), or
    // (t, t + 4) for tf32.
    static __device__ __forceinline__ int vector(int base, int t, int j) {
        return TF ? base + t + 4 * j : base + 2 * t + (j & 1) + 8 * (j >> 1);
    }

    template <int V>
    __device__ __forceinline__ void load(const int* __restrict__ col_idx, const float* __restrict__ values,
                                         const u8* __restrict__ vec_mask, const typename Operand<P>::Tag::T* x_lane,
                                         const WindowRange& wr, int base, int n, int valid, bool aligned, int g,
                                         int t) {
        typedef typename Operand<P>::Tag::T XT;
        float bv[VECTORS];
#pragma unroll
        for (int j = 0; j < VECTORS; ++j) {
            const int v = vector(base, t, j);
            if (v < wr.end) {
                load_group<XT, 2 * TILES>(x[j], x_lane + (i64)__ldg(col_idx + v) * n, valid, aligned);
            } else {
#pragma unroll
                for (int i = 0; i < WORDS; ++i) x[j][i] = 0;
            }
            bv[j] = b_entry<V>(values, vec_mask, v, wr, g);
        }
        if constexpr (TF) {
            b[0] = float_to_tf32(bv[0]);
            b[1] = float_to_tf32(bv[1]);
        } else {
            b[0] = pack2(Operand<P>::round(bv[0]), Operand<P>::round(bv[1]));
            b[1] = pack2(Operand<P>::round(bv[2]), Operand<P>::round(bv[3]));
        }
    }

    __device__ __forceinline__ void multiply(float (&acc)[TILES][4]) const {
#pragma unroll
        for (int i = 0; i < TILES; ++i) {
            if constexpr (TF) {
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    mma_16x8x4_tf32(acc[i], float_to_tf32(__uint_as_float(x[j][2 * i])),
                                    float_to_tf32(__uint_as_float(x[j][2 * i + 1])), b[j]);
                }
            } else {
                mma_16x8x16<P>(acc[i], __byte_perm(x[0][i], x[1][i], 0x5410), __byte_perm(x[0][i], x[1][i], 0x7632),
                               __byte_perm(x[2][i], x[3][i], 0x5410), __byte_perm(x[2][i], x[3][i], 0x7632), b[0],
                               b[1]);
            }
        }
    }
};

template <int P, int V, int TILES, typename OutTag>
__global__ void __launch_bounds__(32 * WARPS)
    cvse_spmm_tc(const int* __restrict__ row_ptr, const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                 const float* __restrict__ values, int n_strips, int n_rows, int n, int aligned,
                 const typename Operand<P>::Tag::T* __restrict__ x, typename OutTag::T* __restrict__ out) {
    wait_for_previous_kernel();
    typedef SpmmStep<P, TILES> Step;
    constexpr int CHUNK = 16 * TILES, RUN = 2 * TILES;
    const int chunks = (n + CHUNK - 1) / CHUNK;
    const int n_windows = (n_strips + ROWS / V - 1) / (ROWS / V);
    const i64 warp = global_thread() >> 5;
    if (warp >= (i64)n_windows * chunks) return;
    const int w = (int)(warp / chunks);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int f = (int)(warp - (i64)w * chunks) * CHUNK + RUN * g;  // this lane's first feature
    const WindowRange wr = window_range<V>(row_ptr, n_strips, w, g);
    const typename Operand<P>::Tag::T* x_lane = x + f;
    float acc[TILES][4] = {};
    Step cur;
    cur.template load<V>(col_idx, values, vec_mask, x_lane, wr, wr.begin, n, n - f, aligned, g, t);
    for (int base = wr.begin; base < wr.end; base += Step::KSTEP) {  // uniform across the warp
        Step next;  // past the end: zeros, nothing read
        next.template load<V>(col_idx, values, vec_mask, x_lane, wr, base + Step::KSTEP, n, n - f, aligned, g, t);
        cur.multiply(acc);
        cur = next;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = ROWS * w + 2 * t + h;
        if (row >= n_rows) continue;
        float v[RUN];
#pragma unroll
        for (int i = 0; i < TILES; ++i) {
            v[2 * i] = acc[i][h];
            v[2 * i + 1] = acc[i][2 + h];
        }
        store_group<OutTag, RUN>(out + (i64)row * n + f, v, n - f, aligned);
    }
}

// Features per lane and K chunk of the tensor-core SDDMM: 16 bytes of each operand row.
template <int P> struct SddmmRun { static constexpr int RUN = 8; };
template <> struct SddmmRun<TF32> { static constexpr int RUN = 4; };

template <int P, int V>
__global__ void __launch_bounds__(32 * WARPS)
    cvse_sddmm_tc(const int* __restrict__ row_ptr, const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                  int n_strips, int n_rows, int kdim, int aligned, const typename Operand<P>::Tag::T* __restrict__ x,
                  const typename Operand<P>::Tag::T* __restrict__ y, float* __restrict__ out) {
    wait_for_previous_kernel();
    typedef typename Operand<P>::Tag::T XT;
    constexpr int RUN = SddmmRun<P>::RUN, WORDS = RUN * (int)sizeof(XT) / 4, KCHUNK = 4 * RUN;
    const int n_windows = (n_strips + ROWS / V - 1) / (ROWS / V);
    const i64 warp = global_thread() >> 5;
    if (warp >= n_windows) return;
    const int w = (int)warp;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const WindowRange wr = window_range<V>(row_ptr, n_strips, w, 2 * t);  // rows 2t, 2t + 1: one strip
    const int x_row = ROWS * w + g;
    for (int base = wr.begin; base < wr.end; base += 16) {  // uniform across the warp
        const int va = base + g, vb = base + g + 8;
        const i64 ca = va < wr.end ? __ldg(col_idx + va) : -1, cb = vb < wr.end ? __ldg(col_idx + vb) : -1;
        float d[4] = {};
        for (int c = 0; c < kdim; c += KCHUNK) {
            const int f = c + RUN * t, valid = kdim - f;
            u32 ya[WORDS] = {}, yb[WORDS] = {}, xg[WORDS] = {};
            if (ca >= 0) load_group<XT, RUN>(ya, y + ca * kdim + f, valid, aligned);
            if (cb >= 0) load_group<XT, RUN>(yb, y + cb * kdim + f, valid, aligned);
            if (x_row < n_rows) load_group<XT, RUN>(xg, x + (i64)x_row * kdim + f, valid, aligned);
            if constexpr (P == TF32) {
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    mma_16x8x4_tf32(d, float_to_tf32(__uint_as_float(ya[s])), float_to_tf32(__uint_as_float(yb[s])),
                                    float_to_tf32(__uint_as_float(xg[s])));
                }
            } else {
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    mma_16x8x16<P>(d, ya[2 * s], yb[2 * s], ya[2 * s + 1], yb[2 * s + 1], xg[2 * s], xg[2 * s + 1]);
                }
            }
        }
        // D[j][2t + h]: vector va (c0, c1) or vb (c2, c3) at window row 2t + h
        const int r = (2 * t) % V;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int v = half ? vb : va;
            if (v < wr.lo || v >= wr.hi) continue;
            const u32 m = __ldg(vec_mask + v) >> r;
            *reinterpret_cast<float2*>(out + (i64)V * v + r) =
                make_float2(m & 1 ? d[2 * half] : 0.f, m & 2 ? d[2 * half + 1] : 0.f);
        }
    }
}

template <int V, int F>
__global__ void __launch_bounds__(32 * WARPS)
    cvse_spmm_fp32(const int* __restrict__ row_ptr, const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                   const float* __restrict__ values, int n_strips, int n_rows, int n, int aligned,
                   const float* __restrict__ x, float* __restrict__ out) {
    wait_for_previous_kernel();
    constexpr int CHUNK = 32 * F;
    const int chunks = (n + CHUNK - 1) / CHUNK;
    const i64 warp = global_thread() >> 5;
    if (warp >= (i64)n_strips * chunks) return;
    const int s = (int)(warp / chunks);
    const int f = (int)(warp - (i64)s * chunks) * CHUNK + F * (threadIdx.x & 31);
    float acc[V][F] = {};
    const int end = __ldg(row_ptr + s + 1);
    for (int v = __ldg(row_ptr + s); v < end; ++v) {
        const u32 m = __ldg(vec_mask + v);
        u32 xw[F];
        load_group<float, F>(xw, x + (i64)__ldg(col_idx + v) * n + f, n - f, aligned);
        float val[V];
        load_features<V>(val, values + (i64)V * v);
#pragma unroll
        for (int r = 0; r < V; ++r) {
            if (!((m >> r) & 1)) continue;  // the same vector in every lane: no divergence
#pragma unroll
            for (int e = 0; e < F; ++e) acc[r][e] = fmaf(val[r], __uint_as_float(xw[e]), acc[r][e]);
        }
    }
#pragma unroll
    for (int r = 0; r < V; ++r) {
        const int row = V * s + r;
        if (row < n_rows) store_group<Float, F>(out + (i64)row * n + f, acc[r], n - f, aligned);
    }
}

template <int V>
__global__ void __launch_bounds__(32 * WARPS)
    cvse_sddmm_fp32(const int* __restrict__ row_ptr, const int* __restrict__ col_idx, const u8* __restrict__ vec_mask,
                    int n_strips, int n_rows, int kdim, int aligned, const float* __restrict__ x,
                    const float* __restrict__ y, float* __restrict__ out) {
    wait_for_previous_kernel();
    const i64 warp = global_thread() >> 5;
    if (warp >= n_strips) return;
    const int s = (int)warp;
    const int rows = min(V, n_rows - V * s);  // the strip's rows inside the matrix
    const float* xs = x + (i64)V * s * kdim;
    const int end = __ldg(row_ptr + s + 1);
    for (int v = __ldg(row_ptr + s) + (threadIdx.x & 31); v < end; v += 32) {
        const float* yrow = y + (i64)__ldg(col_idx + v) * kdim;
        float acc[V] = {};
        int k = 0;
        if (aligned) {  // K a multiple of 4, rows 16-byte aligned
            for (; k < kdim; k += 4) {
                float yv[4];
                load_features<4>(yv, yrow + k);
#pragma unroll
                for (int r = 0; r < V; ++r) {
                    if (r >= rows) break;
                    float xv[4];
                    load_features<4>(xv, xs + (i64)r * kdim + k);
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[r] = fmaf(xv[e], yv[e], acc[r]);
                }
            }
        }
        for (; k < kdim; ++k) {
            const float yv = __ldg(yrow + k);
#pragma unroll
            for (int r = 0; r < V; ++r) {
                if (r < rows) acc[r] = fmaf(__ldg(xs + (i64)r * kdim + k), yv, acc[r]);
            }
        }
        const u32 m = __ldg(vec_mask + v);
#pragma unroll
        for (int r = 0; r < V; ++r) out[(i64)V * v + r] = (m >> r) & 1 ? acc[r] : 0.f;
    }
}

}  // namespace cvse
}  // namespace fg
