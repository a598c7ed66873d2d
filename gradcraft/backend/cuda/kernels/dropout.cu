// Dropout: y = x / (1 - p) where the element's uniform number u >= p, else 0.
// u comes from philox.cuh keyed by (seed, element index), so the backward pass (the same kernel
// on the gradient, with the same seed) regenerates the forward mask without storing it.
#include "common.cuh"
#include "philox.cuh"

// Each thread makes one Philox call and handles the 4 elements it covers.
template <typename T>
__device__ void dropout_body(const T* x, T* y, i64 n, u64 seed, double p, double scale) {
    typedef typename acc<T>::type A;
    const A s = (A)scale;
    i64 groups = (n + 3) / 4;
    for (i64 q = blockIdx.x * (i64)blockDim.x + threadIdx.x; q < groups; q += (i64)gridDim.x * blockDim.x) {
        u64x4 r = philox4x64((u64)q + 1, seed, 0);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            i64 i = 4 * q + k;
            if (i < n) {
                bool keep = uniform53(r.v[k]) >= p;
                y[i] = store<T>(keep ? (A)to_float(x[i]) * s : (A)0);
            }
        }
    }
}

#define DROPOUT(NAME, T) \
    extern "C" __global__ void dropout_##NAME(const T* x, T* y, i64 n, u64 seed, double p, double scale) { \
        dropout_body<T>(x, y, n, seed, p, scale); }
FOR_FLOAT_TYPES(DROPOUT)
