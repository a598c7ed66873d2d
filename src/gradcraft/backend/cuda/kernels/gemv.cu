// Matrix-vector products for decoding: y (R, N) = x (R, K) @ W^T for a weight W (N, K) stored row by
// row (a Linear layer's layout), with few rows R (one to GEMV_MAX_ROWS tokens of a decoding step);
// and norm_linear, the one-row product with the residual add and norm before it and the bias and
// activation after it, in one launch (below).
//
// Why not cuBLAS: at R = 1 the product is a read of W and nothing else, and cuBLAS's GEMM kernels
// take 4-6 us for a 768 x 2304 bf16 weight (3.5 MB: under 1 us at the H200's bandwidth). Here one
// warp computes one output column for every row: its lanes read W's row n in 16-byte words,
// coalesced, several words in flight per lane, and x (a few KB, served from L1) beside them; the
// R dot products are summed across the warp. Each row's sum runs in the same order whatever R is,
// so a token's logits do not depend on which other tokens share its step.
#include "common.cuh"
#include "rows.cuh"
#include "norms.cuh"
#include "activations.cuh"

#define GEMV_MAX_ROWS 8  // as MAX_ROWS in backend/cuda/gemv.py
#ifndef GEMV_UNROLL
#define GEMV_UNROLL 4  // 16-byte words of each W row a lane has in flight
#endif

// One round of a warp's loads of W, as loaded: for each of its O rows, GEMV_UNROLL accesses a lane
// (16-byte words kept as raw bits, or single values at VEC = 1), unpacked only where they are used.
template <typename T, int VEC, int O> using WRound = Frag<T, VEC>[O][GEMV_UNROLL];

// The lane's words of the round that starts at word c0 of each row (c0, c0 + 32, ..., those below
// K / VEC), of the warp's O rows of W, rows n0 + o * ostride (a row at or past N reads row n0 again).
template <typename T, int VEC, int O>
__device__ __forceinline__ void load_round(const T* w, int n0, int ostride, int N, int K, int c0,
                                           WRound<T, VEC, O>& wv) {
    const int words = K / VEC;
#pragma unroll
    for (int o = 0; o < O; ++o) {
        const int n = n0 + o * ostride;
        const T* wr = w + (i64)(n < N ? n : n0) * K;
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; ++u) {
            const int c = c0 + 32 * u;
            if (c < words) wv[o][u].load(wr + (i64)c * VEC);
        }
    }
}

// The warp's dot products of R rows of x (row r at x + r * ldx) with O rows of W, rows n0 + o * ostride
// (a row at or past N reads row n0 again; its sum is not meant to be stored): sums[o][r] on every
// lane. S is x's type: T, or float for a row kept in shared memory (norm_linear). VEC values per access:
// 16 / sizeof(T) where K, ldx and the pointers allow it, else 1. wv holds the first round's words on
// entry (load_round at c0 = lane: the caller issues them as early as it can, norm_linear before its
// prologue); each later round loads all its words first, then does the arithmetic.
template <typename T, int VEC, int O, int RMAX, typename S>
__device__ __forceinline__ void warp_dots(const S* x, i64 ldx, int R, const T* w, int n0, int ostride, int N, int K,
                                          WRound<T, VEC, O>& wv, typename acc<T>::type (&sums)[O][RMAX]) {
    typedef typename acc<T>::type A;
    constexpr int U = GEMV_UNROLL;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 0; o < O; ++o)
#pragma unroll
        for (int r = 0; r < RMAX; ++r) sums[o][r] = 0;
    const int words = K / VEC;
    for (int c0 = lane; c0 < words; c0 += 32 * U) {
        if (c0 != lane) load_round<T, VEC, O>(w, n0, ostride, N, K, c0, wv);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = c0 + 32 * u;
            if (c >= words) break;
            A wu[O][VEC];
#pragma unroll
            for (int o = 0; o < O; ++o) wv[o][u].get(wu[o]);
#pragma unroll
            for (int r = 0; r < RMAX; ++r) {
                if (r >= R) break;
                A xv[VEC];
                load_vals<VEC>(x + r * ldx + (i64)c * VEC, xv);
#pragma unroll
                for (int o = 0; o < O; ++o)
#pragma unroll
                    for (int e = 0; e < VEC; ++e) sums[o][r] += wu[o][e] * xv[e];
            }
        }
    }
