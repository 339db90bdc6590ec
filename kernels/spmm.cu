// ME-BCRS SpMM on tensor cores with swap-and-transpose: Y = A X computed as Y^T = X^T A^T.
//
// Work is cut into window segments (runs of at most seg_vectors vectors of one window; long
// windows are split over several segments) and feature chunks of 8 * LF columns. One warp
// computes one chunk of the 8 rows of one segment, or of one of `ways` contiguous runs of its
// vectors (the run sums are then added in shared memory, in run order: on small graphs this
// shortens the critical path of a kernel that is one wave of blocks); the warps of a block that
// share a segment first stage its column indices and its values in shared memory (values masked
// by vec_mask, rounded to the MMA's type and laid out as B fragments), so the loop over the
// segment waits only on the gathers of X. Per MMA step the warp takes KM vectors (8 for
// fp16/bf16 m16n8k8, 4 for tf32 m16n8k4): the gathered dense rows X[col] form the left operand
// (16 features x KM vectors), the 8 x KM sparse block the right operand (n = 8 window rows), and
// the accumulators hold 16 features x 8 rows, fp32. The gathers of the next two batches of
// vectors are in flight during the MMAs of the current one (the loop is bound by gather latency;
// three batches measured faster than two, and four spill: docs/TUNING.md).
//
// Coalesced mapping of the gather: lane (g, t) loads the 4 consecutive features f0 + 4g .. + 3 of
// its vector(s) in one 8-byte (16-bit types) or 16-byte (fp32) load, so the 8 lanes sharing a
// vector read 32 contiguous features. MMA tile i (of 2) takes feature f0 + 4g + 2i as its row g
// and f0 + 4g + 2i + 1 as its row g + 8; for 16-bit operands the pairs are regrouped with byte
// permutes (2 features x 2 vectors per lane); tf32 rows are read a quarter-warp per vector and
// handed to lane (g, t) by shuffles (Batch<TF32>). The accumulators then hold, for rows 2t and
// 2t + 1 of the window, the 4 consecutive features f0 + 4g ..: stores are vectors too. Launches
// whose rows are aligned and whose N is a multiple of the chunk run a second instance of the
// loop (multiply_run<WHOLE>) without per-gather checks (less than half the instructions per
// batch), as the loop is partly issue-bound (docs/TUNING.md).
//
// On the small and mid-size graphs most of a warp's instructions are its fixed part, not its
// batches: the placement takes shifts and a 2-D grid (place_work), runs stop after their last
// batch, and the staging's addresses are a pointer per vector and an XOR per row.
//
// A window split over several segments: each segment writes fp32 partial sums to a workspace,
// and the window's rows are the sum of its partials in segment order, so the result is
// deterministic whoever sums. A window of at most fuse_max segments is summed in this kernel by
// the warp that finishes its chunk last (an atomic counter per window and chunk, reset by that
// warp for the next launch); longer (hub) windows by the spmm_reduce launch, as one warp
// summing a hub's partials would outlast the kernel (docs/TUNING.md).
#include "mma.cuh"

