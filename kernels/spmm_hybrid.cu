// The CUDA-core half of the hybrid SpMM: the windows whose 8x1 vectors hold few nonzeros, where
// an MMA would mostly multiply zeros (flashgnn/_cuda/hybrid.py chooses them once per pattern).
// The tensor-core SpMM (spmm.cu) computes the other windows in a launch of its own on the same
// stream; the two write disjoint rows of one output. X and A's values are rounded as read to
// the precision the tensor cores would see, products are exact in fp32 and summed in fp32, so
// the windows differ from the tensor-core result only in the order of the fp32 sums.
#include "spmm_cuda_core.cuh"

namespace fg::spmm32 {

// P: FP16, BF16 or TF32, x in its storage type; OutTag: the output's type (the tensor-core
// launch's). The segments are those of the sparse windows; the other parameters: sum_segments.
template <int VW, int L, int U, bool SHARED, bool PREFETCH, int P, typename OutTag>
__global__ void spmm_sparse_windows(const i64* __restrict__ row_ptr, const int* __restrict__ col_idx,
                                    const u8* __restrict__ vec_mask, const float* __restrict__ values,
                                    const int* __restrict__ seg_window, const int* __restrict__ seg_begin,
                                    const int* __restrict__ seg_part, i64 n_segments, int seg_vectors, int k_log2,
                                    i64 n_rows, int n, int n_tiles, const typename Input<P>::Tag::T* __restrict__ x,
                                    typename OutTag::T* __restrict__ y, float* __restrict__ workspace) {
    wait_for_previous_kernel();
    sum_segments<VW, L, U, SHARED, PREFETCH, P, OutTag>(row_ptr, col_idx, vec_mask, values, seg_window, seg_begin,
                                                        seg_part, n_segments, seg_vectors, k_log2, n_rows, n,
                                                        n_tiles, x, y, workspace);
}

}  // namespace fg::spmm32
