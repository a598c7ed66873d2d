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

// Philox4x32-10: four 32-bit words of the counter (c0, c1, c2, c3) under the key (k0, k1); 32-bit
// multiplies only, cheap enough to draw attention-dropout masks inside the flash kernels.
struct philox_words { u32 w[4]; };
__device__ __forceinline__ philox_words philox4x32(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        const u32 hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const u32 hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    philox_words r;
    r.w[0] = c0; r.w[1] = c1; r.w[2] = c2; r.w[3] = c3;
    return r;
}

// The attention-dropout keep bits of one 8-key group (bit e: key 8 * (group % groups) + e), as
// backend/philox.py `attention_keep` draws them: `group` = (head row * T + query) * ceil(S / 8) + key / 8;
// an element is kept when its 16-bit number is >= `threshold`.
struct AttnDropout {
    u64 seed;
    u32 counter, stream, threshold;
    float scale;  // 1 / (1 - threshold / 65536)
    __device__ __forceinline__ u32 keep8(u64 group) const {
        const philox_words r = philox4x32((u32)group, (u32)(group >> 32), counter, stream, (u32)seed, (u32)(seed >> 32));
        u32 bits = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) bits |= (u32)(((r.w[e >> 1] >> ((e & 1) * 16)) & 0xffffu) >= threshold) << e;
        return bits;
    }
};
__device__ __forceinline__ AttnDropout attn_dropout(const i64* state, u32 stream, u32 threshold, float scale) {
    AttnDropout d;
    d.seed = state ? (u64)state[0] : 0;
    d.counter = state ? (u32)(u64)state[1] : 0;
    d.stream = stream;
    d.threshold = threshold;
    d.scale = scale;
    return d;
}