#pragma unroll
    for (int o = 0; o < O; ++o)
#pragma unroll
        for (int r = 0; r < RMAX; ++r)
            if (r < R) sums[o][r] = warp_sum(sums[o][r]);
}

// Programmatic dependent launch (common.cuh's pdl_wait, backend/cuda/pdl.py): on sm_90 and later the
// launchers start these kernels with the PDL attribute, so a kernel may begin while the one before it
// in the stream (often the previous product of the step) still runs. Each kernel's first round of W
// loads (the weights: never written by a decoding step's kernels) is issued before pdl_wait(), so
// W's DRAM latency overlaps the previous kernel's tail; everything a previous kernel may write (x,
// the residual, the norm's weights, the bias) is read after it. Write-after-read: before pdl_wait()
// the kernels write nothing (loads into registers only), so they cannot overwrite what the previous
// kernel still reads; every store (y, s_out, the shared row) comes after it. pdl_launch_dependents()
// right after the wait lets the next PDL-launched kernel issue its own W loads while this one
// computes (one kernel ahead: issued before the wait, a whole chain could start at once and hold
// SMs waiting). A warp that leaves early (n0 >= N) waits for nothing and writes nothing; at least one
// warp of every launch waits, so a kernel completes only after the one before it (the chain's order
// is transitive). Launched normally, both calls are no-ops: the results are the same bits either way.

// O: output columns (rows of W) per warp, 1 or 2 (backend/cuda/gemv.py picks by shape).
template <typename T, int VEC, int O>
__device__ void gemv_body(const T* x, i64 ldx, const T* w, T* y, int R, int N, int K) {
    typedef typename acc<T>::type A;
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * O;
    if (n0 >= N) return;  // (a whole warp leaves together: no shuffle below misses a lane)
    WRound<T, VEC, O> wv;
    load_round<T, VEC, O>(w, n0, 1, N, K, lane, wv);
    pdl_wait();  // (PDL, above: x may be the previous kernel's output)
    pdl_launch_dependents();
    A sums[O][GEMV_MAX_ROWS];
    warp_dots<T, VEC, O, GEMV_MAX_ROWS>(x, ldx, R, w, n0, 1, N, K, wv, sums);
    if (lane != 0) return;
#pragma unroll
    for (int o = 0; o < O; ++o)
#pragma unroll
        for (int r = 0; r < GEMV_MAX_ROWS; ++r)
            if (r < R && n0 + o < N) y[(i64)r * N + n0 + o] = store<T>(sums[o][r]);
}

#define GEMV_KERNEL(ACCESS, O, NAME, T, VEC) \
    extern "C" __global__ void gemv_##ACCESS##O##_##NAME(const T* x, i64 ldx, const T* w, T* y, int R, int N, \
                                                        int K) { \
        gemv_body<T, VEC, O>(x, ldx, w, y, R, N, K); }
#define GEMV(NAME, T) \
    GEMV_KERNEL(v, 1, NAME, T, 16 / (int)sizeof(T)) GEMV_KERNEL(v, 2, NAME, T, 16 / (int)sizeof(T)) \
    GEMV_KERNEL(s, 1, NAME, T, 1) GEMV_KERNEL(s, 2, NAME, T, 1)
GEMV(f32, float)
GEMV(bf16, bf16)
GEMV(f16, f16)

// ---------------------------------------------------------------- norm_linear
// One row's linear layer with what surrounds it in a decoding step (backend/cpu/gemv.py is the
// reference; every step rounds to T as the separate kernels do, so the fused chain reads and writes
// the values the unfused one does, up to its own summation order):
//   s = T(x + residual)                  with a residual; block 0 also writes s (the residual stream)
//   n = T(norm(s))                       rms_norm or layer_norm, statistics in float (norms.cuh)
//   h = T(n . W[j]); h = T(h + bias[j]); y = T(act(h))   (act: activations.cuh)
// swiglu: y[j] = T(silu(h[j]) * h[j + N/2]), so the warp of column j also computes column j + N/2.
//
// Every block builds n first, as floats in shared memory (K of them: dynamic shared memory, K up to
// gemv.MAX_K), then its warps compute their columns as gemv_body does, reading n from there. The row
// is a few KB, read from L2 by each block: next to the block's share of W (its warps' rows, 6-24 KB
// for K = 768 in bf16) that costs little, and it saves the separate add and norm kernels' launches (each
// ~2 us of a graph's replay) and round trips through global memory.
// Before building n, each warp issues its first round of W loads into registers (load_round: with
// 16-byte words 2 KB of each of its rows, all of a 768-wide bf16 one), so that W's DRAM latency runs
// alongside the add, the reductions and the barriers instead of after them; warp_dots then starts from
// that round (the same words, the same order of products: the sums are those without the preload). An
// L2 prefetch hint in its place measured no faster than none (3.86 against 3.72 us, llama qkv, warm L2).
enum { NL_NO_NORM, NL_RMS_NORM, NL_LAYER_NORM };
enum { NL_NO_ACT, NL_GELU, NL_GELU_TANH };  // (swiglu: its own kernels, GLU below)

