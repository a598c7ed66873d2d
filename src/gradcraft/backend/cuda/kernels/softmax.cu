// Row softmax and log-softmax, forward and backward, over rows of C contiguous values.
//
// The forward also serves attention: the row's scores are x * scale (+ mask, float32, x's shape), and
// with `causal` or `window` the row is query i = row % T + (S - T) of a (.., T, S) score matrix
// (queries are the last T positions, the KV-cache layout of backend/cpu/softmax.py's _position_mask). Keys j > i
// (causal) or j <= i - window are excluded: probability 0 (log: -inf), and are not read. A row with
// nothing left is NaN, as in backend/cpu/softmax.py.
//
// Layouts as in norms.cu, picked by rows.py from C, each with VEC = 16 / sizeof(T) or VEC = 1:
//   warp:  one row per warp, in registers (E values a lane), C <= 32 * E: max, sum of exps, write;
//   block: one row per block, in registers, C <= blockDim * E;
//   loop:  one row per block, two passes over memory: a running max with a sum rescaled to it (online
//          softmax), then the write.
#include "common.cuh"
#include "rows.cuh"

struct RowWindow {
    int first, limit;  // keys first..limit-1 are allowed
    __device__ __forceinline__ RowWindow(i64 row, int C, int causal, int window, int T_, int S_) {
        first = 0;
        limit = C;
        if (causal || window) {
            const int i = (int)(row % T_) + (S_ - T_);
            if (causal) limit = min(C, i + 1);
            if (window) first = max(0, i - window + 1);
        }
    }
};

template <typename T, int VEC, int E, bool WARP>
__device__ __forceinline__ void softmax_fwd_regs(const T* __restrict__ x, T* __restrict__ y, i64 rows, int C,
                                                 double scale_, const float* __restrict__ mask, int causal,
                                                 int window, int T_, int S_, int log_out) {
    typedef typename acc<T>::type A;
    constexpr int NV = E / VEC;
    __shared__ A scratch[32];
    const RowThread<WARP> th(C / VEC);
    const i64 row = th.row;
    if (row >= rows) return;  // (warp layout: the whole warp; block layout: never, grid = rows)
    const RowWindow win(row, C, causal, window, T_, S_);
    const int nvec = th.nvec;
    const T* xr = x + row * C;
    const float* mr = mask ? mask + row * C : nullptr;
    const A scale = (A)scale_;
    A v[NV][VEC];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int c0 = th.vec(k) * VEC;
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[k][i] = neg_inf<A>();
        // Only vectors that hold an allowed key are read (a causal row reads its first i + 1 keys).
        if (c0 < nvec * VEC && c0 < win.limit && c0 + VEC > win.first) {
            Frag<T, VEC> f;
            f.load(xr + c0);
            A t[VEC], m[VEC];
            f.get(t);
            if (mr) load_vals<VEC>(mr + c0, m);
#pragma unroll
            for (int i = 0; i < VEC; ++i)
                if (c0 + i >= win.first && c0 + i < win.limit) v[k][i] = t[i] * scale + (mr ? m[i] : (A)0);
        }
    }
    A mx = neg_inf<A>();
#pragma unroll
    for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int i = 0; i < VEC; ++i) mx = fmx(mx, v[k][i]);
    mx = row_max<WARP>(mx, scratch);
    T* yr = y + row * C;
    if (mx == neg_inf<A>()) {  // nothing allowed (or every score -inf): NaN, as 0/0 in backend/cpu/softmax.py
        store_row<A, NV, VEC>(yr, th, [](int, int, A* t) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) t[i] = quiet_nan<A>();
        });
        return;  // (uniform: every thread of the row saw the same max)
    }
    A s = 0;
#pragma unroll
    for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const A e = fast_exp(v[k][i] - mx);  // 0 for excluded keys
            s += e;
            if (!log_out) v[k][i] = e;
        }
    const A total = row_sum<WARP>(s, scratch);
    const A inv = (A)1 / total, log_total = flog(total);
    store_row<A, NV, VEC>(yr, th, [&](int k, int, A* t) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) t[i] = log_out ? v[k][i] - mx - log_total : v[k][i] * inv;
    });
}

