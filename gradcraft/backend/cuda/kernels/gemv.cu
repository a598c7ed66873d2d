// Matrix-vector products for decoding: y (R, N) = x (R, K) @ W^T for a weight W (N, K) stored row by
// row (a Linear layer's layout), with few rows R (one to GEMV_MAX_ROWS tokens of a decoding step).
//
// Why not cuBLAS: at R = 1 the product is a read of W and nothing else, and cuBLAS's GEMM kernels
// take 4-6 us for a 768 x 2304 bf16 weight (3.5 MB: under 1 us at the H200's bandwidth). Here one
// warp computes one output column for every row: its lanes read W's row n in 16-byte words,
// coalesced, several words in flight per lane, and x (a few KB, served from L1) beside them; the
// R dot products are summed across the warp. Each row's sum runs in the same order whatever R is,
// so a token's logits do not depend on which other tokens share its step.
#include "common.cuh"

#define GEMV_MAX_ROWS 8  // as MAX_ROWS in backend/cuda/gemv.py
#ifndef GEMV_UNROLL
#define GEMV_UNROLL 4  // 16-byte words of each W row a lane has in flight
#endif

// VEC values per access: 16 / sizeof(T) where K, ldx and the pointers allow it, else 1. O: output
// columns (rows of W) per warp, 1 or 2 (backend/cuda/gemv.py picks by shape).
template <typename T, int VEC, int O>
__device__ void gemv_body(const T* x, i64 ldx, const T* w, T* y, int R, int N, int K) {
    typedef typename acc<T>::type A;
    constexpr int U = GEMV_UNROLL;
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * O;
    if (n0 >= N) return;  // (a whole warp leaves together: no shuffle below misses a lane)
    A sums[O][GEMV_MAX_ROWS];
#pragma unroll
    for (int o = 0; o < O; ++o)
#pragma unroll
        for (int r = 0; r < GEMV_MAX_ROWS; ++r) sums[o][r] = 0;
    const int words = K / VEC;
    for (int c0 = lane; c0 < words; c0 += 32 * U) {
        A wv[O][U][VEC];
#pragma unroll
        for (int o = 0; o < O; ++o) {  // every load of W first, then the arithmetic
            const T* wr = w + (i64)(n0 + o < N ? n0 + o : n0) * K;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = c0 + 32 * u;
                if (c < words) load_vals<VEC>(wr + (i64)c * VEC, wv[o][u]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = c0 + 32 * u;
            if (c >= words) break;
#pragma unroll
            for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
                if (r >= R) break;
                A xv[VEC];
                load_vals<VEC>(x + r * ldx + (i64)c * VEC, xv);
#pragma unroll
                for (int o = 0; o < O; ++o)
#pragma unroll
                    for (int e = 0; e < VEC; ++e) sums[o][r] += wv[o][u][e] * xv[e];
            }
        }
    }
#pragma unroll
    for (int o = 0; o < O; ++o) {
#pragma unroll
        for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
            if (r >= R) break;
            const A s = warp_sum(sums[o][r]);
            if (lane == 0 && n0 + o < N) y[(i64)r * N + n0 + o] = store<T>(s);
        }
    }
}

#define GEMV_KERNEL(ACCESS, O, NAME, T, VEC) \
    extern "C" __global__ void gemv_##ACCESS##O##_##NAME(const T* x, i64 ldx, const T* w, T* y, int R, int N, \
                                                        int K) { \
        gemv_body<T, VEC, O>(x, ldx, w, y, R, N, K); }
#define GEMV(NAME, T) \
    GEMV_KERNEL(v, 1, NAME, T, 16 / (int)sizeof(T)) GEMV_KERNEL(v, 2, NAME, T, 16 / (int)sizeof(T)) \
    GEMV_KERNEL(s, 1, NAME, T, 1) GEMV_KERNEL(s, 2, NAME, T, 1)
GEMV(f32, float)
GEMV(bf16, bf16)
GEMV(f16, f16)
