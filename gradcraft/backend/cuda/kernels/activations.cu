// GELU (erf and tanh forms), SiLU and SwiGLU, forward and backward, over contiguous arrays.
// Formulas are cpu.py's _gelu, _gelu_backward, _silu, _silu_backward, _swiglu, _swiglu_backward.
#include "common.cuh"

template <typename A> __device__ __forceinline__ A gelu_value(A x, int tanh_form) {
    if (tanh_form) {
        const A k = (A)0.7978845608028654;  // sqrt(2 / pi)
        return (A)0.5 * x * ((A)1 + ftanh(k * (x + (A)0.044715 * x * x * x)));
    }
    return (A)0.5 * x * ((A)1 + ferf(x * (A)0.7071067811865476));
}

template <typename A> __device__ __forceinline__ A gelu_slope(A x, int tanh_form) {
    if (tanh_form) {
        const A k = (A)0.7978845608028654;
        A t = ftanh(k * (x + (A)0.044715 * x * x * x));
        return (A)0.5 * ((A)1 + t) + (A)0.5 * x * ((A)1 - t * t) * k * ((A)1 + (A)(3 * 0.044715) * x * x);
    }
    A cdf = (A)0.5 * ((A)1 + ferf(x * (A)0.7071067811865476));
    return cdf + x * fexp((A)-0.5 * x * x) * (A)0.3989422804014327;  // 1 / sqrt(2 pi)
}

template <typename A> __device__ __forceinline__ A sigmoid(A x) { return (A)1 / ((A)1 + fexp(-x)); }

#define GRID_LOOP(i, n) for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)

template <typename T> __device__ void gelu_fwd_body(const T* x, T* y, i64 n, int tanh_form) {
    typedef typename acc<T>::type A;
    GRID_LOOP(i, n) y[i] = store<T>(gelu_value<A>(to_float(x[i]), tanh_form));
}
template <typename T> __device__ void gelu_bwd_body(const T* x, const T* g, T* dx, i64 n, int tanh_form) {
    typedef typename acc<T>::type A;
    GRID_LOOP(i, n) dx[i] = store<T>((A)to_float(g[i]) * gelu_slope<A>(to_float(x[i]), tanh_form));
}
template <typename T> __device__ void silu_fwd_body(const T* x, T* y, i64 n) {
    typedef typename acc<T>::type A;
    GRID_LOOP(i, n) { A v = to_float(x[i]); y[i] = store<T>(v * sigmoid(v)); }
}
template <typename T> __device__ void silu_bwd_body(const T* x, const T* g, T* dx, i64 n) {
    typedef typename acc<T>::type A;
    GRID_LOOP(i, n) {
        A v = to_float(x[i]), s = sigmoid(v);
        dx[i] = store<T>((A)to_float(g[i]) * s * ((A)1 + v * ((A)1 - s)));
    }
}

// SwiGLU over rows of h = [gate | up] (2F values each): y = silu(gate) * up, (rows, F); n = rows * F.
template <typename T> __device__ void swiglu_fwd_body(const T* h, T* y, i64 n, i64 F) {
    typedef typename acc<T>::type A;
    GRID_LOOP(i, n) {
        i64 gate = (i / F) * 2 * F + i % F;
        A a = to_float(h[gate]);
        y[i] = store<T>(a * sigmoid(a) * (A)to_float(h[gate + F]));
    }
}
// Its gradient, shaped like h: d gate = g up silu'(gate), d up = g silu(gate).
template <typename T> __device__ void swiglu_bwd_body(const T* h, const T* g, T* dh, i64 n, i64 F) {
    typedef typename acc<T>::type A;
    GRID_LOOP(i, n) {
        i64 gate = (i / F) * 2 * F + i % F;
        A a = to_float(h[gate]), up = to_float(h[gate + F]), gi = to_float(g[i]), s = sigmoid(a);
        dh[gate] = store<T>(gi * up * s * ((A)1 + a * ((A)1 - s)));
        dh[gate + F] = store<T>(gi * a * s);
    }
}

#define ACTIVATIONS(NAME, T) \
    extern "C" __global__ void gelu_fwd_##NAME(const T* x, T* y, i64 n, int tanh_form) { \
        gelu_fwd_body<T>(x, y, n, tanh_form); } \
    extern "C" __global__ void gelu_bwd_##NAME(const T* x, const T* g, T* dx, i64 n, int tanh_form) { \
        gelu_bwd_body<T>(x, g, dx, n, tanh_form); } \
    extern "C" __global__ void silu_fwd_##NAME(const T* x, T* y, i64 n) { silu_fwd_body<T>(x, y, n); } \
    extern "C" __global__ void silu_bwd_##NAME(const T* x, const T* g, T* dx, i64 n) { \
        silu_bwd_body<T>(x, g, dx, n); } \
    extern "C" __global__ void swiglu_fwd_##NAME(const T* h, T* y, i64 n, i64 F) { swiglu_fwd_body<T>(h, y, n, F); } \
    extern "C" __global__ void swiglu_bwd_##NAME(const T* h, const T* g, T* dh, i64 n, i64 F) { \
        swiglu_bwd_body<T>(h, g, dh, n, F); }
FOR_FLOAT_TYPES(ACTIVATIONS)
