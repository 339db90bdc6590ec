// Neighbour sampling on the GPU (flashgnn/sampling.py). Destination i, node dst[i], has its
// in-edges at CSR positions [start, start + degree); it keeps `keep` of them (kept_end[i] minus
// the previous entry: min(degree, fanout)), a uniform random subset without replacement by
// Floyd's algorithm (for j = degree - keep .. degree - 1: draw t in [0, j], take t unless it is
// taken already, else j), written from out position kept_end[i - 1] on: each kept edge's CSR
// position and its destination's index i. A thread per destination; keep <= MAX_FANOUT, so the
// taken offsets stay in a local array. Random numbers: splitmix64 chains seeded from (seed, i);
// the seed is read on the device (torch draws it), so nothing waits for the host.
#include "common.cuh"

namespace fg {

constexpr int MAX_FANOUT = 64;  // flashgnn/_cuda/sample_neighbors.py: MAX_FANOUT

__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__global__ void sample_in_edges(const i64* __restrict__ indptr, const i64* __restrict__ dst,
                                const i64* __restrict__ kept_end, i64 n_dst, const i64* __restrict__ seed,
                                i64* __restrict__ row, i64* __restrict__ pos) {
    wait_for_previous_kernel();
    const u64 base_seed = (u64)*seed;
    for (i64 i = global_thread(); i < n_dst; i += grid_stride()) {
        const i64 start = indptr[dst[i]], degree = indptr[dst[i] + 1] - start;
        const i64 begin = i ? kept_end[i - 1] : 0;
        const int keep = (int)(kept_end[i] - begin);
        if (keep == degree) {
            for (int e = 0; e < keep; ++e) {
                row[begin + e] = i;
                pos[begin + e] = start + e;
            }
            continue;
        }
        i64 taken[MAX_FANOUT];
        u64 state = splitmix64(base_seed ^ splitmix64((u64)i));
        for (int c = 0; c < keep; ++c) {
            const i64 j = degree - keep + c;
            state = splitmix64(state);
            i64 t = (i64)(((state >> 32) * (u64)(j + 1)) >> 32);  // uniform in [0, j] (degree < 2^32)
            for (int q = 0; q < c; ++q) {
                if (taken[q] == t) {
                    t = j;
                    break;
                }
            }
            taken[c] = t;
            row[begin + c] = i;
            pos[begin + c] = start + t;
        }
    }
}

}  // namespace fg