template <typename T> __device__ __forceinline__ float rounded(float v) { return to_float(from_float<T>(v)); }

// VEC floats to shared memory at p (16-byte stores where VEC is a multiple of 4: p is then 16-byte
// aligned, and the row's writes spread over the banks).
template <int VEC> __device__ __forceinline__ void put_floats(float* p, const float* v) {
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int k = 0; k < VEC / 4; ++k) {
            u32x4 q;
            q.a = __float_as_uint(v[4 * k]); q.b = __float_as_uint(v[4 * k + 1]);
            q.c = __float_as_uint(v[4 * k + 2]); q.d = __float_as_uint(v[4 * k + 3]);
            reinterpret_cast<u32x4*>(p)[k] = q;
        }
    } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) p[e] = v[e];
    }
}

// The normalized row n (K floats) into `row`, by the whole block; block 0 writes s to s_out (with a
// residual). Each thread handles vectors v = threadIdx.x + k * blockDim.x in every pass (MemRow's
// order), so only the reductions and the final barrier synchronize.
template <typename T, int VEC>
__device__ __forceinline__ void norm_linear_row(const T* x, const T* res, const T* nw, const T* nb, T* s_out, int K,
                                                double eps, int norm, float* row) {
    __shared__ float scratch[32];
    const int nvec = K / VEC;
    const bool write_s = res && blockIdx.x == 0;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        float t[VEC];
        load_vals<VEC>(x + (i64)v * VEC, t);
        if (res) {
            float r[VEC];
            load_vals<VEC>(res + (i64)v * VEC, r);
#pragma unroll
            for (int e = 0; e < VEC; ++e) t[e] = rounded<T>(t[e] + r[e]);  // what the add kernel writes
            if (write_s) store_vals<VEC>(s_out + (i64)v * VEC, t);
        }
        put_floats<VEC>(row + v * VEC, t);
    }
    if (norm != NL_NO_NORM) {
        float mean, rstd;  // (the reductions' barriers also make the row's writes visible to the block)
        norm_stats(MemRow<VEC, float, float>{row, nvec, scratch}, K, eps, norm == NL_LAYER_NORM, mean, rstd);
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            float t[VEC];
            load_vals<VEC>(row + v * VEC, t);
            norm_apply<T, VEC>(t, nw, nb, 0, (i64)v * VEC, mean, rstd);
#pragma unroll
            for (int e = 0; e < VEC; ++e) t[e] = rounded<T>(t[e]);  // what the norm kernel writes
            put_floats<VEC>(row + v * VEC, t);
        }
    }
    __syncthreads();
}

