// Binary arithmetic (add, sub, mul, div, maximum, minimum) in one pass: load, compute in the
// accumulator type (float, or double for float64), round once (backend/cpu/common.py's rule for float16/bfloat16).
// For contiguous operands where b has a's shape, or a's trailing shape (a bias, repeated along a's
// leading axes: b_n of its values), or one element (x * scalar). Other layouts go through CuPy's own
// elementwise routines.
//
// Two kernels per op and dtype, same arguments (a, b, y, n, b_n):
//   OP_v_T  16-byte accesses (VEC = 16 / sizeof(T) values: 8 bf16/fp16, 4 float, 2 double) over a
//           grid-stride loop, two accesses in flight per array and thread. The launcher checks that
//           a, y (and b, unless it is one value) are 16-byte aligned and, for a repeated b, that
//           b_n % VEC == 0 and b_n < 2^31. A repeated b's vector index is kept in 32 bits and
//           advanced by the stride (no division in the loop); the last n % VEC values (same shape or
//           one b value only: a repeated b makes n a multiple of VEC) are done one by one.
//   OP_T    one value per access (any alignment, any b_n dividing n): the fallback.
#include "common.cuh"

template <int OP, typename A> __device__ __forceinline__ A apply_op(A a, A b) {
    if constexpr (OP == 0) return a + b;
    else if constexpr (OP == 1) return a - b;
    else if constexpr (OP == 2) return a * b;
    else if constexpr (OP == 3) return a / b;
    else if constexpr (OP == 4) return (a != a || b != b) ? a + b : fmx(a, b);  // NaN propagates, as np.maximum
    else return (a != a || b != b) ? a + b : fmn(a, b);
}

template <typename T, int OP>
__device__ void binary_body(const T* a, const T* b, T* y, i64 n, i64 b_n) {
    typedef typename acc<T>::type A;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        y[i] = store<T>(apply_op<OP>((A)to_float(a[i]), (A)to_float(b[b_n == n ? i : i % b_n])));
}

enum { B_SAME, B_REPEAT, B_SCALAR };  // where b's value for a[i] is: b[i], b[i % b_n], b[0]

template <typename T, int OP, int MODE>
__device__ __forceinline__ void binary_vec_loop(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                                                i64 n, i64 b_n) {
    typedef typename acc<T>::type A;
    constexpr int VEC = vec_width<T>::value;
    constexpr int U = 2;  // accesses in flight per array and thread
    const i64 nvec = n / VEC;
    const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x, stride = (i64)gridDim.x * blockDim.x;
    const A b0 = MODE == B_SCALAR ? (A)to_float(b[0]) : (A)0;
    // B_REPEAT: b's vector for vector i is c = i % bv (32 bits: bv < 2^31 / VEC), advanced by
    // step = stride % bv per step of the loop (c + step < 2 bv < 2^32).
    const u32 bv = MODE == B_REPEAT ? (u32)(b_n / VEC) : 1u;
    u32 c = 0, step = 0;
    if (MODE == B_REPEAT && tid < nvec) {
        c = (u32)(tid % bv);
        step = (u32)(stride % bv);
    }
    Frag<T, VEC> af[U], bf[U];
    const auto load = [&](int u, i64 i) {
        af[u].load(a + i * VEC);
        if (MODE == B_SAME) bf[u].load(b + i * VEC);
        else if (MODE == B_REPEAT) bf[u].load(b + c * (u32)VEC);
        if (MODE == B_REPEAT) {  // c for i + stride (past the last vector of the thread, never read)
            c += step;
            if (c >= bv) c -= bv;
        }
    };
    grid_stride_rounds<U>(nvec, load, [&](int u, i64 i) {
        A x[VEC], z[VEC];
        af[u].get(x);
        if (MODE == B_SCALAR) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) z[e] = b0;
        } else {
            bf[u].get(z);
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) x[e] = apply_op<OP>(x[e], z[e]);
        store_vals<VEC>(y + i * VEC, x);
    });
    for (i64 i = nvec * VEC + tid; i < n; i += stride) {  // the last n % VEC values, one a thread
        const A z = MODE == B_SAME ? (A)to_float(b[i]) : MODE == B_SCALAR ? b0 : (A)to_float(b[i % b_n]);
        y[i] = store<T>(apply_op<OP>((A)to_float(a[i]), z));
    }
}

template <typename T, int OP>
__device__ __forceinline__ void binary_vec_body(const T* a, const T* b, T* y, i64 n, i64 b_n) {
    if (b_n == n) binary_vec_loop<T, OP, B_SAME>(a, b, y, n, b_n);
    else if (b_n == 1) binary_vec_loop<T, OP, B_SCALAR>(a, b, y, n, b_n);
    else binary_vec_loop<T, OP, B_REPEAT>(a, b, y, n, b_n);
}

#define BINARY_OP(NAME, T, OPNAME, OP) \
    extern "C" __global__ void OPNAME##_##NAME(const T* a, const T* b, T* y, i64 n, i64 b_n) { \
        binary_body<T, OP>(a, b, y, n, b_n); } \
    extern "C" __global__ void OPNAME##_v_##NAME(const T* a, const T* b, T* y, i64 n, i64 b_n) { \
        binary_vec_body<T, OP>(a, b, y, n, b_n); }
#define BINARY(NAME, T) BINARY_OP(NAME, T, add, 0) BINARY_OP(NAME, T, sub, 1) BINARY_OP(NAME, T, mul, 2) \
    BINARY_OP(NAME, T, div, 3) BINARY_OP(NAME, T, maximum, 4) BINARY_OP(NAME, T, minimum, 5)
FOR_FLOAT_TYPES(BINARY)

// dst[r, :] = src[r, :] for `rows` rows of `vecs` 16-byte vectors: src contiguous, dst rows
// `dst_vecs` vectors apart (a slice of a wider output along its last axis: put_slices' copies).
extern "C" __global__ void copy_rows_16(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 rows, i64 vecs,
                                        i64 dst_vecs) {
    const i64 n = rows * vecs;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 r = i / vecs;
        dst[r * dst_vecs + (i - r * vecs)] = src[i];
    }
}
