// out[dst_slot[e]] = values[src_slot[e]] (values[e] when src_slot is null) for every nonzero e:
// values placed into a value layout from CSR order (the GPU builder), or A's values moved into
// A^T's layout, in one pass; slots no nonzero maps to are left as they are. Elements are moved
// as raw bits of their size, so one kernel serves every dtype.
#include "common.cuh"

namespace fg {

template <class Bits>
__global__ void move_values(const Bits* __restrict__ values, const i64* __restrict__ src_slot,
                            const i64* __restrict__ dst_slot, i64 nnz, Bits* __restrict__ out) {
    wait_for_previous_kernel();
    for (i64 e = global_thread(); e < nnz; e += grid_stride()) out[dst_slot[e]] = values[src_slot ? src_slot[e] : e];
}

}  // namespace fg
