// The forward arithmetic of LayerNorm (center = 1) and RMSNorm (center = 0): the statistics of a row and
// the affine step, shared by norms.cu and gemv.cu's norm_linear (whose normalized row must be what the
// norm kernels write).
#pragma once
#include "common.cuh"

template <typename T, int VEC, typename A>
__device__ __forceinline__ void load_param(const void* p, int acc_type, i64 j, A* out) {
    if (acc_type) load_vals<VEC>((const A*)p + j, out);
    else load_vals<VEC>((const T*)p + j, out);
}

// mean (0 without center) and rstd = 1 / sqrt(mean((x - mean)^2) + eps) of a row (RegsRow or MemRow).
template <typename A, typename Row>
__device__ __forceinline__ void norm_stats(const Row& row, int F, double eps, int center, A& mean, A& rstd) {
    mean = 0;
    if (center) mean = row.sum([](A v) { return v; }) / (A)F;
    const A m = mean;
    rstd = (A)1 / fsqrt(row.sum([m](A v) { return (v - m) * (v - m); }) / (A)F + (A)eps);
}

// y = (x - mean) * rstd * w + b of the VEC values at column j, in place (w, b: NULL = absent).
template <typename T, int VEC, typename A>
__device__ __forceinline__ void norm_apply(A* t, const void* w, const void* b, int w_acc, i64 j, A mean, A rstd) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) t[i] = (t[i] - mean) * rstd;
    if (w) {
        A p[VEC];
        load_param<T, VEC>(w, w_acc, j, p);
#pragma unroll
        for (int i = 0; i < VEC; ++i) t[i] *= p[i];
    }
    if (b) {
        A p[VEC];
        load_param<T, VEC>(b, w_acc, j, p);
#pragma unroll
        for (int i = 0; i < VEC; ++i) t[i] += p[i];
    }
}