template <typename T, int VEC>
__device__ __forceinline__ void softmax_fwd_loop(const T* __restrict__ x, T* __restrict__ y, i64 rows, int C,
                                                 double scale_, const float* __restrict__ mask, int causal,
                                                 int window, int T_, int S_, int log_out) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const RowWindow win(row, C, causal, window, T_, S_);
    const int nvec = C / VEC;
    const T* xr = x + row * C;
    const float* mr = mask ? mask + row * C : nullptr;
    const A scale = (A)scale_;
    // Vectors first_v..end_v-1 hold the allowed keys.
    const int first_v = win.first / VEC, end_v = min(nvec, (win.limit + VEC - 1) / VEC);
    A m = neg_inf<A>(), s = 0;  // a running max and the sum of exps rescaled to it
#pragma unroll 4
    for (int vi = first_v + threadIdx.x; vi < end_v; vi += blockDim.x) {
        A t[VEC], mk[VEC];
        load_vals<VEC>(xr + (i64)vi * VEC, t);
        if (mr) load_vals<VEC>(mr + (i64)vi * VEC, mk);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int c = vi * VEC + i;
            if (c < win.first || c >= win.limit) continue;
            const A val = t[i] * scale + (mr ? mk[i] : (A)0);
            if (val > m) {
                s = (m == neg_inf<A>() ? (A)0 : s * fast_exp(m - val)) + 1;
                m = val;
            } else if (val != neg_inf<A>()) {
                s += fast_exp(val - m);  // (NaN scores make the sum NaN: the row comes out NaN)
            }
        }
    }
    const A mx = block_max(m, scratch);
    s = (m == neg_inf<A>()) ? s : s * fast_exp(m - mx);  // (s is 0, or NaN after NaN scores)
    const A total = block_sum(s, scratch);
    const bool empty = mx == neg_inf<A>();
    const A inv = (A)1 / total, log_total = flog(total);
    T* yr = y + row * C;
#pragma unroll 4
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
        A out[VEC];
        const bool any = vi * VEC < win.limit && vi * VEC + VEC > win.first;
        A t[VEC], mk[VEC];
        if (!empty && any) {
            load_vals<VEC>(xr + (i64)vi * VEC, t);
            if (mr) load_vals<VEC>(mr + (i64)vi * VEC, mk);
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int c = vi * VEC + i;
            if (empty) out[i] = quiet_nan<A>();
            else if (c < win.first || c >= win.limit) out[i] = log_out ? neg_inf<A>() : (A)0;
            else {
                const A val = t[i] * scale + (mr ? mk[i] : (A)0);
                out[i] = log_out ? val - mx - log_total : fast_exp(val - mx) * inv;
            }
        }
        store_vals<VEC>(yr + (i64)vi * VEC, out);
    }
}

// Backward of y = softmax(x * scale): dx = scale * y * (g - sum(g * y)); of y = log_softmax(x):
// dx = g - exp(y) * sum(g) (log_mode). softmax_bwd_sum adds the VEC values' terms of the row's sum to s,
// softmax_bwd_dx gives their dx.
template <int VEC, typename A>
__device__ __forceinline__ void softmax_bwd_sum(A& s, const A* y, const A* g, int log_mode) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) s += log_mode ? g[i] : y[i] * g[i];
}
template <int VEC, typename A>
__device__ __forceinline__ void softmax_bwd_dx(A* dx, const A* y, const A* g, A s, A scale, int log_mode) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) dx[i] = log_mode ? g[i] - fast_exp(y[i]) * s : y[i] * (g[i] - s) * scale;
}

template <typename T, int VEC, int E, bool WARP>
__device__ __forceinline__ void softmax_bwd_regs(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                                 i64 rows, int C, double scale_, int log_mode) {
    typedef typename acc<T>::type A;
    constexpr int NV = E / VEC;
    __shared__ A scratch[32];
    const RowThread<WARP> th(C / VEC);
    if (th.row >= rows) return;
    Frag<T, VEC> yf[NV], gf[NV];
    load_row(yf, y + th.row * C, th);
    load_row(gf, g + th.row * C, th);
    A s = 0;
    for_each_slot<A>(yf, gf, th, [&](int, int, const A* yv, const A* gv) {
        softmax_bwd_sum<VEC>(s, yv, gv, log_mode);
    });
    s = row_sum<WARP>(s, scratch);
    const A scale = (A)scale_;
    T* dxr = dx + th.row * C;
    for_each_slot<A>(yf, gf, th, [&](int, int v, const A* yv, const A* gv) {
        A d[VEC];
        softmax_bwd_dx<VEC>(d, yv, gv, s, scale, log_mode);
        store_vals<VEC>(dxr + (i64)v * VEC, d);
    });
}