namespace fg {

// LF: consecutive features per lane and vector (2, 4 or 8, a template parameter; 2 for N <= 16,
// where 4 would leave half the lanes idle); a warp covers a chunk of 8 * LF feature columns in
// LF / 2 MMA tiles of 16 features.
constexpr int WARPS = 4;           // per block

struct SpmmArgs {  // the kernel's parameters (the launcher passes scalars and pointers only)
    const int* col_idx;
    const float* values;
    const u8* vec_mask;      // bit r: row r of the vector is a real nonzero
    const int* seg_window;   // window of each segment
    const i64* seg_first;    // first vector of each segment
    const int* seg_count;    // vectors in each segment
    const int* seg_part;     // workspace slot of the segment of a split window, or -1
    const int* seg_split;    // index of the segment's window among the split windows, or -1
    const int* split_part;   // workspace slot of each split window's first segment
    const int* split_count;  // segments of each split window
    float* workspace;        // [n_parts, 8, N] fp32 partial sums
    int* counters;           // [n_split, chunks] finished segments, all 0 between launches
    int fuse_max;            // split windows of at most this many segments are summed here
    int n_segments;
    int seg_vectors;
    int warps_per_segment;   // 1, 2 or 4: the block's warps that share one segment
    int ways;                // 1, 2 or 4: those warps cut each chunk's vectors into this many runs
    int n_rows;
    int n;                   // feature columns N
    int aligned;             // x and out rows are 16-byte aligned
};

// The segment, feature chunk and run of vectors of one warp. A block holds WARPS /
// warps_per_segment consecutive segments and one group of warps_per_segment / ways consecutive
// chunks; warp i of a segment's warps takes chunk i % (warps_per_segment / ways) of the group
// and way i / (warps_per_segment / ways).
struct WarpWork {
    int slot;      // the segment's place among the block's segments
    int seg;       // -1 past the last segment
    int window;
    i64 first;     // first vector
    int count;     // vectors
    int part;      // workspace slot when the window is split, else -1
    int split;     // index among the split windows, or -1
    int parts;     // segments of the split window (0 when not split)
    int chunk;     // feature chunk of this warp
    int way;       // which of the segment's `ways` runs of vectors it takes
    int f0;        // first feature of this lane
    bool computes; // false for a chunk past N (such a warp still helps stage)
};

#define SPMM_PARAMS                                                                                   \
    const int *col_idx, const float *values, const u8 *vec_mask, const int *seg_window, const i64 *seg_first, \
        const int *seg_count, const int *seg_part, const int *seg_split, const int *split_part,               \
        const int *split_count, float *workspace, int *counters, int fuse_max, int n_segments,                \
        int seg_vectors, int warps_per_segment, int ways, int n_rows, int n, int aligned
#define SPMM_ARGS                                                                                     \
    SpmmArgs {                                                                                        \
        col_idx, values, vec_mask, seg_window, seg_first, seg_count, seg_part, seg_split, split_part,  \
            split_count, workspace, counters, fuse_max, n_segments, seg_vectors, warps_per_segment,    \
            ways, n_rows, n, aligned                                                                  \
    }

// The work of this warp but for its segment's facts (read_segment). Block (x, y) holds segment
// group x and chunk group y. warps_per_segment and ways are powers of two, so this takes no
// division: it runs at the head of every warp, where divisions are a large share of a short
// warp's instructions (docs/TUNING.md).
template <int LF>
__device__ __forceinline__ WarpWork place_work(const SpmmArgs& a) {
    constexpr int CHUNK = 8 * LF;
    const int chunks = (a.n + CHUNK - 1) / CHUNK;
    const int segment_shift = 31 - __clz(a.warps_per_segment);
    const int chunk_shift = segment_shift - (31 - __clz(a.ways));  // log2 of a way's warps
    u32 tid;  // volatile: the call after the loop recomputes the work, not keep it live (or spilled)
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
    const int warp = (int)tid >> 5;
    WarpWork w;
    w.slot = warp >> segment_shift;
    w.way = (warp & (a.warps_per_segment - 1)) >> chunk_shift;
    const int seg = (int)blockIdx.x * (WARPS >> segment_shift) + w.slot;
    const int chunk = ((int)blockIdx.y << chunk_shift) + (warp & ((1 << chunk_shift) - 1));
    w.seg = seg < a.n_segments ? seg : -1;
    w.computes = w.seg >= 0 && chunk < chunks;
    w.chunk = chunk;
    w.f0 = chunk * CHUNK + (threadIdx.x & 31) / 4 * LF;
    return w;
}

// The facts of segment w.seg (>= 0).
__device__ __forceinline__ void read_segment(const SpmmArgs& a, WarpWork& w) {
    w.window = a.seg_window[w.seg];
    w.first = a.seg_first[w.seg];
    w.count = a.seg_count[w.seg];
    w.part = a.seg_part[w.seg];
    w.split = a.seg_split[w.seg];
    w.parts = w.split >= 0 ? a.split_count[w.split] : 0;
}

// Word of row r of vector j in a staged segment: 16-bit values of vectors 2i and 2i + 1 of one
// row share a 32-bit word (the m16n8k8 B fragment), fp32 values take a word each. The row is
// XOR-swizzled so that both the staging (a lane per vector) and the B-fragment reads (a lane per
// row and vector pair or vector) hit 32 distinct banks.
template <typename V>
__device__ __forceinline__ int staged_word(int j, int r) {
    constexpr unsigned PER_WORD = 4 / sizeof(V);
    return (int)((unsigned)j / PER_WORD * WINDOW + (r ^ ((unsigned)j / (4 * PER_WORD) & (WINDOW - 1))));
}

// Where a launch's A values come from: stored (`values`), or GAT's attention computed from the
// softmax forward's row records (gat_attention: the bits the softmax kernels would store), P on
// A's pattern (window rows are destinations i, records per row; vector columns sources j, terms
// el_j) or P^T on A^T's (window rows are sources j, vector columns destinations i).
enum GatValues { GAT_NONE = 0, GAT_P = 1, GAT_P_T = 2 };

struct GatAttention {
    const float* el;
    const float4* records;
    float slope;
};

// Copies the segment's columns and vector masks to shared memory; vectors count .. (count
// rounded up to 8) get column 0 and mask 0. A thread per vector (the one stage_values gives
// it). Run by the warps_per_segment warps of the segment. Reads only the pattern, so it may
// run before the previous kernel has finished (the kernel's `preamble`).
__device__ __forceinline__ void stage_columns(const SpmmArgs& a, const WarpWork& w, int* cols, u8* masks) {
    const int threads = 32 * a.warps_per_segment;
    const int padded = (w.count + WINDOW - 1) & ~(WINDOW - 1);
    for (int j = threadIdx.x - w.slot * threads; j < padded; j += threads) {
        const bool in = j < w.count;
        cols[j] = in ? a.col_idx[w.first + j] : 0;
        masks[j] = in ? a.vec_mask[w.first + j] : 0;
    }
}

// Copies the segment's values (format block width K) to shared memory, masked by the vector
// masks and rounded to the MMA type (zeros past the segment's vectors), with the columns and
// masks too unless stage_columns has staged them (`columns_staged`: this thread reads back what
// it staged there, as both give a thread the same vectors; one pass over the vectors costs less
// where no preamble is run). A thread per vector: its real values are the only ones read, or
// with GAT computed from the records (one gather per vector of its column's record or term;
// the window rows' are L1 hits).
template <int P, int K, int GAT>
__device__ __forceinline__ void stage_values(const SpmmArgs& a, const WarpWork& w, int* cols, u8* masks,
                                             typename Operand<P>::Staged* vals, const GatAttention& gat,
                                             bool columns_staged) {
    typedef typename Operand<P>::Staged V;
    constexpr int PER_WORD = 4 / sizeof(V);
    const int threads = 32 * a.warps_per_segment;
    const int padded = (w.count + WINDOW - 1) & ~(WINDOW - 1);
    const i64 window_row = WINDOW * (i64)w.window;
    char* staged = reinterpret_cast<char*>(vals);
    for (int j = threadIdx.x - w.slot * threads; j < padded; j += threads) {
        u8 mask = 0;
        int col = 0;
        if (columns_staged) {
            mask = masks[j];
            col = cols[j];
        } else {
            if (j < w.count) {
                mask = a.vec_mask[w.first + j];
                col = a.col_idx[w.first + j];
            }
            cols[j] = col;
        }
        const float* values = a.values;  // row r of vector j at values[r * kb]
        int kb = K;
        float4 record = {};  // GAT_P_T: the record of vector j's column
        float el_j = 0.f;    // GAT_P: the term of vector j's column
        if (j < w.count) {
            const int b0 = j & ~(K - 1);
            kb = min(K, w.count - b0);
            if constexpr (GAT == GAT_NONE) values += WINDOW * (w.first + b0) + (j - b0);
            if constexpr (GAT == GAT_P_T) record = __ldg(gat.records + col);
            if constexpr (GAT == GAT_P) el_j = __ldg(gat.el + col);
        }
        // byte offset of row r's value = that of row 0 XOR 4r (staged_word's swizzle)
        const int byte0 = (staged_word<V>(j, 0) * PER_WORD + j % PER_WORD) * (int)sizeof(V);
#pragma unroll
        for (int r = 0; r < WINDOW; ++r) {
            float v = 0.f;
            if ((mask >> r) & 1) {
                if constexpr (GAT == GAT_P_T) {
                    v = gat_attention(record, __ldg(gat.el + window_row + r), gat.slope);
                } else if constexpr (GAT == GAT_P) {
                    v = gat_attention(__ldg(gat.records + window_row + r), el_j, gat.slope);
                } else {
                    v = values[r * kb];
                }
            }
            *reinterpret_cast<V*>(staged + (byte0 ^ (4 * r))) = Operand<P>::round(v);
        }
    }
}

// The gathered rows and sparse operands of one lane for a batch of VECTORS vectors in STEPS
// MMA steps (32 bytes of X per lane for 16-bit types, 64 for fp32, whatever LF), and their MMAs.
// fp16 / bf16, m16n8k8: lane (g, t) gathers vectors 2t and 2t + 1 of each step of 8.
template <int P, int LF>
struct Batch {
    static constexpr int STEPS = 8 / LF, VECTORS = 8 * STEPS, TILES = LF / 2;
    u32 xw[STEPS][2][TILES];
    u32 b[STEPS];

