// Rotary embedding, rotate-half layout: for x (rows, T, D) and cos/sin (T, D/2) in the accumulator
// type (float32, or float64 for float64 x),
// (x1, x2) = (x[..., i], x[..., i + D/2]) -> (x1 c - x2 s, x2 c + x1 s). `inverse` negates s
// (the backward pass: rotating back by the same angle).
#include "common.cuh"

template <typename T>
__device__ void rope_body(const T* x, const typename acc<T>::type* cos_, const typename acc<T>::type* sin_, T* y,
                          i64 rows, int T_, int half, int inverse) {
    typedef typename acc<T>::type A;
    const i64 pairs = rows * half;  // rows counts every (batch..., t) row
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < pairs; k += (i64)gridDim.x * blockDim.x) {
        i64 row = k / half;
        int i = (int)(k - row * half);
        int t = (int)(row % T_);
        A c = cos_[t * half + i], s = sin_[t * half + i];
        if (inverse) s = -s;
        i64 base = row * 2 * half;
        A x1 = to_float(x[base + i]), x2 = to_float(x[base + half + i]);
        y[base + i] = store<T>(x1 * c - x2 * s);
        y[base + half + i] = store<T>(x2 * c + x1 * s);
    }
}

#define ROPE(NAME, T) \
    extern "C" __global__ void rope_##NAME(const T* x, const acc<T>::type* cos_, const acc<T>::type* sin_, T* y, i64 rows, \
                                           int T_, int half, int inverse) { \
        rope_body<T>(x, cos_, sin_, y, rows, T_, half, inverse); }
FOR_FLOAT_TYPES(ROPE)
