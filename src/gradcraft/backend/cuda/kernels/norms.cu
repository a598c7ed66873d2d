// LayerNorm (center = 1) and RMSNorm (center = 0) over rows of F contiguous features, forward and
// backward.
//
// Three layouts, picked by the launcher (norms.py, rows.py) from F; each comes with VEC = 16 / sizeof(T) (16-byte
// loads and stores: F a multiple of VEC, 16-byte aligned pointers) or VEC = 1 (any F and alignment):
//   warp:  one row per warp, the row held in registers (E values a lane): F <= 32 * E;
//   block: one row per block, in registers (E values a thread):           F <= blockDim * E;
//   loop:  one row per block, re-read from memory (L1/L2) for each pass:  any F.
// Weight and bias come in x's dtype (w_acc = 0) or in the accumulator type (w_acc = 1); NULL = absent.
// The backward writes dx and, per block, its rows' weight and bias gradients in the accumulator type
// to partial (G, 2, F): summed in registers over the rows each warp or block visits, then over the
// block's warps in a fixed order. norm_reduce adds the G slices: deterministic, no atomics.
#include "common.cuh"
#include "rows.cuh"
#include "norms.cuh"

// xhat = (x - mean) * rstd and dxhat = g * w (g without a weight) of the VEC values at column j.
template <typename T, int VEC, typename A>
__device__ __forceinline__ void norm_xhat(const A* x, const A* g, const void* w, int w_acc, i64 j, A mean, A rstd,
                                          A* xhat, A* dxhat) {
    A p[VEC];
    if (w) load_param<T, VEC>(w, w_acc, j, p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        xhat[i] = (x[i] - mean) * rstd;
        dxhat[i] = w ? g[i] * p[i] : g[i];
    }
}

// Stores dx = rstd * (dxhat - s1 - xhat * s2) of the VEC values at column j to out (s1 = mean(dxhat) for
// LayerNorm, 0 for RMSNorm; s2 = mean(dxhat * xhat)).
template <typename T, int VEC, typename A>
__device__ __forceinline__ void norm_store_dx(T* out, const A* x, const A* g, const void* w, int w_acc, i64 j,
                                              A mean, A rstd, A s1, A s2) {
    A xhat[VEC], dxhat[VEC], d[VEC];
    norm_xhat<T, VEC>(x, g, w, w_acc, j, mean, rstd, xhat, dxhat);
#pragma unroll
    for (int i = 0; i < VEC; ++i) d[i] = rstd * (dxhat[i] - s1 - xhat[i] * s2);
    store_vals<VEC>(out, d);
}

// y = (x - mean) * rstd * w + b, row held in registers.
template <typename T, int VEC, int E, bool WARP>
__device__ __forceinline__ void norm_fwd_regs(const T* __restrict__ x, const void* w, const void* b, int w_acc,
                                              T* __restrict__ y, i64 rows, int F, double eps, int center) {
    typedef typename acc<T>::type A;
    constexpr int NV = E / VEC;
    __shared__ A scratch[32];
    const RowThread<WARP> th(F / VEC);
    if (th.row >= rows) return;  // (warp layout: the whole warp; block layout: never, grid = rows)
    Frag<T, VEC> xf[NV];
    load_row(xf, x + th.row * F, th);
    A mean, rstd;
    norm_stats(RegsRow<WARP, NV, T, VEC, A>{xf, th, scratch}, F, eps, center, mean, rstd);
    store_row<A, NV, VEC>(y + th.row * F, th, [&](int k, int v, A* t) {
        xf[k].get(t);
        norm_apply<T, VEC>(t, w, b, w_acc, (i64)v * VEC, mean, rstd);
    });
}

// The same for rows too long for registers: one block per row, three passes over the row.
template <typename T, int VEC>
__device__ __forceinline__ void norm_fwd_loop(const T* __restrict__ x, const void* w, const void* b, int w_acc,
                                              T* __restrict__ y, i64 rows, int F, double eps, int center) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const int nvec = F / VEC;
    const T* xr = x + row * F;
    A mean, rstd;
    norm_stats(MemRow<VEC, T, A>{xr, nvec, scratch}, F, eps, center, mean, rstd);
    T* yr = y + row * F;
#pragma unroll 4
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        A t[VEC];
        load_vals<VEC>(xr + (i64)v * VEC, t);
        norm_apply<T, VEC>(t, w, b, w_acc, (i64)v * VEC, mean, rstd);
        store_vals<VEC>(yr + (i64)v * VEC, t);
    }
}

