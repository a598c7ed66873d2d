// Row softmax and log-softmax, forward and backward; one block per row of C contiguous values.
//
// The forward also serves attention: the row's scores are x * scale (+ mask), and with `causal`
// or `window` the row is query i = row % T + (S - T) of a (.., T, S) score matrix (queries are
// the last T positions, the KV-cache layout of cpu.py's _attention_probs). Keys j > i (causal) or
// j <= i - window are excluded: probability 0. A row with nothing left is NaN, as in cpu.py.
#include "common.cuh"

template <typename T>
__device__ void softmax_fwd_body(const T* x, T* y, int C, double scale_, const float* mask,
                                 int causal, int window, int T_, int S_, int log_out) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const T* xr = x + row * C;
    T* yr = y + row * C;
    const float* mr = mask ? mask + row * C : 0;
    const A scale = (A)scale_;
    int limit = C, first = 0;  // keys first..limit-1 are allowed
    if (causal || window) {
        int i = (int)(row % T_) + (S_ - T_);
        if (causal) limit = min(C, i + 1);
        if (window) first = max(0, i - window + 1);
    }
    // One pass: each thread keeps a running max and a sum rescaled to it (online softmax).
    A m = neg_inf<A>(), s = 0;
    for (int j = first + threadIdx.x; j < limit; j += blockDim.x) {
        A v = (A)to_float(xr[j]) * scale + (mr ? (A)mr[j] : (A)0);
        if (v > m) { s = (m == neg_inf<A>() ? (A)0 : s * fexp(m - v)) + 1; m = v; }
        else if (v != neg_inf<A>()) s += fexp(v - m);
    }
    A row_max = block_max(m, scratch);
    s = (m == neg_inf<A>()) ? (A)0 : s * fexp(m - row_max);
    A total = block_sum(s, scratch);
    bool empty = row_max == neg_inf<A>();
    A log_total = flog(total);
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        A out;
        if (empty) out = quiet_nan<A>();
        else if (j < first || j >= limit) out = log_out ? neg_inf<A>() : (A)0;
        else {
            A v = (A)to_float(xr[j]) * scale + (mr ? (A)mr[j] : (A)0);
            out = log_out ? v - row_max - log_total : fexp(v - row_max) / total;
        }
        yr[j] = store<T>(out);
    }
}

// dx = scale * y * (g - sum(g * y))
template <typename T>
__device__ void softmax_bwd_body(const T* y, const T* g, T* dx, int C, double scale_) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const T *yr = y + row * C, *gr = g + row * C;
    A dot = 0;
    for (int j = threadIdx.x; j < C; j += blockDim.x) dot += (A)to_float(yr[j]) * (A)to_float(gr[j]);
    dot = block_sum(dot, scratch);
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        A yv = to_float(yr[j]);
        dx[row * C + j] = store<T>(yv * ((A)to_float(gr[j]) - dot) * (A)scale_);
    }
}

// dx = g - exp(y) * sum(g), for y = log_softmax(x)
template <typename T>
__device__ void log_softmax_bwd_body(const T* y, const T* g, T* dx, int C) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const T *yr = y + row * C, *gr = g + row * C;
    A total = 0;
    for (int j = threadIdx.x; j < C; j += blockDim.x) total += (A)to_float(gr[j]);
    total = block_sum(total, scratch);
    for (int j = threadIdx.x; j < C; j += blockDim.x)
        dx[row * C + j] = store<T>((A)to_float(gr[j]) - fexp((A)to_float(yr[j])) * total);
}

#define SOFTMAX(NAME, T) \
    extern "C" __global__ void softmax_fwd_##NAME(const T* x, T* y, int C, double scale, const float* mask, \
                                                  int causal, int window, int T_, int S_, int log_out) { \
        softmax_fwd_body<T>(x, y, C, scale, mask, causal, window, T_, S_, log_out); } \
    extern "C" __global__ void softmax_bwd_##NAME(const T* y, const T* g, T* dx, int C, double scale) { \
        softmax_bwd_body<T>(y, g, dx, C, scale); } \
    extern "C" __global__ void log_softmax_bwd_##NAME(const T* y, const T* g, T* dx, int C) { \
        log_softmax_bwd_body<T>(y, g, dx, C); }
FOR_FLOAT_TYPES(SOFTMAX)
