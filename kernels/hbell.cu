// The dense blocks of HB-ELL (flashgnn/formats/hbell.py) in SpMM, Y = base + A_dense X, where
// base (fp32, optional) is the product of the sparse (ELL) blocks, computed before by the 8x1
// kernels; the paper's sparse tensor-core instructions exist only in simulation, so this is its
// emulation: dense blocks on dense MMAs, sparse ones on the 8x1 path.
//
// spmm_dense (fp16 / bf16 / tf32 on tensor cores, fp32 accumulators): the stored 16 x 16 block
// is the left operand (row-major), 16 gathered rows of X the right one, as in the 16x1 baseline
// without swap-and-transpose. One warp owns one block row and 8 E feature columns (E MMA tiles)
// and walks the block row's dense blocks. fp16 / bf16: one m16n8k16 per tile and block; lane
// (g, t) loads E consecutive features f0 + E g .. of X rows c + 2t, c + 2t + 1, c + 2t + 8 and
// c + 2t + 9 (c the block's first column; rows past n_cols read as 0), and tile i takes feature
// f0 + E g + i as its column g. tf32: four m16n8k4 per tile and block, k steps s = 0..3 over X
// rows c + 4s + t. Lane (g, t) ends holding block rows g and g + 8 at the 2E consecutive
// features f0 + 2E t .., added to base and stored as one run.
//
// spmm_dense_fp32 (exact fp32 on CUDA cores): one warp per matrix row and 32 features, a lane
// per feature, 16 fused multiply-adds per dense block in column order.
#include "mma.cuh"
#include "store.cuh"

