// Shared helpers for every kernel family: storage types, float conversions, block reductions.
//
// No CUDA headers are included, so each .cu file compiles with a bare NVRTC (the CPU-only compile
// test) as well as through CuPy. bfloat16 and float16 are stored as 16-bit patterns and converted
// by hand: arithmetic always happens in float (or double for float64 tensors).
#pragma once

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

struct bf16 { u16 bits; };
struct f16 { u16 bits; };

// ---------------------------------------------------------------- conversions

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ double to_float(double x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __uint_as_float(((u32)x.bits) << 16); }
__device__ __forceinline__ float to_float(f16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}

template <typename T> __device__ __forceinline__ T from_float(float x);
template <typename T> __device__ __forceinline__ T from_double(double x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ double from_float<double>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) {
    // Round to nearest even, as ml_dtypes does; NaN stays a (quiet) NaN.
    u32 u = __float_as_uint(x);
    bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { r.bits = (u16)((u >> 16) | 0x40u); return r; }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.bits = (u16)(u >> 16);
    return r;
}
template <> __device__ __forceinline__ f16 from_float<f16>(float x) {
    f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
    return r;
}
// Store a result computed in the accumulator type (float, or double for float64 tensors).
template <typename T> __device__ __forceinline__ T store(float x) { return from_float<T>(x); }
template <typename T> __device__ __forceinline__ T store(double x) { return (T)x; }

// The accumulator type of a storage type: float for every type but double.
template <typename T> struct acc { typedef float type; };
template <> struct acc<double> { typedef double type; };

// ---------------------------------------------------------------- math in the accumulator type

__device__ __forceinline__ float fexp(float x) { return expf(x); }
__device__ __forceinline__ double fexp(double x) { return exp(x); }
__device__ __forceinline__ float flog(float x) { return logf(x); }
__device__ __forceinline__ double flog(double x) { return log(x); }
__device__ __forceinline__ float fsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double fsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float ftanh(float x) { return tanhf(x); }
__device__ __forceinline__ double ftanh(double x) { return tanh(x); }
__device__ __forceinline__ float ferf(float x) { return erff(x); }
__device__ __forceinline__ double ferf(double x) { return erf(x); }
template <typename A> __device__ __forceinline__ A neg_inf() { return (A)(-__int_as_float(0x7f800000)); }
template <typename A> __device__ __forceinline__ A quiet_nan() { return (A)__int_as_float(0x7fc00000); }

// ---------------------------------------------------------------- block reductions
// Every thread of the block must call these (they contain __syncthreads). `scratch` holds 32 values.

template <typename A> __device__ __forceinline__ A warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float fmx(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double fmx(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ float fmn(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double fmn(double a, double b) { return fmin(a, b); }
template <typename A> __device__ __forceinline__ A warp_max(A v) {
    for (int o = 16; o > 0; o >>= 1) v = fmx(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <typename A> __device__ __forceinline__ A block_sum(A v, A* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : (A)0;
    return warp_sum(v);
}
template <typename A> __device__ __forceinline__ A block_max(A v, A* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : neg_inf<A>();
    return warp_max(v);
}

// Instantiate a templated kernel body as extern "C" kernels, one per storage type:
// NAME_f32, NAME_f64, NAME_bf16, NAME_f16 (the Python side picks by dtype).
#define FOR_FLOAT_TYPES(MACRO) MACRO(f32, float) MACRO(f64, double) MACRO(bf16, bf16) MACRO(f16, f16)
