// LayerNorm and RMSNorm over rows of F contiguous features, forward and backward.
//
// Forward: one block per row. Weight and bias arrive in the accumulator type (float32, or float64
// for float64 tensors; NULL = absent).
// Backward: a grid of G blocks walks the rows (block b takes rows b, b + G, ...), writes dx, and
// adds each row's weight (and bias) gradient into its own slice of `partial` (G, 2, F) float64,
// zeroed by the caller; reduce.cu's sum_partials then adds the G slices: deterministic, no atomics.
#include "common.cuh"

template <typename T, typename A>
__device__ __forceinline__ void row_stats(const T* xr, int F, A eps, bool center, A* scratch, A& mean, A& rstd) {
    mean = 0;
    if (center) {
        A s = 0;
        for (int j = threadIdx.x; j < F; j += blockDim.x) s += (A)to_float(xr[j]);
        mean = block_sum(s, scratch) / (A)F;
    }
    A q = 0;
    for (int j = threadIdx.x; j < F; j += blockDim.x) {
        A d = (A)to_float(xr[j]) - mean;
        q += d * d;
    }
    rstd = (A)1 / fsqrt(block_sum(q, scratch) / (A)F + eps);
}

template <typename T>
__device__ void norm_fwd_body(const T* x, const typename acc<T>::type* w, const typename acc<T>::type* b, T* y, int F, double eps, int center) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const T* xr = x + row * F;
    A mean, rstd;
    row_stats<T, A>(xr, F, (A)eps, center, scratch, mean, rstd);
    for (int j = threadIdx.x; j < F; j += blockDim.x) {
        A v = ((A)to_float(xr[j]) - mean) * rstd;
        if (w) v = v * w[j];
        if (b) v = v + b[j];
        y[row * F + j] = store<T>(v);
    }
}

template <typename T>
__device__ void norm_bwd_body(const T* x, const typename acc<T>::type* w, const T* g, T* dx, double* partial, i64 rows, int F,
                              double eps, int center) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    double* dw = partial + (i64)blockIdx.x * 2 * F;
    double* db = dw + F;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * F, *gr = g + row * F;
        A mean, rstd;
        row_stats<T, A>(xr, F, (A)eps, center, scratch, mean, rstd);
        // dxhat = g * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        A s1 = 0, s2 = 0;
        for (int j = threadIdx.x; j < F; j += blockDim.x) {
            A xhat = ((A)to_float(xr[j]) - mean) * rstd;
            A gv = to_float(gr[j]);
            A dxhat = w ? gv * (A)w[j] : gv;
            s1 += dxhat;
            s2 += dxhat * xhat;
            dw[j] += (double)(gv * xhat);  // each thread owns its columns: no race
            if (center) db[j] += (double)gv;
        }
        s1 = center ? block_sum(s1, scratch) / (A)F : (A)0;
        s2 = block_sum(s2, scratch) / (A)F;
        for (int j = threadIdx.x; j < F; j += blockDim.x) {
            A xhat = ((A)to_float(xr[j]) - mean) * rstd;
            A gv = to_float(gr[j]);
            A dxhat = w ? gv * (A)w[j] : gv;
            dx[row * F + j] = store<T>(rstd * (dxhat - s1 - xhat * s2));
        }
    }
}

// center = 1: LayerNorm; center = 0: RMSNorm (no mean, no bias).
#define NORMS(NAME, T) \
    extern "C" __global__ void norm_fwd_##NAME(const T* x, const acc<T>::type* w, const acc<T>::type* b, T* y, int F, \
                                               double eps, int center) { \
        norm_fwd_body<T>(x, w, b, y, F, eps, center); } \
    extern "C" __global__ void norm_bwd_##NAME(const T* x, const acc<T>::type* w, const T* g, T* dx, double* partial, \
                                               i64 rows, int F, double eps, int center) { \
        norm_bwd_body<T>(x, w, g, dx, partial, rows, F, eps, center); }
FOR_FLOAT_TYPES(NORMS)