namespace fg {
namespace hbell {

constexpr int BS = 16;  // rows and columns of a block

// E features of X row `col` from feature `first` into words, zeros where col >= n_cols.
template <typename T, int E>
__device__ __forceinline__ void gather_row(u32 (&w)[E * sizeof(T) / 4], const T* x, i64 col, int n_cols, int n,
                                           int first, bool aligned) {
    if (col < n_cols) {
        load_group<T, E>(w, x + col * n + first, n - first, aligned);
    } else {
#pragma unroll
        for (int i = 0; i < E * (int)sizeof(T) / 4; ++i) w[i] = 0;
    }
}

template <int P, int E, typename OutTag>
__global__ void __launch_bounds__(128)
    spmm_dense(const i64* __restrict__ dense_ptr, const int* __restrict__ dense_col,
               const i64* __restrict__ dense_val, const float* __restrict__ values, const float* __restrict__ base,
               i64 n_brows, int n_rows, int n_cols, int n, int aligned,
               const typename Operand<P>::Tag::T* __restrict__ x, typename OutTag::T* __restrict__ out) {
    wait_for_previous_kernel();
    typedef typename Operand<P>::Tag::T XT;
    constexpr int FEATURES = 8 * E;
    const int n_chunks = (n + FEATURES - 1) / FEATURES;
    const i64 warp = global_thread() >> 5;
    if (warp >= n_brows * n_chunks) return;
    const i64 w = warp / n_chunks;
    const int f0 = (int)(warp - w * n_chunks) * FEATURES;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int gathered = f0 + E * g;  // first feature this lane loads
    float acc[E][4] = {};
    const i64 end = dense_ptr[w + 1];
    for (i64 b = dense_ptr[w]; b < end; ++b) {
        const float* a = values + __ldg(dense_val + b);
        const i64 c = __ldg(dense_col + b);
        if constexpr (P == TF32) {
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const u32 a0 = float_to_tf32(__ldg(a + BS * g + 4 * s + t));
                const u32 a1 = float_to_tf32(__ldg(a + BS * (g + 8) + 4 * s + t));
                u32 xs[E];
                gather_row<float, E>(xs, x, c + 4 * s + t, n_cols, n, gathered, aligned);
#pragma unroll
                for (int i = 0; i < E; ++i) mma_16x8x4_tf32(acc[i], a0, a1, float_to_tf32(__uint_as_float(xs[i])));
            }
        } else {
            const float2 lo0 = __ldg(reinterpret_cast<const float2*>(a + BS * g + 2 * t));
            const float2 hi0 = __ldg(reinterpret_cast<const float2*>(a + BS * (g + 8) + 2 * t));
            const float2 lo1 = __ldg(reinterpret_cast<const float2*>(a + BS * g + 2 * t + 8));
            const float2 hi1 = __ldg(reinterpret_cast<const float2*>(a + BS * (g + 8) + 2 * t + 8));
            const u32 a0 = pack2(Operand<P>::round(lo0.x), Operand<P>::round(lo0.y));
            const u32 a1 = pack2(Operand<P>::round(hi0.x), Operand<P>::round(hi0.y));
            const u32 a2 = pack2(Operand<P>::round(lo1.x), Operand<P>::round(lo1.y));
            const u32 a3 = pack2(Operand<P>::round(hi1.x), Operand<P>::round(hi1.y));
            u32 xa[E / 2], xb[E / 2], xc[E / 2], xd[E / 2];
            gather_row<XT, E>(xa, x, c + 2 * t, n_cols, n, gathered, aligned);
            gather_row<XT, E>(xb, x, c + 2 * t + 1, n_cols, n, gathered, aligned);
            gather_row<XT, E>(xc, x, c + 2 * t + 8, n_cols, n, gathered, aligned);
            gather_row<XT, E>(xd, x, c + 2 * t + 9, n_cols, n, gathered, aligned);
#pragma unroll
            for (int i = 0; i < E; ++i) {
                // {X[k][f], X[k + 1][f]} for this lane's feature of tile i (low half: row k)
                const u32 sel = i & 1 ? 0x7632 : 0x5410;
                mma_16x8x16<P>(acc[i], a0, a1, a2, a3, __byte_perm(xa[i / 2], xb[i / 2], sel),
                               __byte_perm(xc[i / 2], xd[i / 2], sel));
            }
        }
    }
    const int first = f0 + 2 * E * t;  // first feature this lane stores
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const i64 row = BS * w + g + 8 * h;
        if (row >= n_rows) continue;
        float v[2 * E];
#pragma unroll
        for (int i = 0; i < E; ++i) {
            v[i] = acc[i][2 * h];
            v[E + i] = acc[i][2 * h + 1];
        }
        if (base != nullptr) {
#pragma unroll
            for (int j = 0; j < 2 * E; ++j) {
                if (first + j < n) v[j] += base[row * n + first + j];
            }
        }
        store_run<OutTag, 2 * E>(out + row * n + first, v, n - first, aligned);
    }
}

__global__ void __launch_bounds__(128)
    spmm_dense_fp32(const i64* __restrict__ dense_ptr, const int* __restrict__ dense_col,
                    const i64* __restrict__ dense_val, const float* __restrict__ values,
                    const float* __restrict__ base, i64 n_rows, int n_cols, int n, const float* __restrict__ x,
                    float* __restrict__ out) {
    wait_for_previous_kernel();
    const int n_chunks = (n + 31) / 32;
    const i64 warp = global_thread() >> 5;
    if (warp >= n_rows * n_chunks) return;
    const i64 row = warp / n_chunks;
    const int f = (int)(warp - row * n_chunks) * 32 + (threadIdx.x & 31);
    if (f >= n) return;
    const i64 w = row / BS;
    const int r = (int)(row - w * BS);
    float acc = 0.f;
    const i64 end = dense_ptr[w + 1];
    for (i64 b = dense_ptr[w]; b < end; ++b) {
        const float* a = values + __ldg(dense_val + b) + BS * r;
        const i64 c = __ldg(dense_col + b);
#pragma unroll
        for (int k = 0; k < BS; ++k) {
            if (c + k < n_cols) acc = fmaf(__ldg(a + k), __ldg(x + (c + k) * n + f), acc);
        }
    }
    out[row * n + f] = base != nullptr ? base[row * n + f] + acc : acc;
}

}  // namespace hbell
}  // namespace fg
