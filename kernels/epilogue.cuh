// A layer's epilogue on one element: bias, ReLU and the next layer's dropout, whose mask is a
// counter-based hash of (seed, offset, stream, element index) so that the backward draws it
// again instead of storing it. flashgnn/ops/epilogue.py computes the same hash in torch: the
// CPU and the GPU keep the same elements given a key.
#pragma once
#include "common.cuh"

namespace fg {

// The finaliser of MurmurHash3: a bijection of 32-bit words whose every output bit depends on
// every input bit.
__device__ __forceinline__ u32 mix32(u32 h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

// The word a launch's elements are hashed with: key = {seed, offset} (int64, low 32 bits used),
// stream the layer's own number, so that the layers of one step draw different masks.
__device__ __forceinline__ u32 dropout_key(const i64* key, u32 stream) {
    const u32 seed = (u32)key[0], offset = (u32)key[1];
    return mix32(mix32(seed ^ 0x9e3779b9u) ^ offset ^ (stream * 0x632be5abu));
}

// Whether element `index` (row * columns + column) is kept: its hash at or above `threshold`
// (round(p 2^32)), so a fraction p of the elements is dropped.
__device__ __forceinline__ bool dropout_keeps(u32 key, i64 index, u32 threshold) {
    const u64 i = (u64)index;
    return mix32(mix32((u32)i ^ key) ^ (u32)(i >> 32)) >= threshold;
}

// The epilogue's parameters as a kernel receives them.
struct EpilogueArgs {
    const float* bias;  // [columns] fp32, or null
    int relu;
    u32 threshold;      // 0: no dropout
    float scale;        // 1 / (1 - p)
    const i64* key;     // {seed, offset}; read only when threshold > 0
    u32 stream;
};

// v + bias, ReLU, dropout of element (row, column) of a [*, columns] result, in fp32;
// `key` from dropout_key (unused without dropout).
__device__ __forceinline__ float apply_epilogue(const EpilogueArgs& e, u32 key, float v, i64 row, int column,
                                                int columns) {
    if (e.bias != nullptr) v += __ldg(e.bias + column);
    if (e.relu) v = v > 0.f ? v : 0.f;
    if (e.threshold != 0u) v = dropout_keeps(key, row * columns + column, e.threshold) ? v * e.scale : 0.f;
    return v;
}

}  // namespace fg