    template <bool WHOLE>
    __device__ __forceinline__ void load(const u16* x, const int* cols, const u32* vals, int j0, int count,
                                         const WarpWork& w, int n, bool aligned) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
            const int j = j0 + 8 * s + 2 * t;
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const bool in = j + q < count;
                gather<WHOLE, u16, LF>(xw[s][q], x + w.f0, in ? cols[j + q] : 0, in, n, n - w.f0, aligned);
            }
            b[s] = j < count ? vals[staged_word<u16>(j, g)] : 0;
        }
    }

    __device__ __forceinline__ void mma(float (&acc)[TILES][4]) const {
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
#pragma unroll
            for (int i = 0; i < TILES; ++i) {
                mma_16x8x8<P>(acc[i], __byte_perm(xw[s][0][i], xw[s][1][i], 0x5410),
                              __byte_perm(xw[s][0][i], xw[s][1][i], 0x7632), b[s]);
            }
        }
    }
};

// tf32, m16n8k4: lane (g, t) needs the LF features f0 + LF * g .. of vector t of each step of
// 4. Quarter-warp c (lanes 8c .. 8c + 7) gathers vector c instead, lane 8c + p the features
// lane (p, c) needs, and the MMA step takes them from lane 8t + g by shuffles: a 16-byte load
// whose quarter-warps each read one row costs 4 L1 wavefronts where four rows cost 16, and
// on graphs whose X stays in L2 the tf32 gather is bound by those wavefronts. The 16-bit types
// gather half the bytes, and the shuffles cost them more than they save (docs/TUNING.md).
template <int LF>
struct Batch<TF32, LF> {
    static constexpr int STEPS = 8 / LF, VECTORS = 4 * STEPS, TILES = LF / 2;
    u32 xw[STEPS][LF];
    u32 b[STEPS];

