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

// kv_attention_split: the same attention, faster, for float32/bf16/fp16 caches whose head dimension D
// is a multiple of VEC = 16 / sizeof(T) with D / VEC a power of two up to 32 (16-byte aligned rows).
// Why: one block per (b, h) leaves most of the GPU idle when decoding one sequence (12 heads: 12 of
// 132 SMs), and reading a key with one warp per key and 2-byte loads is a chain of latencies.
// Here each (b, h) splits its slots into `splits` chunks, one block each (grid (B H, splits)). A key
// row is read by a group of D / VEC lanes, 16 bytes each, and its value row with it; a group takes
// KV_ROUNDS keys a round (all their loads in flight at once) and keeps FlashAttention's running
// max m, sum l of exp(s - m) and sum of exp(s - m) v, so no score is stored. The block then merges
// its groups. Only chunks that hold a filled slot take part (the "active" ones). With one it writes
// the output; with more each leaves (m, l, acc) in `partial`
// (float32, (B H, splits, D + 2)), and the last of the (b, h)'s blocks to finish merges every chunk's
// partial result into the output (kv_attention_merge_partials) in the same kernel, so a decoding
// step launches one kernel per layer where a second, merging kernel used to follow.
// How a block knows it is the last (CUDA's threadFenceReduction sample): it writes its partial,
// fences (the writes are visible device-wide before the count says so), and one thread adds 1 to
// counters[b H + h]; the block that gets active - 1 back is the last, reads the partials from L2
// (__ldcg: its own L1 may hold stale lines) and sets the counter back to 0. So every launch leaves
// the counters at 0 for the next one, and a replayed CUDA graph needs no reset of its own. The
// counters belong to the launcher (launch.py's block_counters: one buffer per device, zeroed once,
// shared with the split argmax of kernels/reduce.cu); launches that
// share them must not run at the same time (they do not: a decoding step's layers run one after
// another on one stream).
#define KV_ROUNDS 4

// out[b, h] from the splits' partial results: sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s with
// M = max_s m_s, summed in split order. The first chunk always holds a filled slot, so M is finite.
template <typename T>
__device__ void kv_attention_merge_partials(const float* part, T* out_row, int splits, int D) {
    float M = neg_inf<float>();
    bool nan = false;
    for (int s = 0; s < splits; ++s) {
        const float m = __ldcg(part + s * (D + 2));
        M = fmaxf(M, m), nan |= m != m;  // (a chunk that met a NaN score says so with m = NaN)
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float num = 0, den = 0;
        for (int s = 0; s < splits; ++s) {
            const float* p = part + s * (D + 2);
            const float m = __ldcg(p);
            const float w = m == neg_inf<float>() ? 0.0f : __expf(m - M);  // an empty chunk: m = -inf
            num += w * __ldcg(p + 2 + d);
            den += w * __ldcg(p + 1);
        }
        out_row[d] = store<T>(nan ? quiet_nan<float>() : num / den);
    }
}

// This step's token, for kv_append_attention (NEW = true in the body below): its query, key and value
// rows (row b's at b * stride + head * D), rotated first where cos/sin are given ((1 or B, D/2) in
// float32, rotate-half as rope.cu), all rounded to T as the separate rope kernel and cache write
// would leave them. The block keeps them as floats in shared memory: the query for its head, the key
// and value for the slot position % L, which every block covering that slot reads from there and not
// from the cache, so that the one block that writes them into the cache races with no reader.
template <typename T>
struct NewToken {
    const T *q, *k, *v;
    i64 q_stride, k_stride, v_stride;
    const float *cos, *sin;  // null: no rotation
    int rope_per_row;
};

template <typename T>
__device__ void new_token_rows(const NewToken<T>& t, int b, int h, int hk, int D, float* q_s, float* k_s,
                               float* v_s) {
    const T* qr = t.q + b * t.q_stride + (i64)h * D;
    const T* kr = t.k + b * t.k_stride + (i64)hk * D;
    const T* vr = t.v + b * t.v_stride + (i64)hk * D;
    const int half = D / 2;
    for (int d = threadIdx.x; d < D; d += blockDim.x) v_s[d] = to_float(vr[d]);
    if (t.cos == nullptr) {
        for (int d = threadIdx.x; d < D; d += blockDim.x) q_s[d] = to_float(qr[d]), k_s[d] = to_float(kr[d]);
        return;
    }
    const i64 r = t.rope_per_row ? b : 0;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float c = t.cos[r * half + i], s = t.sin[r * half + i];
        float x1 = to_float(qr[i]), x2 = to_float(qr[half + i]);
        q_s[i] = to_float(store<T>(x1 * c - x2 * s)), q_s[half + i] = to_float(store<T>(x2 * c + x1 * s));
        x1 = to_float(kr[i]), x2 = to_float(kr[half + i]);
        k_s[i] = to_float(store<T>(x1 * c - x2 * s)), k_s[half + i] = to_float(store<T>(x2 * c + x1 * s));
    }
}

