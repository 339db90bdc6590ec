// Shared device helpers for flashgnn kernels. Compiled by NVRTC: no toolkit headers, so
// fixed-width types, half/bfloat16 conversions and tensor-core instructions are spelled
// out in PTX here.
#pragma once

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

namespace fg {

constexpr int WINDOW = 8;  // rows per ME-BCRS window (the MMA's n dimension)

// Programmatic dependent launch (sm_90 and newer; flashgnn/_cuda/runtime.py launches a file's
// kernels this way when every one of them begins with this call): the grid may be scheduled
// before the kernel ahead of it in the stream has completed, so it waits until that kernel has
// finished and its writes are visible before touching global memory. What is saved is the gap
// between dependent kernels. Without the launch attribute it returns at once.
// A kernel with a preamble still begins with this call, passing false when the preamble runs,
// and waits exactly once further on: before the wait the preamble reads only what no kernel of
// the last two wrote (a pattern's columns and masks, and segment tables or SpMM values that an
// earlier launch has read, unchanged since: Segments.launched, spmm._VALUES_READ), which
// allow_next_kernel's rule makes safe: a kernel lets the next one be scheduled only after its
// own wait, so when a grid starts, the kernel two ahead of it has completed.
__device__ __forceinline__ void wait_for_previous_kernel(bool wait = true) {
#if __CUDA_ARCH__ >= 900
    if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel of the stream be scheduled (its preamble then runs beside this kernel's
// end); called by every thread after its wait_for_previous_kernel. Without it the next grid is
// scheduled as this one's blocks exit. Where it goes is measured per kernel: the next grid's
// blocks take the SMs with room first, so an early call can pile them onto a few SMs (the SpMM
// calls it after its loop, the SDDMM, which gains more from the overlap, before: docs/TUNING.md).
__device__ __forceinline__ void allow_next_kernel() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ i64 global_thread() {
    return (i64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ i64 grid_stride() { return (i64)gridDim.x * blockDim.x; }

// dst = src[0 .. VW) through the read-only path, in 16-byte loads when VW is a multiple of 4
// (src then 16-byte aligned).
template <int VW>
__device__ __forceinline__ void load_features(float (&dst)[VW], const float* src) {
    if constexpr (VW % 4 == 0) {
#pragma unroll
        for (int q = 0; q < VW; q += 4) {
            const float4 t = __ldg(reinterpret_cast<const float4*>(src + q));
            dst[q] = t.x;
            dst[q + 1] = t.y;
            dst[q + 2] = t.z;
            dst[q + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < VW; ++e) dst[e] = __ldg(src + e);
    }
}

// The bitwise or of v over the warp (all lanes take part).
__device__ __forceinline__ u32 warp_or(u32 v) {
    u32 r;
    asm volatile("redux.sync.or.b32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
}

// A window split over several warps finishes in-kernel: each warp, having written its partial
// results, counts itself in here; true, in every lane, for the warp that counts last, which may
// then read the others' partials (through L2: __ldcg) and must reset the counter to 0 for the
// next launch. counter: the window's; count: its warps.
// One acquire-release count by lane 0 orders both sides (the lanes' writes reach it through
// __syncwarp, its acquire reaches their reads through the second): the two sequentially
// consistent fences it replaces stalled the warps that finish hub windows, the kernels' tails.
__device__ __forceinline__ bool last_to_arrive(int* counter, int count) {
    __syncwarp();  // every lane's partials are written before lane 0 counts (its release covers them)
    int last = 0;
    if ((threadIdx.x & 31) == 0) {
        int before;
        asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
        last = before == count - 1;
    }
    __syncwarp();  // the other warps' partials, counted above, are read after lane 0's acquire
    return __shfl_sync(0xffffffffu, last, 0);
}

}  // namespace fg

// ---------------------------------------------------------------------------------------------
// Window segments, shared by edge_softmax.cu and spmm_fp32.cu.
// A segment is a run of at most seg_vectors vectors of one window (flashgnn/_cuda/segments.py);
// a window longer than that is split over several segments, each with its own workspace slot
// `part` for partial results (-1 when one segment holds the whole window). seg_vectors is a
// multiple of 8, so a segment starts on a block boundary of the value layout.
namespace fg {

struct WindowSegment {
    i64 window;
    i64 start;  // the window's first vector
    int n_vec;  // vectors in the window
    int begin;  // first vector of the segment, relative to start
    int end;    // one past its last vector, relative to start
    int part;   // workspace slot, or -1
};

__device__ __forceinline__ WindowSegment window_segment_at(const i64* __restrict__ row_ptr, i64 window,
                                                           int begin, int part, int seg_vectors) {
    WindowSegment s;
    s.window = window;
    s.start = row_ptr[window];
    s.n_vec = (int)(row_ptr[window + 1] - s.start);
    s.begin = begin;
    s.end = min(begin + seg_vectors, s.n_vec);
    s.part = part;
    return s;
}

// torch's leaky ReLU (and its backward's test, e > 0).
__device__ __forceinline__ float leaky_relu(float e, float slope) { return e > 0.f ? e : e * slope; }

// GAT's attention on one edge from its destination's row record (max, sum of exp(s - max),
// er: edge_softmax.cu's store_row_info) and its source's term el: the operations, operands and
// order of the softmax forward's output, so the same bits.
__device__ __forceinline__ float gat_attention(float4 record, float el, float slope) {
    return expf(leaky_relu(record.z + el, slope) - record.x) / record.y;
}

__device__ __forceinline__ WindowSegment window_segment(const i64* __restrict__ row_ptr,
                                                        const int* __restrict__ seg_window,
                                                        const int* __restrict__ seg_begin,
                                                        const int* __restrict__ seg_part, i64 seg,
                                                        int seg_vectors) {
    return window_segment_at(row_ptr, seg_window[seg], seg_begin[seg], seg_part[seg], seg_vectors);
}

}  // namespace fg
