// The column sums of an fp32 matrix and the matrix converted to a 16-bit type, in one pass:
// a bias gradient and the 16-bit operand of the products of a projection's backward
// (flashgnn/ops/graph_conv.py). Deterministic: every block sums a fixed range of rows in a
// fixed order, and the last block to finish adds the blocks' sums in block order.
#include "common.cuh"
#include "mma.cuh"

namespace fg::colsum {

constexpr int THREADS = 256;

// x, x_out: [n_rows, f]; partial: [gridDim.x, f] fp32 scratch; finished: a zero counter, left at
// zero; sums: [f]. A block's threads are `rows` row lanes of `columns` column threads
// (columns a power of two, 32 to 256, times rows = THREADS); each block takes rows_per_block rows.
template <class Out>
__global__ void __launch_bounds__(THREADS)
cast_and_sum_columns(const float* __restrict__ x, i64 n_rows, int f, int columns, i64 rows_per_block,
                     typename Out::T* __restrict__ x_out, float* __restrict__ partial,
                     unsigned* __restrict__ finished, float* __restrict__ sums) {
    wait_for_previous_kernel();
    __shared__ float lane_sums[THREADS];
    __shared__ bool last;
    const int tid = threadIdx.x, rows = THREADS / columns;
    const int lane_row = tid / columns, lane_col = tid % columns;
    const i64 begin = (i64)blockIdx.x * rows_per_block;
    const i64 end = begin + rows_per_block < n_rows ? begin + rows_per_block : n_rows;
    for (int c0 = 0; c0 < f; c0 += columns) {
        const int col = c0 + lane_col;
        float acc = 0.f;
        if (col < f) {
#pragma unroll 4
            for (i64 r = begin + lane_row; r < end; r += rows) {
                const float v = x[r * f + col];
                x_out[r * f + col] = from_float(v, Out());
                acc += v;
            }
        }
        lane_sums[tid] = acc;
        __syncthreads();
        if (lane_row == 0 && col < f) {
            float s = 0.f;
            for (int q = 0; q < rows; ++q) s += lane_sums[q * columns + lane_col];
            partial[(i64)blockIdx.x * f + col] = s;
        }
        __syncthreads();
    }
    __threadfence();  // this block's sums visible before it counts itself finished
    if (tid == 0) last = atomicAdd(finished, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    for (int col = tid; col < f; col += THREADS) {
        float s = 0.f;
        for (u32 b = 0; b < gridDim.x; ++b) s += __ldcg(partial + (i64)b * f + col);
        sums[col] = s;
    }
    if (tid == 0) *finished = 0u;
}

}  // namespace fg::colsum
