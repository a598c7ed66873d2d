// Reductions: over the last axis of a contiguous (R, C) array (sum, max, min; one block per row,
// float accumulation for half types), and the column sums of float64 partial results that other
// kernels leave (the norms' weight gradients, the grad norm).
#include "common.cuh"

template <typename T, int OP>  // OP: 0 sum, 1 max, 2 min
__device__ void reduce_last_body(const T* x, T* y, int C) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const T* xr = x + row * C;
    A v = OP == 0 ? (A)0 : (OP == 1 ? neg_inf<A>() : -neg_inf<A>());
    bool nan = false;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        A e = to_float(xr[j]);
        nan |= e != e;  // max/min propagate NaN, as NumPy does
        v = OP == 0 ? v + e : (OP == 1 ? fmx(v, e) : fmn(v, e));
    }
    if (OP == 0) v = block_sum(v, scratch);
    else {
        v = OP == 1 ? block_max(v, scratch) : -block_max(-v, scratch);
        nan = block_sum((A)(nan ? 1 : 0), scratch) > (A)0;
        if (nan) v = quiet_nan<A>();
    }
    if (threadIdx.x == 0) y[row] = store<T>(v);
}

// y[j] = sum over r < R of partial[r * stride + j], for j < C.
template <typename T>
__device__ void sum_partials_body(const double* partial, T* y, int R, int C, i64 stride) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < C; j += gridDim.x * blockDim.x) {
        double s = 0;
        for (int r = 0; r < R; ++r) s += partial[r * stride + j];
        y[j] = store<T>((typename acc<T>::type)s);
    }
}

// y[row] = the index of the largest (MIN: smallest) value of x's row, as NumPy's argmax/argmin: the
// first index among equal values, and the first NaN if the row has one. One block per row.
template <typename A, bool MIN>
__device__ __forceinline__ bool arg_better(A v, int i, A best, int best_i) {  // (v, i) wins over (best, best_i)
    const bool nv = v != v, nb = best != best;
    if (nv != nb) return nv;
    if (nv || v == best) return i < best_i;
    return MIN ? v < best : v > best;
}
template <typename T, bool MIN>
__device__ void arg_last_body(const T* x, i64* y, int C) {
    typedef typename acc<T>::type A;
    __shared__ A best_values[32];
    __shared__ int best_indices[32];
    const T* xr = x + (i64)blockIdx.x * C;
    A best = to_float(xr[0]);
    int best_i = 0;
    // Four loads in flight a thread before comparing (one row of a vocabulary is latency-bound
    // otherwise); the winner does not depend on the order (arg_better: NaN, then value, then index).
    const int step = blockDim.x;
    int j = threadIdx.x;
    for (; j + 3 * step < C; j += 4 * step) {
        A v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = to_float(xr[j + u * step]);
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (arg_better<A, MIN>(v[u], j + u * step, best, best_i)) best = v[u], best_i = j + u * step;
    }
    for (; j < C; j += step) {
        const A v = to_float(xr[j]);
        if (arg_better<A, MIN>(v, j, best, best_i)) best = v, best_i = j;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const A v = __shfl_xor_sync(0xffffffffu, best, o);
        const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (arg_better<A, MIN>(v, i, best, best_i)) best = v, best_i = i;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    if (lane == 0) best_values[warp] = best, best_indices[warp] = best_i;
    __syncthreads();
    if (warp == 0) {
        best = best_values[lane < warps ? lane : 0], best_i = best_indices[lane < warps ? lane : 0];
        for (int o = 16; o > 0; o >>= 1) {
            const A v = __shfl_xor_sync(0xffffffffu, best, o);
            const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
            if (arg_better<A, MIN>(v, i, best, best_i)) best = v, best_i = i;
        }
        if (lane == 0) y[blockIdx.x] = best_i;
    }
}

#define REDUCE(NAME, T) \
    extern "C" __global__ void argmax_last_##NAME(const T* x, i64* y, int C) { arg_last_body<T, false>(x, y, C); } \
    extern "C" __global__ void argmin_last_##NAME(const T* x, i64* y, int C) { arg_last_body<T, true>(x, y, C); } \
    extern "C" __global__ void reduce_sum_##NAME(const T* x, T* y, int C) { reduce_last_body<T, 0>(x, y, C); } \
    extern "C" __global__ void reduce_max_##NAME(const T* x, T* y, int C) { reduce_last_body<T, 1>(x, y, C); } \
    extern "C" __global__ void reduce_min_##NAME(const T* x, T* y, int C) { reduce_last_body<T, 2>(x, y, C); } \
    extern "C" __global__ void sum_partials_##NAME(const double* partial, T* y, int R, int C, i64 stride) { \
        sum_partials_body<T>(partial, y, R, C, stride); }
FOR_FLOAT_TYPES(REDUCE)
