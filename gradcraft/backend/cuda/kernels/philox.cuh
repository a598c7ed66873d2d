// Philox4x64-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), laid out
// exactly as NumPy's `np.random.Philox(key=seed)` stream: the k-th 64-bit number of the stream is
// word k % 4 of philox(counter = k / 4 + 1, key = (seed, 0)). So element i of a tensor draws its
// number from (seed, i) alone: any thread can regenerate it, and the CPU backend, which uses NumPy's
// generator, sees the very same numbers (dropout masks and rand agree bit for bit across devices).
#pragma once
#include "common.cuh"

struct u64x4 { u64 v[4]; };

__device__ __forceinline__ u64x4 philox4x64(u64 counter, u64 key0, u64 key1) {
    const u64 M0 = 0xD2E7470EE14C6C93ull, M1 = 0xCA5A826395121157ull;
    const u64 W0 = 0x9E3779B97F4A7C15ull, W1 = 0xBB67AE8584CAA73Bull;
    u64 c0 = counter, c1 = 0, c2 = 0, c3 = 0;
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        u64 hi0 = __umul64hi(M0, c0), lo0 = M0 * c0;
        u64 hi1 = __umul64hi(M1, c2), lo1 = M1 * c2;
        u64 n0 = hi1 ^ c1 ^ key0, n2 = hi0 ^ c3 ^ key1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        key0 += W0; key1 += W1;
    }
    u64x4 r;
    r.v[0] = c0; r.v[1] = c1; r.v[2] = c2; r.v[3] = c3;
    return r;
}

// NumPy's `random()`: the top 53 bits as a double in [0, 1).
__device__ __forceinline__ double uniform53(u64 bits) { return (double)(bits >> 11) * (1.0 / 9007199254740992.0); }
