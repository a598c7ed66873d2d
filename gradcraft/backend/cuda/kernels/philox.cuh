// Philox4x64-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), laid out
// exactly as NumPy's `np.random.Philox` stream: Philox(counter=[c0, c1, c2, c3], key=[key0, key1])
// draws word k % 4 of philox_block(c0 + k / 4 + 1, c1, c2, c3, key0, key1) as its k-th 64-bit number
// (NumPy bumps the counter before each block). So element i of a tensor draws its number from
// (counter, key, i) alone: any thread can regenerate it, and the CPU backend, which uses NumPy's
// generator, sees the very same numbers (dropout masks and rand agree bit for bit across devices).
#pragma once
#include "common.cuh"

struct u64x4 { u64 v[4]; };

// One block of the whole 256-bit counter (c0, c1, c2, c3) under the 128-bit key (key0, key1).
__device__ __forceinline__ u64x4 philox4x64_block(u64 c0, u64 c1, u64 c2, u64 c3, u64 key0, u64 key1) {
    const u64 M0 = 0xD2E7470EE14C6C93ull, M1 = 0xCA5A826395121157ull;
    const u64 W0 = 0x9E3779B97F4A7C15ull, W1 = 0xBB67AE8584CAA73Bull;
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

// The stream of NumPy's `Philox(key=seed)` (counter words 1-3 zero): rand, randn, randint.
__device__ __forceinline__ u64x4 philox4x64(u64 counter, u64 key0, u64 key1) {
    return philox4x64_block(counter, 0, 0, 0, key0, key1);
}

// NumPy's `random()`: the top 53 bits as a double in [0, 1).
__device__ __forceinline__ double uniform53(u64 bits) { return (double)(bits >> 11) * (1.0 / 9007199254740992.0); }