    template <bool WHOLE>
    __device__ __forceinline__ void load(const float* x, const int* cols, const u32* vals, int j0, int count,
                                         const WarpWork& w, int n, bool aligned) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, c = lane >> 3;
        const int f = w.f0 + ((lane & 7) - g) * LF;  // the features of lane (p, c)
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
            const int jc = j0 + 4 * s + c, j = j0 + 4 * s + t;
            gather<WHOLE, float, LF>(xw[s], x + f, jc < count ? cols[jc] : 0, jc < count, n, n - f, aligned);
            b[s] = j < count ? vals[staged_word<u32>(j, g)] : 0;
        }
    }

    __device__ __forceinline__ void mma(float (&acc)[TILES][4]) const {
        const int lane = threadIdx.x & 31, src = 8 * (lane & 3) + (lane >> 2);
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
#pragma unroll
            for (int i = 0; i < TILES; ++i) {
                const u32 a0 = __shfl_sync(0xffffffffu, xw[s][2 * i], src);
                const u32 a1 = __shfl_sync(0xffffffffu, xw[s][2 * i + 1], src);
                mma_16x8x4_tf32(acc[i], float_to_tf32(__uint_as_float(a0)), float_to_tf32(__uint_as_float(a1)), b[s]);
            }
        }
    }
};

