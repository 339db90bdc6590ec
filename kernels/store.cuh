// Storing a lane's run of fp32 results to a dense row in the output's element type.
#pragma once
#include "mma.cuh"

namespace fg {

// dst[0..CNT) = v rounded to OutTag's type, elements at or past `valid` left alone. The fast
// path writes 16-byte units; the caller vouches with `aligned` for dst's 16-byte alignment.
template <typename OutTag, int CNT>
__device__ __forceinline__ void store_run(typename OutTag::T* dst, const float (&v)[CNT], int valid, bool aligned) {
    typedef typename OutTag::T T;
    constexpr int PER_UNIT = 16 / sizeof(T);
    static_assert(CNT % PER_UNIT == 0, "runs of whole 16-byte units");
    if (aligned && valid >= CNT) {
#pragma unroll
        for (int u = 0; u < CNT / PER_UNIT; ++u) {
            u32 w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float* e = v + u * PER_UNIT + i * PER_UNIT / 4;
                if constexpr (sizeof(T) == 2) {
                    w[i] = pack2(from_float(e[0], OutTag()), from_float(e[1], OutTag()));
                } else {
                    w[i] = __float_as_uint(e[0]);
                }
            }
            reinterpret_cast<uint4*>(dst)[u] = make_uint4(w[0], w[1], w[2], w[3]);
        }
    } else {
        for (int i = 0; i < min(valid, CNT); ++i) dst[i] = from_float(v[i], OutTag());
    }
}

}  // namespace fg