template <typename T, int VEC>
__device__ __forceinline__ void softmax_bwd_loop(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                                 i64 rows, int C, double scale_, int log_mode) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const int nvec = C / VEC;
    const T *yr = y + row * C, *gr = g + row * C;
    A s = 0;
#pragma unroll 4
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
        A yv[VEC], gv[VEC];
        load_vals<VEC>(yr + (i64)vi * VEC, yv);
        load_vals<VEC>(gr + (i64)vi * VEC, gv);
        softmax_bwd_sum<VEC>(s, yv, gv, log_mode);
    }
    s = block_sum(s, scratch);
    const A scale = (A)scale_;
    T* dxr = dx + row * C;
#pragma unroll 4
    for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
        A yv[VEC], gv[VEC], d[VEC];
        load_vals<VEC>(yr + (i64)vi * VEC, yv);
        load_vals<VEC>(gr + (i64)vi * VEC, gv);
        softmax_bwd_dx<VEC>(d, yv, gv, s, scale, log_mode);
        store_vals<VEC>(dxr + (i64)vi * VEC, d);
    }
}

// Values a thread holds in registers (rows.py's SOFTMAX_E must match).
#define SOFTMAX_WARP_E 32
#define SOFTMAX_BLOCK_E 16

#define SOFTMAX_FWD_ARGS(T) const T* x, T* y, i64 rows, int C, double scale, const float* mask, int causal, \
                            int window, int T_, int S_, int log_out
#define SOFTMAX_FWD_CALL x, y, rows, C, scale, mask, causal, window, T_, S_, log_out
#define SOFTMAX_BWD_ARGS(T) const T* y, const T* g, T* dx, i64 rows, int C, double scale, int log_mode
#define SOFTMAX_KERNELS(NAME, T, V, VEC) \
    extern "C" __global__ void __launch_bounds__(256) softmax_fwd_warp_##V##_##NAME(SOFTMAX_FWD_ARGS(T)) { \
        softmax_fwd_regs<T, VEC, SOFTMAX_WARP_E, true>(SOFTMAX_FWD_CALL); } \
    extern "C" __global__ void __launch_bounds__(1024) softmax_fwd_block_##V##_##NAME(SOFTMAX_FWD_ARGS(T)) { \
        softmax_fwd_regs<T, VEC, SOFTMAX_BLOCK_E, false>(SOFTMAX_FWD_CALL); } \
    extern "C" __global__ void __launch_bounds__(1024) softmax_fwd_loop_##V##_##NAME(SOFTMAX_FWD_ARGS(T)) { \
        softmax_fwd_loop<T, VEC>(SOFTMAX_FWD_CALL); } \
    extern "C" __global__ void __launch_bounds__(256) softmax_bwd_warp_##V##_##NAME(SOFTMAX_BWD_ARGS(T)) { \
        softmax_bwd_regs<T, VEC, SOFTMAX_WARP_E, true>(y, g, dx, rows, C, scale, log_mode); } \
    extern "C" __global__ void __launch_bounds__(1024) softmax_bwd_block_##V##_##NAME(SOFTMAX_BWD_ARGS(T)) { \
        softmax_bwd_regs<T, VEC, SOFTMAX_BLOCK_E, false>(y, g, dx, rows, C, scale, log_mode); } \
    extern "C" __global__ void __launch_bounds__(1024) softmax_bwd_loop_##V##_##NAME(SOFTMAX_BWD_ARGS(T)) { \
        softmax_bwd_loop<T, VEC>(y, g, dx, rows, C, scale, log_mode); }
#define SOFTMAX(NAME, T) SOFTMAX_KERNELS(NAME, T, v, vec_width<T>::value) SOFTMAX_KERNELS(NAME, T, s, 1)
FOR_FLOAT_TYPES(SOFTMAX)