// O: output columns per warp (1 or 2, as gemv_body); GLU: swiglu, the warp of column j (j < N/2)
// reads W's rows j and j + N/2 (O = 2). N: W's rows; y has N columns, N/2 with GLU.
template <typename T, int VEC, int O, bool GLU>
__device__ void norm_linear_body(const T* x, const T* res, const T* nw, const T* nb, const T* w, const T* bias, T* y,
                                 T* s_out, int N, int K, double eps, int norm, int act) {
    static_assert(!GLU || O == 2, "swiglu takes two rows of W a warp");
    extern __shared__ __align__(16) float row[];
    const int cols = GLU ? N / 2 : N;
    const int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int n0 = GLU ? warp : warp * O, ostride = GLU ? cols : 1;
    WRound<T, VEC, O> wv;  // the first round of W, in flight while the block builds the row
    if (n0 < cols) load_round<T, VEC, O>(w, n0, ostride, N, K, threadIdx.x & 31, wv);
    pdl_wait();  // (PDL, above: x and the residual may be the previous kernel's outputs)
    pdl_launch_dependents();
    norm_linear_row<T, VEC>(x, res, nw, nb, s_out, K, eps, norm, row);
    if (n0 >= cols) return;  // (after the block's barriers; a whole warp leaves together)
    float sums[O][1];
    // Measured on the H200 and left out: a product with a bias alone reading x where it is instead of
    // the row (4.2 against 3.5 us for gpt2's proj), and the norm's weights loaded before the reductions
    // (no faster).
    warp_dots<T, VEC, O, 1>(row, 0, 1, w, n0, ostride, N, K, wv, sums);
    if ((threadIdx.x & 31) != 0) return;
    float h[O];
#pragma unroll
    for (int o = 0; o < O; ++o) {  // as the matmul, the bias add and the activation kernels round
        const int j = n0 + o * (GLU ? cols : 1);
        h[o] = rounded<T>(sums[o][0]);
        if (bias && j < N) h[o] = rounded<T>(h[o] + to_float(bias[j]));
    }
    if constexpr (GLU) {
        y[n0] = store<T>(silu_value(h[0]) * h[1]);
    } else {
#pragma unroll
        for (int o = 0; o < O; ++o)
            if (n0 + o < N) y[n0 + o] = store<T>(act == NL_NO_ACT ? h[o] : gelu_value(h[o], act == NL_GELU_TANH));
    }
}

// The normalized row alone, n = T(norm(T(x + residual))) (and s with a residual), by one block: for
// an output layer too wide for norm_linear's per-block prologue (gemv.py: the GEMV follows), where it
// replaces the separate add and norm kernels, one launch fewer and one pass over the row.
template <typename T, int VEC>
__device__ void norm_row_body(const T* x, const T* res, const T* nw, const T* nb, T* n_out, T* s_out, int K,
                              double eps, int norm) {
    extern __shared__ __align__(16) float row[];
    norm_linear_row<T, VEC>(x, res, nw, nb, s_out, K, eps, norm, row);
    for (int v = threadIdx.x; v < K / VEC; v += blockDim.x) {
        float t[VEC];
        load_vals<VEC>(row + v * VEC, t);
        store_vals<VEC>(n_out + (i64)v * VEC, t);  // (the values are already rounded to T)
    }
}
#define NORM_ROW_KERNEL(ACCESS, NAME, T, VEC) \
    extern "C" __global__ void __launch_bounds__(256) norm_row_##ACCESS##_##NAME( \
        const T* x, const T* res, const T* nw, const T* nb, T* n_out, T* s_out, int K, double eps, int norm) { \
        norm_row_body<T, VEC>(x, res, nw, nb, n_out, s_out, K, eps, norm); }

#define NORM_LINEAR_KERNEL(ACCESS, MODE, NAME, T, VEC, O, GLU) \
    extern "C" __global__ void __launch_bounds__(256) norm_linear_##ACCESS##MODE##_##NAME( \
        const T* x, const T* res, const T* nw, const T* nb, const T* w, const T* bias, T* y, T* s_out, int N, int K, \
        double eps, int norm, int act) { \
        norm_linear_body<T, VEC, O, GLU>(x, res, nw, nb, w, bias, y, s_out, N, K, eps, norm, act); }
#define NORM_LINEAR_ACCESS(ACCESS, NAME, T, VEC) \
    NORM_LINEAR_KERNEL(ACCESS, 1, NAME, T, VEC, 1, false) \
    NORM_LINEAR_KERNEL(ACCESS, 2, NAME, T, VEC, 2, false) \
    NORM_LINEAR_KERNEL(ACCESS, g, NAME, T, VEC, 2, true)
#define NORM_LINEAR(NAME, T) \
    NORM_LINEAR_ACCESS(v, NAME, T, 16 / (int)sizeof(T)) NORM_LINEAR_ACCESS(s, NAME, T, 1) \
    NORM_ROW_KERNEL(v, NAME, T, 16 / (int)sizeof(T)) NORM_ROW_KERNEL(s, NAME, T, 1)
NORM_LINEAR(f32, float)
NORM_LINEAR(bf16, bf16)
NORM_LINEAR(f16, f16)