// Stores a lane's LF consecutive features of one row; `vector`: dst is aligned for stores of
// min(16, 4 * LF) bytes (fp32) or 2 * LF bytes (16-bit).
template <typename OutTag, int LF>
__device__ __forceinline__ void store_features(typename OutTag::T* dst, const float (&v)[LF], int valid, bool vector) {
    if (vector && valid >= LF) {
        if constexpr (sizeof(typename OutTag::T) == 4) {
            if constexpr (LF == 2) {
                *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
            } else {
#pragma unroll
                for (int e = 0; e < LF; e += 4) *reinterpret_cast<float4*>(dst + e) = make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]);
            }
        } else {
            u32 w[LF / 2];
#pragma unroll
            for (int e = 0; e < LF / 2; ++e) {
                w[e] = pack2((u16)from_float(v[2 * e], OutTag()), (u16)from_float(v[2 * e + 1], OutTag()));
            }
            if constexpr (LF == 2) {
                *reinterpret_cast<u32*>(dst) = w[0];
            } else if constexpr (LF == 4) {
                *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
            } else {
                *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
    } else {
#pragma unroll
        for (int e = 0; e < LF; ++e) {
            if (e < valid) dst[e] = from_float(v[e], OutTag());
        }
    }
}

// Called by every lane of a warp that has written its partial sums of split window w.split
// (at most fuse_max segments): the warp that finishes the window's chunk last sums the window's
// partials in segment order, as spmm_reduce would, and writes the output rows. Only launched
// with fuse_max > 0 when rows are 16-byte aligned and N % 8 == 0 (whole groups of LF features).
template <typename OutTag, int LF>
__device__ __forceinline__ void sum_if_last(const SpmmArgs& a, const WarpWork& w, typename OutTag::T* out) {
    const int lane = threadIdx.x & 31, t = lane & 3;
    int* counter = a.counters + (i64)w.split * ((a.n + 8 * LF - 1) / (8 * LF)) + w.chunk;
    if (!last_to_arrive(counter, w.parts)) return;
    if (a.n - w.f0 > 0) {
        const float* src = a.workspace + ((i64)a.split_part[w.split] * WINDOW + 2 * t) * a.n + w.f0;
        const i64 part_stride = (i64)WINDOW * a.n;
        float sum[2][LF] = {};
#pragma unroll(16 / LF)
        for (int p = 0; p < w.parts; ++p, src += part_stride) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if constexpr (LF == 2) {
                    const float2 v = __ldcg(reinterpret_cast<const float2*>(src + h * a.n));
                    sum[h][0] += v.x; sum[h][1] += v.y;
                } else {
#pragma unroll
                    for (int e = 0; e < LF; e += 4) {
                        const float4 v = __ldcg(reinterpret_cast<const float4*>(src + h * a.n + e));
                        sum[h][e] += v.x; sum[h][e + 1] += v.y; sum[h][e + 2] += v.z; sum[h][e + 3] += v.w;
                    }
                }
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const i64 row = (i64)w.window * WINDOW + 2 * t + h;
            if (row < a.n_rows) store_features<OutTag, LF>(out + row * a.n + w.f0, sum[h], LF, true);
        }
    }
    if (lane == 0) *counter = 0;  // ready for the next launch (kernel boundaries order it)
}

// Writes rows 2t and 2t + 1 of the window (LF features each: feature 2i and 2i + 1 of tile i),
// to the workspace when the window is split; the last segment of a short split window to
// finish then sums the window. Called by every lane of the warp.
template <typename OutTag, int LF>
__device__ __forceinline__ void finish_segment(const SpmmArgs& a, const WarpWork& w, const float (&acc)[LF / 2][4],
                                               typename OutTag::T* out) {
    const int t = threadIdx.x & 3;
    const int valid = a.n - w.f0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (valid <= 0) break;
        float v[LF];
#pragma unroll
        for (int i = 0; i < LF / 2; ++i) {
            v[2 * i] = acc[i][h];
            v[2 * i + 1] = acc[i][h + 2];
        }
        const i64 row = (i64)w.window * WINDOW + 2 * t + h;
        if (w.part >= 0) {
            store_features<Float, LF>(a.workspace + ((i64)w.part * WINDOW + 2 * t + h) * a.n + w.f0, v, valid, a.aligned);
        } else if (row < a.n_rows) {
            store_features<OutTag, LF>(out + row * a.n + w.f0, v, valid, a.aligned);
        }
    }
    if (w.split >= 0 && w.parts <= a.fuse_max) sum_if_last<OutTag, LF>(a, w, out);
}

