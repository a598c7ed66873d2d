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

// ---------------------------------------------------------------- 16-byte vectors
// Row and elementwise kernels move VEC = 16 / sizeof(T) values per load or store (8 bf16/fp16,
// 4 float, 2 double) where the launcher found the row length a multiple of VEC and every pointer
// 16-byte aligned, and VEC = 1 otherwise: one template serves both. A Frag holds one access as loaded
// (raw bits, so a thread can keep many in few registers); get() widens it to the accumulator type.

struct alignas(16) u32x4 { u32 a, b, c, d; };
struct alignas(8) u32x2 { u32 a, b; };

template <typename T> struct vec_width { static constexpr int value = 16 / (int)sizeof(T); };
template <typename X, typename Y> struct same_type { static constexpr bool value = false; };
template <typename X> struct same_type<X, X> { static constexpr bool value = true; };

// The values of one 16-byte word of T, widened (A: float, or double for double).
template <typename T, typename A> __device__ __forceinline__ void unpack16(const u32x4& r, A* out) {
    const u32 w[4] = {r.a, r.b, r.c, r.d};
    if constexpr (same_type<T, bf16>::value) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            out[2 * k] = (A)__uint_as_float(w[k] << 16);
            out[2 * k + 1] = (A)__uint_as_float(w[k] & 0xffff0000u);
        }
    } else if constexpr (same_type<T, f16>::value) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            f16 lo, hi;
            lo.bits = (u16)(w[k] & 0xffffu);
            hi.bits = (u16)(w[k] >> 16);
            out[2 * k] = (A)to_float(lo);
            out[2 * k + 1] = (A)to_float(hi);
        }
    } else if constexpr (same_type<T, float>::value) {
#pragma unroll
        for (int k = 0; k < 4; ++k) out[k] = (A)__uint_as_float(w[k]);
    } else {
        static_assert(same_type<T, double>::value, "unpack16: bf16, f16, float or double");
        out[0] = (A)__longlong_as_double((i64)(((u64)w[1] << 32) | w[0]));
        out[1] = (A)__longlong_as_double((i64)(((u64)w[3] << 32) | w[2]));
    }
}

// One 16-byte word of T from 16 / sizeof(T) accumulator values, each rounded once.
template <typename T, typename A> __device__ __forceinline__ u32x4 pack16(const A* in) {
    u32 w[4];
    if constexpr (same_type<T, bf16>::value || same_type<T, f16>::value) {
#pragma unroll
        for (int k = 0; k < 4; ++k)
            w[k] = (u32)store<T>(in[2 * k]).bits | ((u32)store<T>(in[2 * k + 1]).bits << 16);
    } else if constexpr (same_type<T, float>::value) {
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = __float_as_uint((float)in[k]);
    } else {
        static_assert(same_type<T, double>::value, "pack16: bf16, f16, float or double");
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const u64 b = (u64)__double_as_longlong((double)in[k]);
            w[2 * k] = (u32)b;
            w[2 * k + 1] = (u32)(b >> 32);
        }
    }
    u32x4 r;
    r.a = w[0]; r.b = w[1]; r.c = w[2]; r.d = w[3];
    return r;
}

// N consecutive values of T as one access: N = 1, or N * sizeof(T) = 16 (16-byte aligned).
template <typename T, int N> struct Frag {
    static_assert(N * sizeof(T) == 16, "a Frag is one value or 16 bytes");
    u32x4 raw;
    __device__ __forceinline__ void load(const T* p) { raw = *reinterpret_cast<const u32x4*>(p); }
    template <typename A> __device__ __forceinline__ void get(A* out) const { unpack16<T>(raw, out); }
};
template <typename T> struct Frag<T, 1> {
    T raw;
    __device__ __forceinline__ void load(const T* p) { raw = *p; }
    template <typename A> __device__ __forceinline__ void get(A* out) const { out[0] = (A)to_float(raw); }
};

