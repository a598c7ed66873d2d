// The activation functions of the forward kernels, shared by activations.cu and gemv.cu's norm_linear
// (whose epilogue must compute exactly what the separate activation kernels compute).
// The tanh form of GELU is written with the sigmoid, 0.5 (1 + tanh(u)) = sigmoid(2u): one exp and one
// division in float, no cancellation where tanh(u) is near -1.
#pragma once
#include "common.cuh"

#define SQRT_2_OVER_PI 0.7978845608028654
#define GELU_C 0.044715

template <typename A> __device__ __forceinline__ A sigmoid(A z) { return fast_div((A)1, (A)1 + fast_exp(-z)); }

template <typename A> __device__ __forceinline__ A gelu_value(A x, int tanh_form) {
    if (tanh_form) {
        const A u = (A)SQRT_2_OVER_PI * x * ((A)1 + (A)GELU_C * x * x);
        return fast_div(x, (A)1 + fast_exp((A)-2 * u));  // x * sigmoid(2u)
    }
    return (A)0.5 * x * ((A)1 + ferf(x * (A)0.7071067811865476));
}

// SiLU, x * sigmoid(x).
template <typename A> __device__ __forceinline__ A silu_value(A x) { return fast_div(x, (A)1 + fast_exp(-x)); }

// d/dx of GELU (the gradient kernels, and fused elementwise groups: backend/cuda/fused.py).
template <typename A> __device__ __forceinline__ A gelu_slope(A x, int tanh_form) {
    if (tanh_form) {
        // d/dx 0.5 x (1 + tanh u) = 0.5 (1 + t) + 0.5 x (1 - t^2) u' with 1 + t = 2s, 1 - t^2 = 4 s (1 - s)
        const A u = (A)SQRT_2_OVER_PI * x * ((A)1 + (A)GELU_C * x * x);
        const A du = (A)SQRT_2_OVER_PI * ((A)1 + (A)(3 * GELU_C) * x * x);
        const A s = sigmoid((A)2 * u), r = sigmoid((A)-2 * u);  // s and 1 - s, each without cancellation
        return s + (A)2 * x * s * r * du;
    }
    const A cdf = (A)0.5 * ((A)1 + ferf(x * (A)0.7071067811865476));
    return cdf + x * fast_exp((A)-0.5 * x * x) * (A)0.3989422804014327;  // 1 / sqrt(2 pi)
}
