// Graph convolution's normalised edge values, placed into A's value layout on the GPU
// (flashgnn/graph.py, Graph.gcn_values): for every CSR nonzero e of row r and column c,
// out[slot[e]] = din(r) * dout(c) * w[e], with din = 1, d_in(r)^(-1/2) or 1 / d_in(r) and dout
// likewise from c's out-degree (degrees clamped to >= 1; power 0, 1 or 2 for 1, ^(-1/2), ^-1),
// w = 1 without weights: the torch path's products in its order. out_degree comes from
// count_sources (integer atomics: exact). A thread per nonzero finds its row by a binary search
// of indptr.
#include "common.cuh"

namespace fg {

__global__ void count_sources(const i64* __restrict__ indices, i64 nnz, int* __restrict__ out_degree) {
    wait_for_previous_kernel();
    for (i64 e = global_thread(); e < nnz; e += grid_stride()) atomicAdd(out_degree + indices[e], 1);
}

__device__ __forceinline__ float degree_factor(i64 degree, int power) {
    const float d = (float)max(degree, (i64)1);
    return power == 0 ? 1.f : power == 1 ? 1.f / sqrtf(d) : 1.f / d;
}

__global__ void gcn_values(const i64* __restrict__ indptr, const i64* __restrict__ indices,
                           const int* __restrict__ out_degree, const i64* __restrict__ slot,
                           const float* __restrict__ weight, i64 n_rows, i64 nnz, int power_in, int power_out,
                           float* __restrict__ out) {
    wait_for_previous_kernel();
    for (i64 e = global_thread(); e < nnz; e += grid_stride()) {
        i64 lo = 0, hi = n_rows - 1;  // the last row r with indptr[r] <= e
        while (lo < hi) {
            const i64 mid = (lo + hi + 1) >> 1;
            if (indptr[mid] <= e) lo = mid;
            else hi = mid - 1;
        }
        float v = degree_factor(indptr[lo + 1] - indptr[lo], power_in);
        v *= power_out ? degree_factor(out_degree[indices[e]], power_out) : 1.f;
        out[slot[e]] = weight ? v * weight[e] : v;
    }
}

}  // namespace fg
