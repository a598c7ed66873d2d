// Decoding through fixed KV caches (the serving loop's step, captured once and replayed per token).
//
// Caches are (B, Hkv, L, D), C-contiguous. Row b's newest token sits at position[b] (or position[0]
// when one position serves every row), stored at slot position % L: a plain cache (L = the context)
// stores position p at p, a sliding-window ring (L = the window) at p % L. Once written, the filled
// slots of row b are [0, min(position[b] + 1, L)): attention never needs to know which slot holds
// which position (the keys were rotated before they were stored, and softmax does not care about
// order).

#include "common.cuh"

#define KV_MAX_HEAD_DIM 256  // as MAX_HEAD_DIM in backend/cuda/kv_cache.py, which never launches more

// kv_write: target[b, h, position[b] % L, :] = value[b, h, 0, :] for value (B, Hkv, 1, D).
template <typename T>
__device__ void kv_write_body(const T* value, const i64* position, int per_row, T* target, i64 B, int Hkv, i64 L,
                              int D) {
    const i64 total = B * Hkv * (i64)D;
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) {
        i64 row = k / D;  // b * Hkv + h
        int d = (int)(k - row * D);
        i64 b = row / Hkv;
        i64 p = position[per_row ? b : 0];
        i64 slot = ((p % L) + L) % L;
        target[(row * L + slot) * D + d] = value[k];
    }
}

#define KV_WRITE(NAME, T) \
    extern "C" __global__ void kv_write_##NAME(const T* value, const i64* position, int per_row, T* target, i64 B, \
                                               int Hkv, i64 L, int D) { \
        kv_write_body<T>(value, position, per_row, target, B, Hkv, L, D); }
FOR_FLOAT_TYPES(KV_WRITE)

// kv_attention: out[b, h] = softmax(q[b, h] . K[b, h / G, :n]^T * scale) V[b, h / G, :n] with
// n = min(position[b] + 1, L) and G = H / Hkv (grouped-query heads share their KV head).
// One block per (b, h): each warp takes keys j = warp, warp + warps, ... (its lanes split the head
// dimension, so a key row is read coalesced), the scores go to shared memory (L floats), then the
// block normalises them and every group of D threads sums p_j v_j over its share of the keys.
// q and out are (B, H, D) contiguous; the accumulation is float32 (float64 for float64 tensors).
template <typename T>
__device__ void kv_attention_body(const T* q, const T* k, const T* v, const i64* position, int per_row, T* out,
                                  int H, int Hkv, i64 L, int D, double scale) {
    typedef typename acc<T>::type A;
    extern __shared__ __align__(16) unsigned char shared_raw[];
    A* scores = reinterpret_cast<A*>(shared_raw);  // L values, then blockDim.x partial sums
    A* partial = scores + L;
    __shared__ A qs[KV_MAX_HEAD_DIM];
    __shared__ A scratch[32];
    const int bh = blockIdx.x, b = bh / H, h = bh - b * H, hk = h / (H / Hkv);
    i64 n = position[per_row ? b : 0] + 1;  // positions are >= 0: at least one filled slot
    n = n < L ? n : L;
    const T* qrow = q + (i64)bh * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = (A)to_float(qrow[d]) * (A)scale;
    __syncthreads();
    const i64 base = ((i64)b * Hkv + hk) * L * D;
    const T* kb = k + base;
    const T* vb = v + base;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    A local_max = neg_inf<A>();
    for (i64 j = warp; j < n; j += warps) {
        const T* kr = kb + j * D;
        A s = 0;
        for (int d = lane; d < D; d += 32) s += qs[d] * (A)to_float(kr[d]);
        s = warp_sum(s);  // every lane holds the sum
        if (lane == 0) scores[j] = s;
        local_max = fmx(local_max, s);
    }
    const A m = block_max(local_max, scratch);  // (its barriers also publish the scores)
    A local_sum = 0;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
        A p = fexp(scores[j] - m);
        scores[j] = p;
        local_sum += p;
    }
    const A total = block_sum(local_sum, scratch);
    __syncthreads();
    // groups of D threads: thread (g, d) sums keys g, g + groups, ... for element d
    const int groups = blockDim.x / D, g = threadIdx.x / D, d = threadIdx.x - g * D;
    A acc_value = 0;
    if (g < groups) {
        for (i64 j = g; j < n; j += groups) acc_value += scores[j] * (A)to_float(vb[j * D + d]);
        partial[threadIdx.x] = acc_value;
    }
    __syncthreads();
    if (g == 0) {
        for (int other = 1; other < groups; ++other) acc_value += partial[other * D + d];
        out[(i64)bh * D + d] = store<T>(acc_value / total);
    }
}

#define KV_ATTENTION(NAME, T) \
    extern "C" __global__ void kv_attention_##NAME(const T* q, const T* k, const T* v, const i64* position, \
                                                   int per_row, T* out, int H, int Hkv, i64 L, int D, double scale) { \
        kv_attention_body<T>(q, k, v, position, per_row, out, H, Hkv, L, D, scale); }
FOR_FLOAT_TYPES(KV_ATTENTION)
