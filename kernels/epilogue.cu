// A graph convolution's epilogue as one elementwise pass after its product (cuBLAS's, or an
// SpMM's): bias, ReLU and the next layer's dropout applied to the fp32 value and the result
// written in the next layer's input type; and its backward, the gradient passed where the
// stored output is positive (ReLU) and where the dropout's mask, drawn again from the key,
// kept the element, written in the product's type. Each thread takes one element per
// grid-stride step: the pass is bound by memory, and consecutive threads read consecutive
// elements.
#include "epilogue.cuh"
#include "mma.cuh"

namespace fg::epi {

// out[r, c] = epilogue(y[r, c]) for y, out [n_rows, columns].
template <class In, class Out>
__global__ void epilogue_forward(const typename In::T* __restrict__ y, i64 n_rows, int columns,
                                 const float* __restrict__ bias, int relu, unsigned threshold, float scale,
                                 const i64* __restrict__ key, unsigned stream, typename Out::T* __restrict__ out) {
    wait_for_previous_kernel();
    const EpilogueArgs e{bias, relu, threshold, scale, key, stream};
    const u32 k = threshold != 0u ? dropout_key(key, stream) : 0u;
    const i64 total = n_rows * columns;
    for (i64 idx = global_thread(); idx < total; idx += grid_stride()) {
        const i64 row = idx / columns;
        const int column = (int)(idx - row * columns);
        out[idx] = from_float(apply_epilogue(e, k, to_float(y[idx], In()), row, column, columns), Out());
    }
}

// grad_in[r, c] = grad[r, c] * scale where the epilogue passed element (r, c) (out > 0 with
// ReLU; kept by the dropout), else 0; grad, out [n_rows, columns] in the epilogue's output type.
template <class Out, class Dst>
__global__ void epilogue_backward(const typename Out::T* __restrict__ grad, const typename Out::T* __restrict__ out,
                                  i64 n_rows, int columns, int relu, unsigned threshold, float scale,
                                  const i64* __restrict__ key, unsigned stream, typename Dst::T* __restrict__ grad_in) {
    wait_for_previous_kernel();
    const u32 k = threshold != 0u ? dropout_key(key, stream) : 0u;
    const i64 total = n_rows * columns;
    for (i64 idx = global_thread(); idx < total; idx += grid_stride()) {
        float g = to_float(grad[idx], Out());
        if (relu && !(to_float(out[idx], Out()) > 0.f)) g = 0.f;
        if (threshold != 0u) g = dropout_keeps(k, idx, threshold) ? g * scale : 0.f;
        grad_in[idx] = from_float(g, Dst());
    }
}

}  // namespace fg::epi
