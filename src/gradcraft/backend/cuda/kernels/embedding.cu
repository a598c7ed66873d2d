// Embedding: the forward gathers rows of the (N, D) table; the backward adds gradient rows into the
// rows they came from.
//
// Forward: one warp per output row, copying the row in the widest unit W (16, 8, 4, 2 or 1 bytes:
// embedding_fwd_W) that divides the row's bytes and the pointers' alignment; D counts W-byte units.
//
// Backward, deterministic and without atomics. The caller sorts the n flat indices (stable, so equal
// ids keep their order): `order`, with id(p) = idx[order[p]] ascending. Sorted positions are cut into
// chunks of 32; a warp takes one chunk and 32 * VEC columns, adds the chunk's gradient rows run by run
// (a run: equal ids) in order, and writes a run's sum straight to the table when the run lies inside
// the chunk. A run cut by a chunk boundary leaves its chunk's part in `part` (chunks, 2, D) instead:
// slot 0 for the chunk's first run, slot 1 for its last. embedding_bwd_join then lets the chunk where
// such a run starts add its slot and the slot 0 of each following chunk the run covers, and write the
// sum. Every table row is written at most once; the caller zeroes the table first. Long runs (a
// frequent token) are spread over many warps. Out-of-range ids are skipped (backend/cpu/embedding.py raises).
#include "common.cuh"

// ---------------------------------------------------------------- forward

template <typename W>  // W: the copy unit (a plain type of 1, 2, 4, 8 or 16 bytes)
__device__ __forceinline__ void gather_rows(const W* __restrict__ weight, const i64* __restrict__ idx,
                                            W* __restrict__ out, i64 n, int D, i64 N) {
    constexpr int U = 4;  // units in flight per lane
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (i64 r = (i64)blockIdx.x * warps + (threadIdx.x >> 5); r < n; r += (i64)gridDim.x * warps) {
        const i64 id = idx[r];
        const bool ok = id >= 0 && id < N;
        const W* src = weight + id * D;
        W* dst = out + r * D;
        for (int c0 = lane; c0 < D; c0 += 32 * U) {
            W v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = c0 + 32 * u;
                if (c < D) {
                    if (ok) v[u] = src[c];
                    else v[u] = W{};  // (zeros)
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (c0 + 32 * u < D) dst[c0 + 32 * u] = v[u];
        }
    }
}

#define GATHER(BYTES, W) \
    extern "C" __global__ void embedding_fwd_##BYTES(const W* w, const i64* idx, W* out, i64 n, int D, i64 N) { \
        gather_rows<W>(w, idx, out, n, D, N); }
GATHER(1, unsigned char)
GATHER(2, u16)
GATHER(4, u32)
GATHER(8, u64)
GATHER(16, u32x4)

// ---------------------------------------------------------------- backward

#define EMB_CHUNK 32  // sorted positions per chunk (one per lane while reading ids)

// Sorted id at position p.
__device__ __forceinline__ i64 sorted_id(const i64* idx, const i64* order, i64 p) { return idx[order[p]]; }