// Backward, rows in registers. A warp (WARP) or block walks rows first, first + step, ...:
//   xhat = (x - mean) * rstd, dxhat = g * w,
//   dx = rstd * (dxhat - mean(dxhat) [LayerNorm only] - xhat * mean(dxhat * xhat)),
// and keeps its columns' sums of g * xhat (weight) and g (bias) in registers.
template <typename T, int VEC, int E, bool WARP>
__device__ __forceinline__ void norm_bwd_regs(const T* __restrict__ x, const void* w, int w_acc,
                                              const T* __restrict__ g, T* __restrict__ dx,
                                              typename acc<T>::type* __restrict__ partial, i64 rows, int F, double eps,
                                              int center) {
    typedef typename acc<T>::type A;
    constexpr int NV = E / VEC;
    __shared__ A scratch[32];
    const RowThread<WARP> th(F / VEC);
    const int lane = th.lane, nvec = th.nvec;
    const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5;
    const i64 step = WARP ? (i64)gridDim.x * warps : (i64)gridDim.x;
    A dw[NV][VEC], db[NV][VEC];
#pragma unroll
    for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int i = 0; i < VEC; ++i) { dw[k][i] = 0; db[k][i] = 0; }

    for (i64 row = th.row; row < rows; row += step) {  // (uniform over the warp or the block)
        Frag<T, VEC> xf[NV], gf[NV];
        load_row(xf, x + row * F, th);
        load_row(gf, g + row * F, th);
        A mean, rstd;
        norm_stats(RegsRow<WARP, NV, T, VEC, A>{xf, th, scratch}, F, eps, center, mean, rstd);
        A s1 = 0, s2 = 0;
        for_each_slot<A>(xf, gf, th, [&](int k, int v, const A* t, const A* gv) {
            A xhat[VEC], dxhat[VEC];
            norm_xhat<T, VEC>(t, gv, w, w_acc, (i64)v * VEC, mean, rstd, xhat, dxhat);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                s1 += dxhat[i];
                s2 += dxhat[i] * xhat[i];
                dw[k][i] += gv[i] * xhat[i];
                db[k][i] += gv[i];
            }
        });
        s1 = center ? row_sum<WARP>(s1, scratch) / (A)F : (A)0;
        s2 = row_sum<WARP>(s2, scratch) / (A)F;
        T* dxr = dx + row * F;
        for_each_slot<A>(xf, gf, th, [&](int, int v, const A* t, const A* gv) {
            norm_store_dx<T, VEC>(dxr + (i64)v * VEC, t, gv, w, w_acc, (i64)v * VEC, mean, rstd, s1, s2);
        });
    }

    A* out = partial + (i64)blockIdx.x * 2 * F;
    if constexpr (WARP) {
        // The block's warps add their sums in warp order (every warp holds every column).
        __shared__ A red[32 * E];  // F <= 32 * E here
        for (int pass = 0; pass < (center ? 2 : 1); ++pass) {
            for (int wi = 0; wi < warps; ++wi) {
                if (warp == wi) {
#pragma unroll
                    for (int k = 0; k < NV; ++k) {
                        const int v = k * 32 + lane;
                        if (v < nvec) {
#pragma unroll
                            for (int i = 0; i < VEC; ++i) {
                                const A add = pass ? db[k][i] : dw[k][i];
                                red[v * VEC + i] = wi ? red[v * VEC + i] + add : add;
                            }
                        }
                    }
                }
                __syncthreads();
            }
            for (int j = threadIdx.x; j < F; j += blockDim.x) out[pass * F + j] = red[j];
            __syncthreads();  // (red is written again by the next pass)
        }
    } else {
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const int v = th.vec(k);
            if (v < nvec) {
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    out[v * VEC + i] = dw[k][i];
                    if (center) out[F + v * VEC + i] = db[k][i];
                }
            }
        }
    }
}

// Backward for rows too long for registers: one block per row; each thread owns the same columns in
// every pass, so its running weight/bias sums live in its block's slice of partial.
template <typename T, int VEC>
__device__ __forceinline__ void norm_bwd_loop(const T* __restrict__ x, const void* w, int w_acc,
                                              const T* __restrict__ g, T* __restrict__ dx,
                                              typename acc<T>::type* __restrict__ partial, i64 rows, int F, double eps,
                                              int center) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const int nvec = F / VEC;
    A* out = partial + (i64)blockIdx.x * 2 * F;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x)
#pragma unroll
        for (int i = 0; i < VEC; ++i) { out[v * VEC + i] = 0; out[F + v * VEC + i] = 0; }
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * F, *gr = g + row * F;
        A mean, rstd;
        norm_stats(MemRow<VEC, T, A>{xr, nvec, scratch}, F, eps, center, mean, rstd);
        A s1 = 0, s2 = 0;
#pragma unroll 2
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            A t[VEC], gv[VEC], xhat[VEC], dxhat[VEC];
            load_vals<VEC>(xr + (i64)v * VEC, t);
            load_vals<VEC>(gr + (i64)v * VEC, gv);
            norm_xhat<T, VEC>(t, gv, w, w_acc, (i64)v * VEC, mean, rstd, xhat, dxhat);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                s1 += dxhat[i];
                s2 += dxhat[i] * xhat[i];
                out[v * VEC + i] += gv[i] * xhat[i];
                if (center) out[F + v * VEC + i] += gv[i];
            }
        }
        s1 = center ? block_sum(s1, scratch) / (A)F : (A)0;
        s2 = block_sum(s2, scratch) / (A)F;
        T* dxr = dx + row * F;
