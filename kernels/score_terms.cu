// GAT's per-node score terms, a dot product of each node's features with each of A attention
// vectors of its head, and their gradients:
//   terms[r, a] = sum_f ft[r, f] * attn[h, a, f]        for the rows r of head h (head-major ft)
//   d_ft[r, f]  = sum_a d_terms[r, a] * attn[h, a, f]
//   d_attn[h, a, f] = sum_r d_terms[r, a] * ft[r, f]
// in fp32 from ft in its own type (fp16, bf16 or fp32). In torch this is a product tensor of
// [heads, rows, A, F] then a sum, each way, and a reduction over the rows for d_attn; here each
// row is read once.
#include "mma.cuh"

namespace fg {

// One thread per row: the loads of its F features hit the sectors its warp's neighbours read
// too, so L1 serves them.
template <typename T, int A>
__global__ void score_terms(const typename T::T* __restrict__ ft, const float* __restrict__ attn, i64 n_rows,
                            int rows_per_head, int f_dim, float* __restrict__ terms) {
    wait_for_previous_kernel();
    for (i64 r = global_thread(); r < n_rows; r += grid_stride()) {
        const float* w = attn + r / rows_per_head * A * f_dim;
        const typename T::T* x = ft + r * f_dim;
        float s[A] = {};
        for (int f = 0; f < f_dim; ++f) {
            const float v = to_float(x[f], T());
#pragma unroll
            for (int a = 0; a < A; ++a) s[a] = fmaf(v, __ldg(w + a * f_dim + f), s[a]);
        }
#pragma unroll
        for (int a = 0; a < A; ++a) terms[r * A + a] = s[a];
    }
}

// d_ft, and per block the sums of d_attn over its rows: partial [heads, gridDim.x, A, F] (the
// caller adds the blocks, in order). Block (b, h) takes passes of blockDim.x / F consecutive
// rows of head h, thread t feature t % F of row t / F (coalesced loads of ft and stores of
// d_ft), so each thread keeps one feature's sums over its rows; the block then adds, per
// feature, its threads' sums in thread order: the same bits in every run. F <= blockDim.x.
template <typename T, int A>
__global__ void score_terms_backward(const typename T::T* __restrict__ ft, const float* __restrict__ attn,
                                     const float* __restrict__ d_terms, int rows_per_head, int f_dim,
                                     typename T::T* __restrict__ d_ft, float* __restrict__ partial) {
    wait_for_previous_kernel();
    extern __shared__ float thread_sums[];  // [A][blockDim.x]
    const int head = blockIdx.y, t = threadIdx.x, f = t % f_dim;
    const int rows_per_pass = blockDim.x / f_dim, used = rows_per_pass * f_dim;
    float acc[A] = {};
    if (t < used) {
        float w[A];
#pragma unroll
        for (int a = 0; a < A; ++a) w[a] = attn[((i64)head * A + a) * f_dim + f];
        const i64 first = (i64)head * rows_per_head;
#pragma unroll 4
        for (i64 i = (i64)blockIdx.x * rows_per_pass + t / f_dim; i < rows_per_head;
             i += (i64)gridDim.x * rows_per_pass) {
            const i64 r = first + i;
            const float x = to_float(ft[r * f_dim + f], T());
            float g = 0.f;
#pragma unroll
            for (int a = 0; a < A; ++a) {
                const float d = __ldg(d_terms + r * A + a);
                g = fmaf(d, w[a], g);
                acc[a] = fmaf(d, x, acc[a]);
            }
            d_ft[r * f_dim + f] = from_float(g, T());
        }
    }
#pragma unroll
    for (int a = 0; a < A; ++a) thread_sums[a * blockDim.x + t] = acc[a];
    __syncthreads();
    for (int e = t; e < A * f_dim; e += blockDim.x) {
        const int a = e / f_dim;
        float s = 0.f;
        for (int u = e % f_dim; u < used; u += f_dim) s += thread_sums[a * blockDim.x + u];
        partial[((i64)head * gridDim.x + blockIdx.x) * A * f_dim + e] = s;
    }
}

}  // namespace fg
