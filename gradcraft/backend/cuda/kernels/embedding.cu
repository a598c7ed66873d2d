// Embedding: the forward gathers rows of the (N, D) table; the backward adds gradient rows into the
// rows they came from.
//
// Backward without atomics: the caller sorts the flat indices (stable), and the block at sorted
// position p, if p starts a run of equal indices, sums that run's gradient rows in order and writes
// the table row once. Deterministic, and the summation order is the CPU backend's (np.add.reduceat
// over the stable sort). Rows no index names stay as the caller zeroed them. Out-of-range indices
// gather zeros and scatter nothing (the CPU backend raises an IndexError).
#include "common.cuh"

template <typename E>  // E: an unsigned type of the element's size (the gather only moves bytes)
__device__ void gather_rows(const E* weight, const i64* idx, E* out, i64 n, int D, i64 N) {
    for (i64 r = blockIdx.x; r < n; r += gridDim.x) {
        i64 id = idx[r];
        bool ok = id >= 0 && id < N;
        for (int c = threadIdx.x; c < D; c += blockDim.x) out[r * D + c] = ok ? weight[id * D + c] : (E)0;
    }
}

extern "C" __global__ void embedding_fwd_1(const unsigned char* w, const i64* idx, unsigned char* out, i64 n, int D,
                                           i64 N) { gather_rows(w, idx, out, n, D, N); }
extern "C" __global__ void embedding_fwd_2(const u16* w, const i64* idx, u16* out, i64 n, int D, i64 N) {
    gather_rows(w, idx, out, n, D, N); }
extern "C" __global__ void embedding_fwd_4(const u32* w, const i64* idx, u32* out, i64 n, int D, i64 N) {
    gather_rows(w, idx, out, n, D, N); }
extern "C" __global__ void embedding_fwd_8(const u64* w, const i64* idx, u64* out, i64 n, int D, i64 N) {
    gather_rows(w, idx, out, n, D, N); }

template <typename T>
__device__ void embedding_bwd_body(const i64* sorted, const i64* order, const T* g, T* out, i64 n, int D, i64 N) {
    typedef typename acc<T>::type A;
    for (i64 p = blockIdx.x; p < n; p += gridDim.x) {
        i64 id = sorted[p];
        if ((p > 0 && sorted[p - 1] == id) || id < 0 || id >= N) continue;  // not the start of a run
        for (int c = threadIdx.x; c < D; c += blockDim.x) {
            A s = 0;
            for (i64 q = p; q < n && sorted[q] == id; ++q) s += (A)to_float(g[order[q] * D + c]);
            out[id * D + c] = store<T>(s);
        }
    }
}

#define EMBEDDING(NAME, T) \
    extern "C" __global__ void embedding_bwd_##NAME(const i64* sorted, const i64* order, const T* g, T* out, i64 n, \
                                                    int D, i64 N) { embedding_bwd_body<T>(sorted, order, g, out, n, D, N); }
FOR_FLOAT_TYPES(EMBEDDING)
