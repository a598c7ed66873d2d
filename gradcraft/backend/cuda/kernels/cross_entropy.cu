// Cross-entropy of (N, width) logits against (N,) class ids, one block per row, and its gradient with
// respect to the logits in the same launch. Only the first C columns are classes: the others
// (vocabulary padding, so that the matmul before runs on a friendly size) are not read, and their
// gradient is 0.
//
// loss = -(1 - ls) * logp[t] - ls * mean(logp), logp = log_softmax(row[:C]); rows whose target is
// ignore_index give 0 (and a zero gradient). dlogits = (softmax - (1 - ls) * onehot(t) - ls / C) * g
// with g the upstream gradient of the row's loss (g == NULL means 1) times grad_scale.
// Either output may be NULL: the forward kernel passes no dlogits, the backward no loss. A target
// outside [0, C) that is not ignore_index gives NaN (the CPU backend raises an IndexError).
#include "common.cuh"

// LT: the type of the losses and of g (T, or float for half logits: _f32loss kernels).
template <typename T, typename LT>
__device__ void cross_entropy_body(const T* logits, const i64* target, const LT* g, LT* loss, T* dlogits, int C,
                                   int width, i64 ignore_index, double smoothing_, double grad_scale) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const T* xr = logits + row * width;
    const i64 t = target[row];
    const A ls = (A)smoothing_;
    // Pass 1: running max, sum of exponentials rescaled to it, and the plain sum (for smoothing).
    A m = neg_inf<A>(), s = 0, sum_x = 0;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        A v = to_float(xr[j]);
        sum_x += v;
        if (v > m) { s = (m == neg_inf<A>() ? (A)0 : s * fexp(m - v)) + 1; m = v; }
        else s += fexp(v - m);
    }
    A row_max = block_max(m, scratch);
    s = (m == neg_inf<A>()) ? (A)0 : s * fexp(m - row_max);
    A lse = row_max + flog(block_sum(s, scratch));
    if (ls != (A)0) sum_x = block_sum(sum_x, scratch);
    const bool valid = t != ignore_index;
    const bool in_range = t >= 0 && t < C;
    if (loss && threadIdx.x == 0) {
        A out = 0;
        if (valid && !in_range) out = quiet_nan<A>();
        else if (valid) {
            out = -((A)to_float(xr[t]) - lse);
            if (ls != (A)0) out = ((A)1 - ls) * out - ls * (sum_x / (A)C - lse);
        }
        loss[row] = store<LT>(out);
    }
    if (dlogits) {
        // g * valid, not a branch: a NaN g (a mean over no valid rows) stays NaN, as in cpu.py
        A scale = (A)grad_scale * (g ? (A)to_float(g[row]) : (A)1) * (valid ? (A)1 : (A)0);
        if (valid && !in_range) scale = quiet_nan<A>();
        const A hit = (A)1 - ls, floor_ = ls / (A)C;
        T* dr = dlogits + row * width;
        for (int j = threadIdx.x; j < C; j += blockDim.x) {
            A p = fexp((A)to_float(xr[j]) - lse);
            dr[j] = store<T>((p - (j == t ? hit : (A)0) - floor_) * scale);
        }
        for (int j = C + threadIdx.x; j < width; j += blockDim.x) dr[j] = store<T>((A)0);
    }
}

#define CROSS_ENTROPY_LT(NAME, T, LT) \
    extern "C" __global__ void cross_entropy_##NAME(const T* logits, const i64* target, const LT* g, LT* loss, \
                                                    T* dlogits, int C, int width, i64 ignore_index, \
                                                    double smoothing, double grad_scale) { \
        cross_entropy_body<T, LT>(logits, target, g, loss, dlogits, C, width, ignore_index, smoothing, grad_scale); }
#define CROSS_ENTROPY(NAME, T) CROSS_ENTROPY_LT(NAME, T, T)
FOR_FLOAT_TYPES(CROSS_ENTROPY)
// Half-precision logits, float32 losses (the loss of a bf16 model without a float32 copy of its logits).
CROSS_ENTROPY_LT(bf16_f32loss, bf16, float)
CROSS_ENTROPY_LT(f16_f32loss, f16, float)
