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

// Columns a thread keeps weight/bias gradient sums for in registers; wider rows spill to `partial`.
#define NORM_BWD_REG_COLS 8

template <typename T>
__device__ void norm_bwd_body(const T* x, const typename acc<T>::type* w, const T* g, T* dx, double* partial, i64 rows, int F,
                              double eps, int center) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    double* dw = partial + (i64)blockIdx.x * 2 * F;
    double* db = dw + F;
    // Each thread owns the columns threadIdx.x + k * blockDim.x. Summing its rows' weight and bias
    // gradients in registers, instead of a read-modify-write of global memory for every row, is what
    // makes this kernel fast (launched with at most 256 threads, so the registers fit).
    const bool in_registers = F <= NORM_BWD_REG_COLS * (int)blockDim.x;
    double rw[NORM_BWD_REG_COLS], rb[NORM_BWD_REG_COLS];
#pragma unroll
    for (int k = 0; k < NORM_BWD_REG_COLS; k++) { rw[k] = 0.0; rb[k] = 0.0; }
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * F, *gr = g + row * F;
        A mean, rstd;
        row_stats<T, A>(xr, F, (A)eps, center, scratch, mean, rstd);
        // dxhat = g * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        A s1 = 0, s2 = 0;
        if (in_registers) {
#pragma unroll
            for (int k = 0; k < NORM_BWD_REG_COLS; k++) {
                const int j = threadIdx.x + k * blockDim.x;
                if (j < F) {
                    A xhat = ((A)to_float(xr[j]) - mean) * rstd;
                    A gv = to_float(gr[j]);
                    A dxhat = w ? gv * (A)w[j] : gv;
                    s1 += dxhat;
                    s2 += dxhat * xhat;
                    rw[k] += (double)(gv * xhat);
                    rb[k] += (double)gv;
                }
            }
        } else {
            for (int j = threadIdx.x; j < F; j += blockDim.x) {
                A xhat = ((A)to_float(xr[j]) - mean) * rstd;
                A gv = to_float(gr[j]);
                A dxhat = w ? gv * (A)w[j] : gv;
                s1 += dxhat;
                s2 += dxhat * xhat;
                dw[j] += (double)(gv * xhat);  // each thread owns its columns: no race
                if (center) db[j] += (double)gv;
            }
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
    if (in_registers) {
#pragma unroll
        for (int k = 0; k < NORM_BWD_REG_COLS; k++) {
            const int j = threadIdx.x + k * blockDim.x;
            if (j < F) {
                dw[j] += rw[k];
                if (center) db[j] += rb[k];
            }
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
