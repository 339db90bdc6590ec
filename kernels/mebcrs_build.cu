// CSR -> ME-BCRS on the GPU.
#include "common.cuh"

// values_out[perm[i]] = values_in[i]: places values given in CSR order into the value slots.
template <typename T>
__global__ void scatter_values(const T* __restrict__ values_in, const i64* __restrict__ perm,
                               T* __restrict__ values_out, i64 nnz) {
    for (i64 i = fg::global_thread(); i < nnz; i += fg::grid_stride()) {
        values_out[perm[i]] = values_in[i];
    }
}