#pragma unroll 2
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            A t[VEC], gv[VEC];
            load_vals<VEC>(xr + (i64)v * VEC, t);
            load_vals<VEC>(gr + (i64)v * VEC, gv);
            norm_store_dx<T, VEC>(dxr + (i64)v * VEC, t, gv, w, w_acc, (i64)v * VEC, mean, rstd, s1, s2);
        }
    }
}

// dw[j] (j < F) and db[j - F] (F <= j < 2F; only with db) = sum over the G slices of partial (G, 2, F).
// Blocks of 32 columns x (blockDim / 32) groups of slices; the groups' sums are added in group order.
template <typename T>
__device__ __forceinline__ void norm_reduce_body(const typename acc<T>::type* __restrict__ partial, T* dw, T* db,
                                                 int G, int F) {
    typedef typename acc<T>::type A;
    __shared__ A part[32][33];
    const int lane = threadIdx.x & 31, group = threadIdx.x >> 5, groups = blockDim.x >> 5;
    const i64 j = (i64)blockIdx.x * 32 + lane;
    const i64 cols = db ? 2 * (i64)F : (i64)F;
    A s = 0;
    if (j < cols) {
#pragma unroll 8
        for (int r = group; r < G; r += groups) s += partial[(i64)r * 2 * F + j];
    }
    part[group][lane] = s;
    __syncthreads();
    if (group == 0 && j < cols) {
        A t = 0;
        for (int q = 0; q < groups; ++q) t += part[q][lane];
        if (j < F) dw[j] = store<T>(t);
        else db[j - F] = store<T>(t);
    }
}

// Elements a thread holds in registers: the warp layouts take rows up to 32 * E, the block layouts
// up to blockDim * E (rows.py's NORM_* constants must match).
#define NORM_FWD_WARP_E 32
#define NORM_FWD_BLOCK_E 16
#define NORM_BWD_WARP_E 32
#define NORM_BWD_BLOCK_E 16

#define NORM_FWD_ARGS(T) const T* x, const void* w, const void* b, int w_acc, T* y, i64 rows, int F, double eps, \
                         int center
#define NORM_BWD_ARGS(T) const T* x, const void* w, int w_acc, const T* g, T* dx, acc<T>::type* partial, i64 rows, \
                         int F, double eps, int center
#define NORM_KERNELS(NAME, T, V, VEC) \
    extern "C" __global__ void __launch_bounds__(256) norm_fwd_warp_##V##_##NAME(NORM_FWD_ARGS(T)) { \
        norm_fwd_regs<T, VEC, NORM_FWD_WARP_E, true>(x, w, b, w_acc, y, rows, F, eps, center); } \
    extern "C" __global__ void __launch_bounds__(1024) norm_fwd_block_##V##_##NAME(NORM_FWD_ARGS(T)) { \
        norm_fwd_regs<T, VEC, NORM_FWD_BLOCK_E, false>(x, w, b, w_acc, y, rows, F, eps, center); } \
    extern "C" __global__ void __launch_bounds__(1024) norm_fwd_loop_##V##_##NAME(NORM_FWD_ARGS(T)) { \
        norm_fwd_loop<T, VEC>(x, w, b, w_acc, y, rows, F, eps, center); } \
    extern "C" __global__ void __launch_bounds__(128) norm_bwd_warp_##V##_##NAME(NORM_BWD_ARGS(T)) { \
        norm_bwd_regs<T, VEC, NORM_BWD_WARP_E, true>(x, w, w_acc, g, dx, partial, rows, F, eps, center); } \
    extern "C" __global__ void __launch_bounds__(512) norm_bwd_block_##V##_##NAME(NORM_BWD_ARGS(T)) { \
        norm_bwd_regs<T, VEC, NORM_BWD_BLOCK_E, false>(x, w, w_acc, g, dx, partial, rows, F, eps, center); } \
    extern "C" __global__ void __launch_bounds__(1024) norm_bwd_loop_##V##_##NAME(NORM_BWD_ARGS(T)) { \
        norm_bwd_loop<T, VEC>(x, w, w_acc, g, dx, partial, rows, F, eps, center); }
#define NORMS(NAME, T) \
    NORM_KERNELS(NAME, T, v, vec_width<T>::value) \
    NORM_KERNELS(NAME, T, s, 1) \
    extern "C" __global__ void __launch_bounds__(1024) norm_reduce_##NAME(const acc<T>::type* partial, T* dw, T* db, \
                                                                          int G, int F) { \
        norm_reduce_body<T>(partial, dw, db, G, F); }
FOR_FLOAT_TYPES(NORMS)
