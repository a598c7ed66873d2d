// GELU (erf and tanh forms), SiLU and SwiGLU, forward and backward, over contiguous arrays.
// Formulas are backend/cpu/activations.py's _gelu, _gelu_backward, _silu, _silu_backward, _swiglu, _swiglu_backward.
//
// Memory-bound: each thread moves VEC = 16 / sizeof(T) values per access (`_v` kernels: every pointer
// 16-byte aligned; SwiGLU also needs F % VEC == 0) or one (`_s` kernels), two accesses in flight per
// array, over a grid-stride loop; the last n % VEC values of a `_v` launch are done one by one.
// The tanh forms are written with the sigmoid, 0.5 (1 + tanh(u)) = sigmoid(2u), which needs one
// exp and one division in float (no cancellation where tanh(u) is near -1).
#include "common.cuh"
#include "activations.cuh"

enum { GELU_FWD, GELU_BWD, SILU_FWD, SILU_BWD };

template <int OP, typename A> __device__ __forceinline__ A activation(A x, A g, int tanh_form) {
    if constexpr (OP == GELU_FWD) return gelu_value(x, tanh_form);
    else if constexpr (OP == GELU_BWD) return g * gelu_slope(x, tanh_form);
    else if constexpr (OP == SILU_FWD) return silu_value(x);
    else {
        const A s = sigmoid(x), r = sigmoid(-x);  // silu' = s (1 + x (1 - s))
        return g * s * ((A)1 + x * r);
    }
}

// y = f(x) or g * f'(x) over n values; g is read only by the backward kernels.
template <int OP, typename T, int VEC>
__device__ __forceinline__ void activation_body(const T* __restrict__ x, const T* __restrict__ g, T* __restrict__ y,
                                                i64 n, int tanh_form) {
    typedef typename acc<T>::type A;
    constexpr bool has_g = OP == GELU_BWD || OP == SILU_BWD;
    constexpr int U = 2;  // accesses in flight per array and thread
    const i64 nvec = n / VEC;
    Frag<T, VEC> xf[U], gf[U];
    const auto load = [&](int u, i64 i) {
        xf[u].load(x + i * VEC);
        if (has_g) gf[u].load(g + i * VEC);
    };
    grid_stride_rounds<U>(nvec, load, [&](int u, i64 i) {
        A xv[VEC], gv[VEC];
        xf[u].get(xv);
        if (has_g) gf[u].get(gv);
#pragma unroll
        for (int e = 0; e < VEC; ++e) xv[e] = activation<OP, A>(xv[e], has_g ? gv[e] : (A)0, tanh_form);
        store_vals<VEC>(y + i * VEC, xv);
    });
    if (VEC > 1) {  // the last n % VEC values
        const i64 i = nvec * VEC + (i64)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = store<T>(activation<OP, A>((A)to_float(x[i]), has_g ? (A)to_float(g[i]) : (A)0, tanh_form));
    }
}

// SwiGLU over rows of h = [gate | up] (2F values each): y = silu(gate) * up, (rows, F); its gradient,
// shaped like h: d gate = g up silu'(gate), d up = g silu(gate). Thread i of the grid-stride loop takes
// the VEC values at (row, c) of y; (row, c) advance by the stride without a division per step.
template <typename T, int VEC, bool BACKWARD>
__device__ __forceinline__ void swiglu_body(const T* __restrict__ h, const T* __restrict__ g, T* __restrict__ out,
                                            i64 rows, i64 F) {
    typedef typename acc<T>::type A;
    const i64 fv = F / VEC, nvec = rows * fv;
    const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x, stride = (i64)gridDim.x * blockDim.x;
    if (tid >= nvec) return;
    const i64 step_row = stride / fv, step_c = stride % fv;
    i64 row = tid / fv, c = tid % fv;
    for (i64 i = tid; i < nvec; i += stride) {
        const i64 gate = row * 2 * F + c * VEC;
        Frag<T, VEC> af, uf, gf;
        af.load(h + gate);
        uf.load(h + gate + F);
        if (BACKWARD) gf.load(g + i * VEC);
        A a[VEC], up[VEC], gv[VEC];
        af.get(a);
        uf.get(up);
        if (BACKWARD) {
            gf.get(gv);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const A s = sigmoid(a[e]), r = sigmoid(-a[e]);
                const A dgate = gv[e] * up[e] * s * ((A)1 + a[e] * r);
                up[e] = gv[e] * a[e] * s;
                a[e] = dgate;
            }
            store_vals<VEC>(out + gate, a);
            store_vals<VEC>(out + gate + F, up);
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) a[e] = silu_value(a[e]) * up[e];
            store_vals<VEC>(out + i * VEC, a);
        }
        c += step_c;
        row += step_row;
        if (c >= fv) {
            c -= fv;
            ++row;
        }
    }
}

#define ACTIVATION_KERNELS(NAME, T, V, VEC) \
    extern "C" __global__ void gelu_fwd_##V##_##NAME(const T* x, T* y, i64 n, int tanh_form) { \
        activation_body<GELU_FWD, T, VEC>(x, nullptr, y, n, tanh_form); } \
    extern "C" __global__ void gelu_bwd_##V##_##NAME(const T* x, const T* g, T* dx, i64 n, int tanh_form) { \
        activation_body<GELU_BWD, T, VEC>(x, g, dx, n, tanh_form); } \
    extern "C" __global__ void silu_fwd_##V##_##NAME(const T* x, T* y, i64 n) { \
        activation_body<SILU_FWD, T, VEC>(x, nullptr, y, n, 0); } \
    extern "C" __global__ void silu_bwd_##V##_##NAME(const T* x, const T* g, T* dx, i64 n) { \
        activation_body<SILU_BWD, T, VEC>(x, g, dx, n, 0); } \
    extern "C" __global__ void swiglu_fwd_##V##_##NAME(const T* h, T* y, i64 rows, i64 F) { \
        swiglu_body<T, VEC, false>(h, nullptr, y, rows, F); } \
    extern "C" __global__ void swiglu_bwd_##V##_##NAME(const T* h, const T* g, T* dh, i64 rows, i64 F) { \
        swiglu_body<T, VEC, true>(h, g, dh, rows, F); }
#define ACTIVATIONS(NAME, T) ACTIVATION_KERNELS(NAME, T, v, vec_width<T>::value) ACTIVATION_KERNELS(NAME, T, s, 1)
FOR_FLOAT_TYPES(ACTIVATIONS)
