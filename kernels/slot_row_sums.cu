// Row sums of a matrix whose nonzeros are stored in a value layout, visited in CSR order:
// out[r] = sum of values[slot[e]] over e in [indptr[r], indptr[r + 1]). With A^T's CSR and
// the A slot of each of its nonzeros, the column sums of values in A's layout, without moving
// them into A^T's layout first (GAT's gradient of the source terms).
//
// One warp per row: lanes stride the row's nonzeros (independent loads, several in flight),
// then butterfly shuffles; the order is fixed, so the bits are the same in every run.
#include "common.cuh"

namespace fg {

__global__ void slot_row_sums(const i64* __restrict__ indptr, const i64* __restrict__ slot,
                              const float* __restrict__ values, i64 n_rows, float* __restrict__ out) {
    wait_for_previous_kernel();
    const i64 row = global_thread() >> 5;
    if (row >= n_rows) return;
    const int lane = threadIdx.x & 31;
    const i64 end = indptr[row + 1];
    float acc = 0.f;
#pragma unroll 4
    for (i64 e = indptr[row] + lane; e < end; e += 32) acc += __ldg(values + __ldg(slot + e));
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (lane == 0) out[row] = acc;
}

}  // namespace fg
