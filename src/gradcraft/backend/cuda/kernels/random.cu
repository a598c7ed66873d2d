// Random tensors from (seed, element index), with the Philox stream of philox.cuh.
// rand matches the CPU backend bit for bit (both read NumPy's Philox stream); randn (Box-Muller)
// and randint (scaled uniform) have the right distributions but are not the CPU's numbers.
#include "common.cuh"
#include "philox.cuh"

template <typename T> __device__ __forceinline__ T from_uniform(double u);
template <> __device__ __forceinline__ double from_uniform<double>(double u) { return u; }
template <> __device__ __forceinline__ float from_uniform<float>(double u) { return (float)u; }
// The CPU makes float32 first, then rounds to the half type: round twice here too.
template <> __device__ __forceinline__ bf16 from_uniform<bf16>(double u) { return from_float<bf16>((float)u); }
template <> __device__ __forceinline__ f16 from_uniform<f16>(double u) { return from_float<f16>((float)u); }

template <typename T>
__device__ void rand_body(T* y, i64 n, u64 seed) {
    i64 groups = (n + 3) / 4;
    for (i64 q = blockIdx.x * (i64)blockDim.x + threadIdx.x; q < groups; q += (i64)gridDim.x * blockDim.x) {
        u64x4 r = philox4x64((u64)q + 1, seed, 0);
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (4 * q + k < n) y[4 * q + k] = from_uniform<T>(uniform53(r.v[k]));
    }
}

// Box-Muller: each pair of uniforms gives two independent standard normals.
template <typename T>
__device__ void randn_body(T* y, i64 n, u64 seed) {
    const double two_pi = 6.283185307179586;
    i64 groups = (n + 3) / 4;
    for (i64 q = blockIdx.x * (i64)blockDim.x + threadIdx.x; q < groups; q += (i64)gridDim.x * blockDim.x) {
        u64x4 r = philox4x64((u64)q + 1, seed, 0);
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
            double u1 = 1.0 - uniform53(r.v[2 * pair]);  // (0, 1]: log is finite
            double u2 = uniform53(r.v[2 * pair + 1]);
            double radius = sqrt(-2.0 * log(u1));
            double z[2] = {radius * cos(two_pi * u2), radius * sin(two_pi * u2)};
#pragma unroll
            for (int k = 0; k < 2; ++k)
                if (4 * q + 2 * pair + k < n) y[4 * q + 2 * pair + k] = from_uniform<T>(z[k]);
        }
    }
}

#define RANDOM(NAME, T) \
    extern "C" __global__ void rand_##NAME(T* y, i64 n, u64 seed) { rand_body<T>(y, n, seed); } \
    extern "C" __global__ void randn_##NAME(T* y, i64 n, u64 seed) { randn_body<T>(y, n, seed); }
FOR_FLOAT_TYPES(RANDOM)

// Integers in [low, high): floor(u * (high - low)) + low, as int64.
extern "C" __global__ void randint_i64(i64* y, i64 n, u64 seed, i64 low, i64 high) {
    double span = (double)(high - low);
    i64 groups = (n + 3) / 4;
    for (i64 q = blockIdx.x * (i64)blockDim.x + threadIdx.x; q < groups; q += (i64)gridDim.x * blockDim.x) {
        u64x4 r = philox4x64((u64)q + 1, seed, 0);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (4 * q + k < n) {
                i64 v = low + (i64)(uniform53(r.v[k]) * span);
                y[4 * q + k] = v < high ? v : high - 1;
            }
        }
    }
}
