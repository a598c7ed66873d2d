// Products with few rows, y (R, N) = x (R, K) @ w (N, K)^T for R <= 8: a decoding step's layers
// (one row per sequence) multiply a handful of rows by each weight matrix. There cuBLAS's tiled GEMMs
// (made for many rows) spend most of their few microseconds outside the arithmetic; here one warp
// computes one output column: it reads that row of w once, 16 bytes per lane per access, multiplies
// it with every row of x (small enough to stay in L1), and sums across its lanes. Accumulation in
// float32; K a multiple of 16 / sizeof(T) and 16-byte aligned rows (the launcher checks).

#include "common.cuh"

#define SKINNY_MAX_ROWS 8

template <typename T>
__device__ void skinny_body(const T* x, const T* w, T* y, int R, int N, int K) {
    constexpr int V = vec_width<T>::value;
    const int lane = threadIdx.x & 31;
    const i64 n = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    if (n >= N) return;  // (a whole warp leaves together)
    const T* wr = w + n * K;
    float acc[SKINNY_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < SKINNY_MAX_ROWS; ++r) acc[r] = 0.0f;
    for (int k = lane * V; k < K; k += 32 * V) {
        float wf[V], xf[V];
        unpack16<T, float>(*reinterpret_cast<const u32x4*>(wr + k), wf);
#pragma unroll
        for (int r = 0; r < SKINNY_MAX_ROWS; ++r) {
            if (r < R) {
                unpack16<T, float>(*reinterpret_cast<const u32x4*>(x + (i64)r * K + k), xf);
#pragma unroll
                for (int e = 0; e < V; ++e) acc[r] = fmaf(xf[e], wf[e], acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < SKINNY_MAX_ROWS; ++r) {
        if (r < R) {
            const float s = warp_sum(acc[r]);
            if (lane == 0) y[(i64)r * N + n] = store<T>(s);
        }
    }
}

#define SKINNY(NAME, T) \
    extern "C" __global__ void skinny_matmul_##NAME(const T* x, const T* w, T* y, int R, int N, int K) { \
        skinny_body<T>(x, w, y, R, N, K); }
SKINNY(f32, float)
SKINNY(bf16, bf16)
SKINNY(f16, f16)