// Read N values of S at p into accumulator values: N = 1 (any alignment), or N * sizeof(S) a
// multiple of 8 bytes with p aligned to min(16, N * sizeof(S)). S may differ from the row's storage
// type (a float32 weight or mask beside bf16 rows): N * sizeof(S) is then 8, 16 or 32 bytes.
template <int N, typename S, typename A> __device__ __forceinline__ void load_vals(const S* p, A* out) {
    constexpr int bytes = N * (int)sizeof(S);
    if constexpr (N == 1) {
        out[0] = (A)to_float(*p);
    } else if constexpr (bytes % 16 == 0) {
        constexpr int per = 16 / (int)sizeof(S);
#pragma unroll
        for (int k = 0; k < bytes / 16; ++k) unpack16<S>(reinterpret_cast<const u32x4*>(p)[k], out + k * per);
    } else {
        static_assert(bytes == 8 && sizeof(S) == 4, "load_vals: 1 value, 8 bytes of float, or 16-byte words");
        const u32x2 r = *reinterpret_cast<const u32x2*>(p);
        out[0] = (A)__uint_as_float(r.a);
        out[1] = (A)__uint_as_float(r.b);
    }
}

// Write N accumulator values to p as T: one rounded value, or one 16-byte word.
template <int N, typename T, typename A> __device__ __forceinline__ void store_vals(T* p, const A* in) {
    if constexpr (N == 1) {
        *p = store<T>(in[0]);
    } else {
        static_assert(N * sizeof(T) == 16, "store_vals: one value or 16 bytes");
        *reinterpret_cast<u32x4*>(p) = pack16<T>(in);
    }
}

// ---------------------------------------------------------------- fast math for memory-bound kernels
// float: the SFU's exp2 and division (relative error ~1e-6 for the arguments these kernels see, far
// below a bf16 ulp and within the float32 tests' tolerance); double keeps the exact functions.
__device__ __forceinline__ float fast_exp(float x) { return __expf(x); }
__device__ __forceinline__ double fast_exp(double x) { return exp(x); }
// a / b; b = inf gives 0 (the sigmoid of a very negative number), b = NaN gives NaN.
__device__ __forceinline__ float fast_div(float a, float b) { return __fdividef(a, b); }
__device__ __forceinline__ double fast_div(double a, double b) { return a / b; }

// ---------------------------------------------------------------- grid-stride rounds
// The elementwise kernels walk their nvec vectors with a grid-stride loop, U vectors a round per thread
// (i0, i0 + stride, ...): load(u, i) for every vector i of the round first, so that U accesses of each
// array are in flight, then compute(u, i) for each.
template <int U, typename Load, typename Compute>
__device__ __forceinline__ void grid_stride_rounds(i64 nvec, Load load, Compute compute) {
    const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x, stride = (i64)gridDim.x * blockDim.x;
    for (i64 i0 = tid; i0 < nvec; i0 += U * stride) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * stride;
            if (i < nvec) load(u, i);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * stride;
            if (i < nvec) compute(u, i);
        }
    }
}

// ---------------------------------------------------------------- one row per warp or per block
// Row kernels reduce over a warp (WARP: one row per warp, no __syncthreads) or over the block (one row
// per block; every thread of the block must call, as for block_sum). `scratch` holds 32 values.
template <bool WARP, typename A> __device__ __forceinline__ A row_sum(A v, A* scratch) {
    if constexpr (WARP) return warp_sum(v);
    else return block_sum(v, scratch);
}
template <bool WARP, typename A> __device__ __forceinline__ A row_max(A v, A* scratch) {
    if constexpr (WARP) return warp_max(v);
    else return block_max(v, scratch);
}

// Instantiate a templated kernel body as extern "C" kernels, one per storage type:
// NAME_f32, NAME_f64, NAME_bf16, NAME_f16 (the Python side picks by dtype).
#define FOR_FLOAT_TYPES(MACRO) MACRO(f32, float) MACRO(f64, double) MACRO(bf16, bf16) MACRO(f16, f16)

// ---------------------------------------------------------------- programmatic dependent launch
// A kernel launched with the PDL attribute (backend/cuda/pdl.py, sm_90 and later) may start while the
// kernel before it in the stream still runs. pdl_wait() blocks until that kernel has completed and its
// writes are visible: such a kernel must call it before reading anything an earlier kernel writes and
// before writing anything an earlier kernel may still read. pdl_launch_dependents() lets the next
// PDL-launched kernel start early (without it, it starts when this one's blocks exit). Both are no-ops
// for a kernel launched normally, and are compiled out below sm_90 (griddepcontrol needs PTX ISA 7.8).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
