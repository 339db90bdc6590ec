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

__device__ __forceinline__ i64 global_thread() {
    return (i64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ i64 grid_stride() { return (i64)gridDim.x * blockDim.x; }

}  // namespace fg
