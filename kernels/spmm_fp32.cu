// The exact fp32 SpMM on CUDA cores, Y = A X, read straight from ME-BCRS; with its inputs
// rounded as read, also the tf32 SpMM where CUDA cores beat the tensor cores. The work, its
// layout and its variants: spmm_cuda_core.cuh.
#include "spmm_cuda_core.cuh"

namespace fg::spmm32 {

// TF32: x and the values rounded to tf32 as read; the other parameters: sum_segments.
template <int VW, int L, int U, bool SHARED, bool PREFETCH, bool TF32>
__global__ void spmm_fp32(const i64* __restrict__ row_ptr, const int* __restrict__ col_idx,
                          const u8* __restrict__ vec_mask, const float* __restrict__ values,
                          const int* __restrict__ seg_window, const int* __restrict__ seg_begin,
                          const int* __restrict__ seg_part, i64 n_segments, int seg_vectors, int k_log2,
                          i64 n_rows, int n, int n_tiles, const float* __restrict__ x, float* __restrict__ y,
                          float* __restrict__ workspace) {
    wait_for_previous_kernel();
    sum_segments<VW, L, U, SHARED, PREFETCH, TF32 ? fg::TF32 : FP32, Float>(
        row_ptr, col_idx, vec_mask, values, seg_window, seg_begin, seg_part, n_segments, seg_vectors, k_log2, n_rows,
        n, n_tiles, x, y, workspace);
}

}  // namespace fg::spmm32
