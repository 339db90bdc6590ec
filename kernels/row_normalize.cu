// Row L2 normalisation for AGNN's cosine, forward and backward, fp32 math; one warp per row.
//
// Forward: norm_i = |x_i|, u_i = x_i / max(norm_i, EPS) (F.normalize), u written in the
// kernels' storage type (the SDDMM's operand), and optionally x_i in that type too (the SpMM's
// operand), so that one pass over x replaces a norm, a clamp, a division and two conversions.
// Backward, accumulated into d_x: d_x_i += (d_u_i - [norm_i >= EPS] u_i (u_i . d_u_i)) / max(norm_i, EPS),
// u recomputed from x in fp32 (the bits of the forward's value before rounding). The bracket is
// clamp_min's rule: the norm receives a gradient only where it was not clamped.
#include "common.cuh"
#include "mma.cuh"

namespace fg::rownorm {

constexpr float EPS = 1e-12f;  // F.normalize's default (ops/agnn.py: NORMALIZE_EPS)

__device__ __forceinline__ float warp_total(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

// x: [n_rows, f] of type In; unit and (when not null) x_out: [n_rows, f] of type Out; norm [n_rows].
template <class In, class Out>
__global__ void normalize_rows(const typename In::T* __restrict__ x, i64 n_rows, int f,
                               typename Out::T* __restrict__ unit, typename Out::T* __restrict__ x_out,
                               float* __restrict__ norm) {
    wait_for_previous_kernel();
    const i64 row = global_thread() >> 5;
    if (row >= n_rows) return;
    const int lane = threadIdx.x & 31;
    const typename In::T* xr = x + row * f;
    float sq = 0.f;
    for (int j = lane; j < f; j += 32) {
        const float v = to_float(xr[j], In());
        sq = fmaf(v, v, sq);
    }
    const float nrm = sqrtf(warp_total(sq));
    const float denom = fmaxf(nrm, EPS);
    for (int j = lane; j < f; j += 32) {
        const float v = to_float(xr[j], In());
        unit[row * f + j] = from_float(__fdiv_rn(v, denom), Out());
        if (x_out) x_out[row * f + j] = from_float(v, Out());
    }
    if (lane == 0) norm[row] = nrm;
}

// d_unit, d_x: [n_rows, f] fp32; d_x is updated in place. d_head (or null): [n_head, f] fp32, a
// second gradient of the first n_head rows of u, added to d_unit's as it is read (AGNN's
// destinations are the first rows of its sources).
template <class In>
__global__ void normalize_rows_backward(const typename In::T* __restrict__ x, const float* __restrict__ norm,
                                        const float* __restrict__ d_unit, const float* __restrict__ d_head,
                                        i64 n_head, i64 n_rows, int f, float* __restrict__ d_x) {
    wait_for_previous_kernel();
    const i64 row = global_thread() >> 5;
    if (row >= n_rows) return;
    const int lane = threadIdx.x & 31;
    const i64 base = row * f;
    const float* head = d_head != nullptr && row < n_head ? d_head + base : nullptr;
    const float nrm = norm[row];
    const float denom = fmaxf(nrm, EPS);
    float dot = 0.f;
    for (int j = lane; j < f; j += 32) {
        const float du = head ? d_unit[base + j] + head[j] : d_unit[base + j];
        dot = fmaf(du, __fdiv_rn(to_float(x[base + j], In()), denom), dot);
    }
    const float radial = nrm >= EPS ? warp_total(dot) : 0.f;
    for (int j = lane; j < f; j += 32) {
        const float du = head ? d_unit[base + j] + head[j] : d_unit[base + j];
        const float u = __fdiv_rn(to_float(x[base + j], In()), denom);
        d_x[base + j] += __fdiv_rn(du - u * radial, denom);
    }
}

}  // namespace fg::rownorm
