// Binary arithmetic on half-precision tensors in one pass: load, compute in float, round once
// (cpu.py's rule for float16/bfloat16). For contiguous operands where b has a's shape, or a's
// trailing shape (a bias, repeated along a's leading axes: b_n of its values), or one element (x *
// scalar). Other layouts and dtypes go through CuPy's own elementwise routines.
#include "common.cuh"

template <int OP> __device__ __forceinline__ float apply_op(float a, float b) {
    switch (OP) {
        case 0: return a + b;
        case 1: return a - b;
        case 2: return a * b;
        case 3: return a / b;
        case 4: return (a != a || b != b) ? a + b : fmaxf(a, b);  // NaN propagates, as np.maximum
        default: return (a != a || b != b) ? a + b : fminf(a, b);
    }
}

template <typename T, int OP>
__device__ void binary_body(const T* a, const T* b, T* y, i64 n, i64 b_n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        y[i] = from_float<T>(apply_op<OP>(to_float(a[i]), to_float(b[b_n == n ? i : i % b_n])));
}

#define BINARY_OP(NAME, T, OPNAME, OP) \
    extern "C" __global__ void OPNAME##_##NAME(const T* a, const T* b, T* y, i64 n, i64 b_n) { \
        binary_body<T, OP>(a, b, y, n, b_n); }
#define BINARY(NAME, T) BINARY_OP(NAME, T, add, 0) BINARY_OP(NAME, T, sub, 1) BINARY_OP(NAME, T, mul, 2) \
    BINARY_OP(NAME, T, div, 3) BINARY_OP(NAME, T, maximum, 4) BINARY_OP(NAME, T, minimum, 5)
BINARY(bf16, bf16)
BINARY(f16, f16)
