// Tensor-core precisions: storage types, conversions and mma.sync wrappers, in PTX (NVRTC
// compiles without the toolkit's cuda_fp16.h / cuda_bf16.h).
//
// Fragment layouts used by the kernels (lane = 4 * g + t, g in 0..7, t in 0..3):
//   m16n8k8 f16/bf16: a0 = {A[g][2t], A[g][2t+1]}, a1 = {A[g+8][2t], A[g+8][2t+1]},
//                     b0 = {B[2t][g], B[2t+1][g]}   (lower 16 bits hold the lower k index)
//   m16n8k16 f16/bf16: a0, a1, b0 as m16n8k8's; a2, a3, b1 the same at k + 8
//   m16n8k4 tf32:     a0 = A[g][t], a1 = A[g+8][t], b0 = B[t][g]
//   both:             c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
#pragma once
#include "common.cuh"

namespace fg {

enum Precision { FP16 = 0, BF16 = 1, TF32 = 2 };

__device__ __forceinline__ float half_to_float(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 float_to_half(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_float(u16 b) { return __uint_as_float((u32)b << 16); }

__device__ __forceinline__ u16 float_to_bf16(float f) {
    u16 b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}

// f rounded to tf32 (10 mantissa bits, nearest with ties away from zero), as raw bits: the
// tensor cores' tf32 operand.
__device__ __forceinline__ u32 float_to_tf32(float f) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

// tf32 on CUDA cores (ops/precision.py: inputs rounded to tf32, fp32 accumulation): products
// of two tf32 values are exact in fp32, so the CUDA-core kernels round operands as they read
// them, with these.
__device__ __forceinline__ float tf32_rounded(float f) { return __uint_as_float(float_to_tf32(f)); }

template <int N>
__device__ __forceinline__ void round_to_tf32(float (&v)[N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] = tf32_rounded(v[e]);
}

// Element types as the kernels see them: 16-bit storage is raw bits (u16).
struct Half { typedef u16 T; };
struct BFloat16 { typedef u16 T; };
struct Float { typedef float T; };

__device__ __forceinline__ float to_float(u16 v, Half) { return half_to_float(v); }
__device__ __forceinline__ float to_float(u16 v, BFloat16) { return bf16_to_float(v); }
__device__ __forceinline__ float to_float(float v, Float) { return v; }
__device__ __forceinline__ u16 from_float(float v, Half) { return float_to_half(v); }
__device__ __forceinline__ u16 from_float(float v, BFloat16) { return float_to_bf16(v); }
__device__ __forceinline__ float from_float(float v, Float) { return v; }

// MMA operands of one precision: the tag of the dense operands' storage type, and the bits of an
// fp32 value rounded to the operand type (Staged: 16 bits for fp16/bf16, 32 for tf32).
template <int P> struct Operand;
template <> struct Operand<FP16> {
    typedef Half Tag;
    typedef u16 Staged;
    static __device__ __forceinline__ u16 round(float v) { return float_to_half(v); }
};
template <> struct Operand<BF16> {
    typedef BFloat16 Tag;
    typedef u16 Staged;
    static __device__ __forceinline__ u16 round(float v) { return float_to_bf16(v); }
};
template <> struct Operand<TF32> {
    typedef Float Tag;
    typedef u32 Staged;
    static __device__ __forceinline__ u32 round(float v) { return float_to_tf32(v); }
};

__device__ __forceinline__ u32 pack2(u16 lo, u16 hi) { return (u32)lo | ((u32)hi << 16); }

// One mma.sync with fp32 accumulators d[0..3] (in a function taking float (&d)[4]): SHAPE
// "m16n8k8" or "m16n8k16", TYPE "f16" or "bf16", A and B the operand lists, then their inputs.
#define FG_MMA_F32(SHAPE, TYPE, A, B, ...)                                                            \
    asm volatile("mma.sync.aligned." SHAPE ".row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, " A ", " B \
                 ", {%0,%1,%2,%3};"                                                                   \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                     \
                 : __VA_ARGS__)

// d += a * b on one 16x8x8 tile, fp32 accumulators (P: FP16 or BF16).
template <int P> __device__ __forceinline__ void mma_16x8x8(float (&d)[4], u32 a0, u32 a1, u32 b0) {
    static_assert(P == FP16 || P == BF16, "m16n8k8 on 16-bit operands (tf32: mma_16x8x4_tf32)");
    if constexpr (P == FP16) FG_MMA_F32("m16n8k8", "f16", "{%4,%5}", "{%6}", "r"(a0), "r"(a1), "r"(b0));
    else FG_MMA_F32("m16n8k8", "bf16", "{%4,%5}", "{%6}", "r"(a0), "r"(a1), "r"(b0));
}

// d += a * b on one 16x8x16 tile, fp32 accumulators (P: FP16 or BF16): a0/a2 rows g, a1/a3
// rows g + 8, k pairs 2t (a0, a1, b0) and 2t + 8 (a2, a3, b1).
template <int P>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    static_assert(P == FP16 || P == BF16, "m16n8k16 on 16-bit operands");
    if constexpr (P == FP16) {
        FG_MMA_F32("m16n8k16", "f16", "{%4,%5,%6,%7}", "{%8,%9}", "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        FG_MMA_F32("m16n8k16", "bf16", "{%4,%5,%6,%7}", "{%8,%9}", "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}
#undef FG_MMA_F32

// d += a * b on one 16x8x4 tf32 tile (operands already rounded with float_to_tf32).
__device__ __forceinline__ void mma_16x8x4_tf32(float (&d)[4], u32 a0, u32 a1, u32 b0) {
    asm volatile(
        "mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// Loads E consecutive elements src[0..E) of a dense row into registers, as raw 32-bit words,
// zero-filling elements at or past `valid`. The fast path is 16-byte loads; it needs the whole
// group in range and 16-byte alignment, which the caller vouches for with `aligned`.
// Groups of 8 or 4 bytes take one 8- or 4-byte load.
template <typename T, int E>
__device__ __forceinline__ void load_group(u32 (&w)[E * sizeof(T) / 4], const T* src, int valid, bool aligned) {
    constexpr int WORDS = E * sizeof(T) / 4;
    static_assert(WORDS % 4 == 0 || WORDS <= 2, "groups of 4, 8 or 16*m bytes");
    if (aligned && valid >= E) {
        if (WORDS == 1) {
            w[0] = __ldg(reinterpret_cast<const u32*>(src));
        } else if (WORDS == 2) {
            const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
            w[0] = v.x; w[WORDS - 1] = v.y;
        } else {
#pragma unroll
            for (int i = 0; i + 3 < WORDS; i += 4) {
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(src) + i / 4);
                w[i] = v.x; w[i + 1] = v.y; w[i + 2] = v.z; w[i + 3] = v.w;
            }
        }
    } else {
        T e[E];
#pragma unroll
        for (int i = 0; i < E; ++i) e[i] = i < valid ? src[i] : T(0);
#pragma unroll
        for (int i = 0; i < WORDS; ++i) {
            if (sizeof(T) == 2) {
                w[i] = pack2(*reinterpret_cast<const u16*>(&e[2 * i]), *reinterpret_cast<const u16*>(&e[2 * i + 1]));
            } else {
                w[i] = *reinterpret_cast<const u32*>(&e[i]);
            }
        }
    }
}

// Gathers the E features of row col of x at src = x + (this lane's first feature) into words,
// or zeros when !in (col is then not read). WHOLE: the launch's rows are aligned and every
// lane's E features lie inside N, so the load is one vector load and its address one 32 x
// 32-bit wide multiply-add (mad.wide.u32, which the C++ expression under the predicate does not
// compile to); else load_group's checked path.
template <bool WHOLE, typename T, int E>
__device__ __forceinline__ void gather(u32 (&words)[E * sizeof(T) / 4], const T* src, int col, bool in, int n,
                                       int valid, bool aligned) {
    if (!in) {
#pragma unroll
        for (int i = 0; i < E * (int)sizeof(T) / 4; ++i) words[i] = 0;
    } else if constexpr (WHOLE) {
        const T* row;
        asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(row) : "r"(col), "r"((u32)(n * sizeof(T))), "l"(src));
        load_group<T, E>(words, row, E, true);
    } else {
        load_group<T, E>(words, src + (i64)col * n, valid, aligned);
    }
}

}  // namespace fg