// The warps of a segment's chunk that took the later runs of its vectors (way > 0) hand their
// sums to the way-0 warp through shared memory `scratch` (LF / 2 * 4 floats per lane and warp,
// after the staged segments), which adds them in way order. Called by every warp of the block.
template <int LF>
__device__ __forceinline__ void sum_ways(const SpmmArgs& a, const WarpWork& w, float (&acc)[LF / 2][4],
                                         float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int chunk_warps = a.warps_per_segment >> (31 - __clz(a.ways));
    if (w.computes && w.way > 0) {
#pragma unroll
        for (int i = 0; i < LF / 2; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) scratch[((warp * (LF / 2) + i) * 4 + e) * 32 + lane] = acc[i][e];
        }
    }
    __syncthreads();
    if (w.computes && w.way == 0) {
        for (int v = 1; v < a.ways; ++v) {
            const int other = warp + v * chunk_warps;
#pragma unroll
            for (int i = 0; i < LF / 2; ++i) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    acc[i][e] += scratch[((other * (LF / 2) + i) * 4 + e) * 32 + lane];
                }
            }
        }
    }
}

// acc += the products of vectors begin .. end of the staged segment (cols, words) with their
// rows of x, three batches of gathers in flight.
template <int P, int LF, bool WHOLE>
__device__ __forceinline__ void multiply_run(float (&acc)[LF / 2][4], const typename Operand<P>::Tag::T* x,
                                             const int* cols, const u32* words, int begin, int end,
                                             const WarpWork& w, int n, bool aligned) {
    constexpr int VECTORS = Batch<P, LF>::VECTORS;
    Batch<P, LF> b0, b1, b2;  // batches j0, j0 + VECTORS, j0 + 2 * VECTORS, rotating
    // TRIM: batches past the run's end are neither loaded nor multiplied (most runs are one to
    // three batches, and such a batch would cost its instructions though its gathers are
    // predicated off), except in batches of 4 vectors (tf32 at 8 features per lane), where the
    // checks cost more than they save (docs/TUNING.md)
    constexpr bool TRIM = VECTORS > 4;
    b0.template load<WHOLE>(x, cols, words, begin, end, w, n, aligned);
    if (!TRIM || begin + VECTORS < end) b1.template load<WHOLE>(x, cols, words, begin + VECTORS, end, w, n, aligned);
    for (int j0 = begin; j0 < end; j0 += 3 * VECTORS) {
        if (!TRIM || j0 + 2 * VECTORS < end) b2.template load<WHOLE>(x, cols, words, j0 + 2 * VECTORS, end, w, n, aligned);
        b0.mma(acc);
        if (TRIM && j0 + VECTORS >= end) break;
        if (!TRIM || j0 + 3 * VECTORS < end) b0.template load<WHOLE>(x, cols, words, j0 + 3 * VECTORS, end, w, n, aligned);
        b1.mma(acc);
        if (TRIM && j0 + 2 * VECTORS >= end) break;
        if (!TRIM || j0 + 4 * VECTORS < end) b1.template load<WHOLE>(x, cols, words, j0 + 4 * VECTORS, end, w, n, aligned);
        b2.mma(acc);
    }
}

// Blocks per SM the kernel's registers are bounded for: 8 (64 registers) at 4 features per
// lane, 7 at 2 (its batches of 32 vectors, 16 for tf32, spill at 64) and 8, 6 for tf32 at 8, which spills
// below 80 registers. The loop waits on gathers, so resident warps matter: a looser bound
// (7 blocks at 4 features per lane) is slower (docs/TUNING.md).
__host__ __device__ constexpr int min_blocks(int p, int lf) { return lf == 4 ? 8 : lf == 8 && p == TF32 ? 6 : 7; }

// What a launch stages before waiting for the previous kernel (common.cuh's preamble): nothing,
// the segment's facts, columns and masks, or those and its values (values an earlier launch has
// read, unchanged since: the launcher's check).
enum Preamble { NO_PREAMBLE = 0, PATTERN = 1, PATTERN_AND_VALUES = 2 };