template <typename T, int VEC>
__device__ __forceinline__ void embedding_bwd_chunk_body(const i64* __restrict__ idx, const i64* __restrict__ order,
                                                         const T* __restrict__ g, T* __restrict__ table,
                                                         typename acc<T>::type* __restrict__ part, i64 n, int D,
                                                         i64 N) {
    typedef typename acc<T>::type A;
    constexpr int U = 8;  // gradient rows in flight
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int nvec = D / VEC, col_blocks = (nvec + 31) / 32;
    const i64 chunks = (n + EMB_CHUNK - 1) / EMB_CHUNK, tasks = chunks * col_blocks;
    for (i64 task = (i64)blockIdx.x * warps + (threadIdx.x >> 5); task < tasks; task += (i64)gridDim.x * warps) {
        const i64 chunk = task / col_blocks;
        const int vi = (int)(task - chunk * col_blocks) * 32 + lane;  // this lane's vector of the row
        const bool col = vi < nvec;
        const i64 a = chunk * EMB_CHUNK;
        const int len = (int)min((i64)EMB_CHUNK, n - a);
        // Lane k holds the chunk's k-th sorted position: its id and its row of g.
        i64 my_id = 0, my_row = 0;
        if (lane < len) {
            my_row = order[a + lane];
            my_id = idx[my_row];
        }
        const bool has_prev = a > 0, has_next = a + len < n;
        const i64 prev_id = has_prev ? sorted_id(idx, order, a - 1) : 0;
        const i64 next_id = has_next ? sorted_id(idx, order, a + len) : 0;
        A sum[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum[e] = 0;
        int seg = 0;  // where the current run began in this chunk
        for (int k0 = 0; k0 < len; k0 += U) {  // (len is uniform over the warp: the shuffles are too)
            Frag<T, VEC> f[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const i64 r = __shfl_sync(0xffffffffu, my_row, (k0 + u) & 31);
                if (k0 + u < len && col) f[u].load(g + r * D + (i64)vi * VEC);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = k0 + u;
                const i64 id = __shfl_sync(0xffffffffu, my_id, k & 31);
                const i64 id_after = __shfl_sync(0xffffffffu, my_id, (k + 1) & 31);
                if (k < len) {
                    if (col) {
                        A t[VEC];
                        f[u].get(t);
#pragma unroll
                        for (int e = 0; e < VEC; ++e) sum[e] += t[e];
                    }
                    if (k == len - 1 || id_after != id) {  // the run [seg, k] ends here
                        const bool started_before = seg == 0 && has_prev && prev_id == id;
                        const bool goes_on = k == len - 1 && has_next && next_id == id;
                        if (col) {
                            if (!started_before && !goes_on) {
                                if (id >= 0 && id < N) store_vals<VEC>(table + id * D + (i64)vi * VEC, sum);
                            } else {
                                A* slot = part + (chunk * 2 + (seg == 0 ? 0 : 1)) * D + (i64)vi * VEC;
#pragma unroll
                                for (int e = 0; e < VEC; ++e) slot[e] = sum[e];
                            }
                        }
#pragma unroll
                        for (int e = 0; e < VEC; ++e) sum[e] = 0;
                        seg = k + 1;
                    }
                }
            }
        }
    }
}

// For each chunk whose last run starts in it and goes on into the next chunk: add that run's parts.
template <typename T, int VEC>
__device__ __forceinline__ void embedding_bwd_join_body(const i64* __restrict__ idx, const i64* __restrict__ order,
                                                        T* __restrict__ table,
                                                        const typename acc<T>::type* __restrict__ part, i64 n, int D,
                                                        i64 N) {
    typedef typename acc<T>::type A;
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int nvec = D / VEC, col_blocks = (nvec + 31) / 32;
    const i64 chunks = (n + EMB_CHUNK - 1) / EMB_CHUNK, tasks = chunks * col_blocks;
    for (i64 task = (i64)blockIdx.x * warps + (threadIdx.x >> 5); task < tasks; task += (i64)gridDim.x * warps) {
        const i64 chunk = task / col_blocks;
        const int vi = (int)(task - chunk * col_blocks) * 32 + lane;
        const i64 a = chunk * EMB_CHUNK, b = a + EMB_CHUNK;  // (a run that goes on: the chunk is full)
        if (b >= n) continue;
        const i64 id = sorted_id(idx, order, b - 1);
        if (sorted_id(idx, order, b) != id || id < 0 || id >= N) continue;
        const i64 first_id = sorted_id(idx, order, a);
        const bool one_run = first_id == id;  // the chunk holds only this run
        if (one_run && a > 0 && sorted_id(idx, order, a - 1) == id) continue;  // it started earlier
        // The run covers the following chunks whose first id is `id` (ids ascend): count them, 32 at a time.
        i64 more = 0;
        for (i64 base = chunk + 1;; base += 32) {
            const i64 c = base + lane;
            const bool in = c * EMB_CHUNK < n && sorted_id(idx, order, c * EMB_CHUNK) == id;
            const unsigned out_of_run = __ballot_sync(0xffffffffu, !in);
            if (out_of_run == 0) { more += 32; continue; }
            more += __ffs(out_of_run) - 1;
            break;
        }
        if (vi >= nvec) continue;
        A sum[VEC];
        const A* own = part + (chunk * 2 + (one_run ? 0 : 1)) * D + (i64)vi * VEC;
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum[e] = own[e];
#pragma unroll 4
        for (i64 j = 1; j <= more; ++j) {
            const A* next = part + ((chunk + j) * 2) * D + (i64)vi * VEC;
#pragma unroll
            for (int e = 0; e < VEC; ++e) sum[e] += next[e];
        }
        store_vals<VEC>(table + id * D + (i64)vi * VEC, sum);
    }
}

#define EMBEDDING_KERNELS(NAME, T, V, VEC) \
    extern "C" __global__ void embedding_bwd_chunk_##V##_##NAME(const i64* idx, const i64* order, const T* g, \
                                                               T* table, acc<T>::type* part, i64 n, int D, i64 N) { \
        embedding_bwd_chunk_body<T, VEC>(idx, order, g, table, part, n, D, N); } \
    extern "C" __global__ void embedding_bwd_join_##V##_##NAME(const i64* idx, const i64* order, T* table, \
                                                              const acc<T>::type* part, i64 n, int D, i64 N) { \
        embedding_bwd_join_body<T, VEC>(idx, order, table, part, n, D, N); }
#define EMBEDDING(NAME, T) EMBEDDING_KERNELS(NAME, T, v, vec_width<T>::value) EMBEDDING_KERNELS(NAME, T, s, 1)
FOR_FLOAT_TYPES(EMBEDDING)