template <typename T, bool NEW>
__device__ void kv_attention_split_body(const T* q, const T* k, const T* v, const i64* position, int per_row,
                                        T* out, float* partial, int* counters, int H, int Hkv, i64 L, int D,
                                        float scale, int chunk, NewToken<T> fresh) {
    constexpr int VEC = 16 / (int)sizeof(T);
    extern __shared__ __align__(16) unsigned char shared_raw[];
    float* group_acc = reinterpret_cast<float*>(shared_raw);  // (groups, D), then (groups) m and l
    const int lanes = D / VEC, groups = blockDim.x / lanes;
    float* group_m = group_acc + groups * D;
    float* group_l = group_m + groups;
    const int bh = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    const int b = bh / H, h = bh - b * H, hk = h / (H / Hkv);
    const i64 pos = position[per_row ? b : 0];
    i64 n = pos + 1;
    n = n < L ? n : L;
    // Only the chunks that hold a filled slot take part (a short sequence in a long cache: often one,
    // which then writes the output itself, with no partials, counters or merge); the others leave.
    // Every block of (b, h) computes the same count. (No filled slot at all: block 0 writes NaN.)
    const int active = n > chunk ? (int)((n + chunk - 1) / chunk) : 1;
    if (split >= active) return;
    const i64 start = (i64)split * chunk;
    i64 end = start + chunk;
    end = end < n ? end : n;
    const int group = threadIdx.x / lanes, sub = threadIdx.x - group * lanes;
    const i64 base = ((i64)b * Hkv + hk) * L * D;
    const T* kb = k + base + sub * VEC;
    const T* vb = v + base + sub * VEC;
    float qv[VEC];
    i64 slot = -1;  // (NEW) the slot of this step's key and value, read from new_k / new_v
    __shared__ float new_q[KV_MAX_HEAD_DIM], new_k[KV_MAX_HEAD_DIM], new_v[KV_MAX_HEAD_DIM];
    if constexpr (NEW) {
        new_token_rows<T>(fresh, b, h, hk, D, new_q, new_k, new_v);
        __syncthreads();
        slot = pos >= 0 ? pos % L : -1;
        // The first query head of the KV head, in the chunk holding the slot, writes the key and value.
        if (slot >= start && slot < start + chunk && h % (H / Hkv) == 0) {
            T* kw = const_cast<T*>(k) + base + slot * D;
            T* vw = const_cast<T*>(v) + base + slot * D;
            for (int d = threadIdx.x; d < D; d += blockDim.x) kw[d] = store<T>(new_k[d]), vw[d] = store<T>(new_v[d]);
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) qv[e] = new_q[sub * VEC + e];
    } else {
        load_vals<VEC>(q + (i64)bh * D + sub * VEC, qv);
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) qv[e] *= scale;
    float m = neg_inf<float>(), l = 0, acc_v[VEC];
    bool nan_score = false;  // a NaN score makes the output NaN, as softmax's (fmaxf alone would skip it)
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc_v[e] = 0;
    // The loop runs the same rounds in every lane (its bound is the block's), so that the shuffles
    // below always have the whole warp; a group past `end` takes part with no key.
    for (i64 round = start; round < end; round += (i64)KV_ROUNDS * groups) {
        float kv[KV_ROUNDS][VEC], vv[KV_ROUNDS][VEC], s[KV_ROUNDS];
#pragma unroll
        for (int u = 0; u < KV_ROUNDS; ++u) {
            const i64 j = round + (i64)u * groups + group;
            if (NEW && j == slot) {
#pragma unroll
                for (int e = 0; e < VEC; ++e) kv[u][e] = new_k[sub * VEC + e], vv[u][e] = new_v[sub * VEC + e];
            } else if (j < end) {
                load_vals<VEC>(kb + j * D, kv[u]);
                load_vals<VEC>(vb + j * D, vv[u]);
            }
        }
        float round_max = m;
#pragma unroll
        for (int u = 0; u < KV_ROUNDS; ++u) {
            float dot = 0;
#pragma unroll
            for (int e = 0; e < VEC; ++e) dot += qv[e] * kv[u][e];
            for (int o = lanes >> 1; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
            const bool valid = round + (i64)u * groups + group < end;
            nan_score |= valid && dot != dot;
            s[u] = valid ? dot : neg_inf<float>();
            round_max = fmaxf(round_max, s[u]);
        }
        if (round_max == neg_inf<float>()) continue;  // no key for this group yet
        const float correction = __expf(m - round_max);  // (0 on the group's first keys: m = -inf)
        l *= correction;
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc_v[e] *= correction;
#pragma unroll
        for (int u = 0; u < KV_ROUNDS; ++u) {
            if (s[u] == neg_inf<float>()) continue;
            const float p = __expf(s[u] - round_max);
            l += p;
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc_v[e] += p * vv[u][e];
        }
        m = round_max;
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) group_acc[group * D + sub * VEC + e] = acc_v[e];
    if (sub == 0) group_m[group] = nan_score ? quiet_nan<float>() : m, group_l[group] = l;
    __syncthreads();
    // A group with no key has m = -inf and weighs nothing; a +inf score gives inf - inf = NaN, as softmax.
    float M = neg_inf<float>();
    bool nan = false;
    for (int g = 0; g < groups; ++g) M = fmaxf(M, group_m[g]), nan |= group_m[g] != group_m[g];
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float num = 0, den = 0;
        for (int g = 0; g < groups; ++g) {
            const float w = group_m[g] == neg_inf<float>() ? 0.0f : __expf(group_m[g] - M);
            num += w * group_acc[g * D + d];
            den += w * group_l[g];
        }
        if (nan) num = quiet_nan<float>();  // (the chunk's m below is then NaN too)
        if (active == 1) {
            out[(i64)bh * D + d] = store<T>(num / den);
        } else {
            float* part = partial + ((i64)bh * splits + split) * (D + 2);
            part[2 + d] = num;
            if (d == 0) part[0] = nan ? quiet_nan<float>() : M, part[1] = den;
        }
    }
    if (active == 1) return;
    // The last block of this (b, h) to get here merges every chunk (see above).
    __shared__ bool last;
    __threadfence();  // this thread's partial writes, visible device-wide before the count below
    __syncthreads();  // every thread's writes fenced
    if (threadIdx.x == 0) {
        last = atomicAdd(counters + bh, 1) == active - 1;
        if (last) counters[bh] = 0;  // every other block has counted: ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // (acquire: the other blocks' partials are read after their counts)
    kv_attention_merge_partials<T>(partial + (i64)bh * splits * (D + 2), out + (i64)bh * D, active, D);
}

#define KV_ATTENTION_SPLIT(NAME, T) \
    extern "C" __global__ void kv_attention_split_##NAME(const T* q, const T* k, const T* v, const i64* position, \
                                                         int per_row, T* out, float* partial, int* counters, int H, \
                                                         int Hkv, i64 L, int D, float scale, int chunk) { \
        kv_attention_split_body<T, false>(q, k, v, position, per_row, out, partial, counters, H, Hkv, L, D, scale, \
                                          chunk, NewToken<T>{}); } \
    extern "C" __global__ void kv_append_attention_##NAME( \
        const T* q, T* k, T* v, const i64* position, int per_row, T* out, float* partial, int* counters, int H, \
        int Hkv, i64 L, int D, float scale, int chunk, const T* new_k, const T* new_v, i64 q_stride, \
        i64 k_stride, i64 v_stride, const float* cos_, const float* sin_, int rope_per_row) { \
        kv_attention_split_body<T, true>(q, k, v, position, per_row, out, partial, counters, H, Hkv, L, D, scale, \
                                         chunk, NewToken<T>{q, new_k, new_v, q_stride, k_stride, v_stride, cos_, \
                                                            sin_, rope_per_row}); }
KV_ATTENTION_SPLIT(f32, float)
KV_ATTENTION_SPLIT(bf16, bf16)
KV_ATTENTION_SPLIT(f16, f16)