// Y = A X for A in ME-BCRS of block width K, X [n_cols, N] in precision P's storage type; with
// GAT (a GatValues), A = GAT's attention from gat_* (`values` not read). `preamble`: a Preamble.
// Dynamic shared memory: WARPS / warps_per_segment staged segments (seg_vectors columns each,
// then seg_vectors masks each, then 8 * seg_vectors values each), then, when ways > 1, the
// scratch of sum_ways.
template <int P, int K, typename OutTag, int LF, int GAT = GAT_NONE>
__global__ void __launch_bounds__(32 * WARPS, min_blocks(P, LF))
    spmm_tc(SPMM_PARAMS, int preamble, const typename Operand<P>::Tag::T* __restrict__ x,
            typename OutTag::T* __restrict__ out, const float* __restrict__ gat_el,
            const float4* __restrict__ gat_records, float gat_slope) {
    wait_for_previous_kernel(preamble == NO_PREAMBLE);
    typedef typename Operand<P>::Staged V;
    extern __shared__ __align__(16) int smem[];
    const SpmmArgs a = SPMM_ARGS;
    WarpWork w = place_work<LF>(a);
    if (w.seg >= 0) read_segment(a, w);
    const int per_block = WARPS >> (31 - __clz(a.warps_per_segment));
    int* cols = smem + w.slot * a.seg_vectors;
    u8* masks = reinterpret_cast<u8*>(smem + per_block * a.seg_vectors) + w.slot * a.seg_vectors;
    V* staged_vals = reinterpret_cast<V*>(smem + per_block * a.seg_vectors + per_block * a.seg_vectors / 4);
    V* vals = staged_vals + w.slot * WINDOW * a.seg_vectors;
    if (w.seg >= 0 && preamble == PATTERN) stage_columns(a, w, cols, masks);
    wait_for_previous_kernel(preamble == PATTERN);
    if (w.seg >= 0) {
        const GatAttention gat{gat_el, gat_records, gat_slope};
        stage_values<P, K, GAT>(a, w, cols, masks, vals, gat, preamble == PATTERN);
    }
    wait_for_previous_kernel(preamble == PATTERN_AND_VALUES);
    __syncthreads();
    float acc[LF / 2][4] = {};
    if (w.computes) {
        // this warp's run of the segment: contiguous, starting on a multiple of 16 vectors, so
        // the sum over each run is the same whatever VECTORS is
        const int ways_shift = 31 - __clz(a.ways);
        const int run = (((w.count + a.ways - 1) >> ways_shift) + 15) & ~15;
        const int begin = w.way * run, end = min(begin + run, w.count);
        const u32* words = reinterpret_cast<const u32*>(vals);
        if (a.aligned && a.n % (8 * LF) == 0) {  // the same in every warp
            multiply_run<P, LF, true>(acc, x, cols, words, begin, end, w, a.n, true);
        } else {
            multiply_run<P, LF, false>(acc, x, cols, words, begin, end, w, a.n, a.aligned);
        }
    }
    allow_next_kernel();  // its preamble beside this kernel's stores (not earlier: allow_next_kernel)
    // read again rather than kept in registers through the loop (min_blocks' register bound)
    // or in shared memory, which is slower (docs/TUNING.md)
    WarpWork done = place_work<LF>(a);
    if (done.seg >= 0) read_segment(a, done);
    if (a.ways > 1) {
        sum_ways<LF>(a, done, acc, reinterpret_cast<float*>(staged_vals + per_block * WINDOW * a.seg_vectors));
    }
    if (done.computes && done.way == 0) finish_segment<OutTag, LF>(a, done, acc, out);
}

// out[8w + r, f] = sum over the segments of split window w of their partial sums, in order.
// The exact fp32 SpMM (spmm_fp32.cu) finishes its split windows with it too.
template <typename OutTag>
__global__ void spmm_reduce(const float* __restrict__ workspace, const int* __restrict__ split_window,
                            const int* __restrict__ split_part, const int* __restrict__ split_count,
                            i64 n_split, int n_rows, int n, typename OutTag::T* __restrict__ out) {
    wait_for_previous_kernel();
    const i64 total = n_split * WINDOW * n;
    for (i64 idx = global_thread(); idx < total; idx += grid_stride()) {
        const i64 s = idx / ((i64)WINDOW * n);
        const int r = (int)(idx / n % WINDOW);
        const int f = (int)(idx % n);
        const i64 row = (i64)split_window[s] * WINDOW + r;
        if (row >= n_rows) continue;
        float sum = 0.f;
        const i64 first = split_part[s];
        for (int p = 0; p < split_count[s]; ++p) sum += workspace[((first + p) * WINDOW + r) * n + f];
        out[row * n + f] = from_float(sum, OutTag());
    }
}

}  // namespace fg
