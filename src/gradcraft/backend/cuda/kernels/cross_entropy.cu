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
//
// Built for bandwidth (a (16384, 50304) bf16 row block is 1.65 GB): cross_entropy_v_* move 16 bytes
// per access (VEC = 8 bf16/f16, 4 float, 2 double; the launcher picks them when width is a multiple of
// VEC and logits and dlogits are 16-byte aligned), cross_entropy_s_* one value (any width or address).
// Pass 1 keeps CE_UNROLL independent loads in flight per thread and an online max / sum of
// exponentials in registers (one rescale per batch of CE_UNROLL * VEC values, not per value), then one
// block reduction. The classes [0, C) are whole vectors below VEC * (C / VEC) plus a scalar tail of
// fewer than VEC values (C = 50257 is odd). Pass 2 (dlogits) re-reads the row (mostly from L2: two
// blocks of CE_THREADS an SM keep ~26 MB of rows in flight), and writes it with streaming 16-byte
// stores; the boundary vector and the padding [C, width) go value by value (zeros past C).
// float math uses the SFU's exp2 (ex2.approx, with a log2(e) pre-multiply; relative error ~1e-7);
// double keeps exp().
#include "common.cuh"

#define CE_THREADS 512  // the most threads a row gets (the launcher's cap: keep equal): 2 blocks an SM
#define CE_UNROLL 4     // 16-byte loads in flight per thread

// exp(v - m) as ce_exp(v, ce_shift(m)).
__device__ __forceinline__ float ce_shift(float m) { return m * 1.4426950408889634f; }
__device__ __forceinline__ double ce_shift(double m) { return m; }
__device__ __forceinline__ float ce_exp(float v, float shift) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(fmaf(v, 1.4426950408889634f, -shift)));
    return y;
}
__device__ __forceinline__ double ce_exp(double v, double shift) { return exp(v - shift); }

// 16-byte loads: pass 1 through the read-only path (the row stays in L2 for pass 2), pass 2 as a last
// use (evict first). Stores stream (evict first: 1.65 GB of dlogits should not push the rows out).
template <int PASS> __device__ __forceinline__ u32x4 ce_load16(const void* p) {
    u32x4 r;
    if constexpr (PASS == 1)
        asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.a), "=r"(r.b), "=r"(r.c), "=r"(r.d) : "l"(p));
    else
        asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.a), "=r"(r.b), "=r"(r.c), "=r"(r.d) : "l"(p));
    return r;
}
__device__ __forceinline__ void ce_store16(void* p, const u32x4& r) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(r.a), "r"(r.b), "r"(r.c), "r"(r.d)
                 : "memory");
}

// Two floats as packed 16-bit values (lo in the low half), rounded to nearest even.
template <typename T> __device__ __forceinline__ u32 ce_pack2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    u32 r;
    if constexpr (same_type<T, bf16>::value) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (u32)from_float<T>(lo).bits | ((u32)from_float<T>(hi).bits << 16);
#endif
}
// One 16-byte word of T from VEC accumulator values.
template <typename T, typename A> __device__ __forceinline__ u32x4 ce_pack16(const A* d) {
    if constexpr (same_type<T, bf16>::value || same_type<T, f16>::value) {
        u32x4 r;
        r.a = ce_pack2<T>(d[0], d[1]);
        r.b = ce_pack2<T>(d[2], d[3]);
        r.c = ce_pack2<T>(d[4], d[5]);
        r.d = ce_pack2<T>(d[6], d[7]);
        return r;
    } else {
        return pack16<T>(d);
    }
}

// VEC values of dlogits at p: one rounded value, or a streaming 16-byte store.
template <typename T, int VEC, typename A> __device__ __forceinline__ void ce_store(T* p, const A* d) {
    if constexpr (VEC == 1) *p = store<T>(d[0]);
    else ce_store16(p, ce_pack16<T>(d));
}

// A batch of a thread's vectors: base, base + bs, ... (CE_UNROLL of them, those below nv), loaded all
// first, so that CE_UNROLL loads are in flight (PASS: ce_load16's cache hint); each(fn) calls
// fn(u, values) for every loaded vector u.
template <typename T, int VEC> struct CEBatch {
    Frag<T, VEC> f[CE_UNROLL];
    bool ok[CE_UNROLL];
    template <int PASS> __device__ __forceinline__ void load(const T* xr, int base, int bs, int nv) {
#pragma unroll
        for (int u = 0; u < CE_UNROLL; ++u) {
            const int i = base + u * bs;
            ok[u] = i < nv;
            if (ok[u]) {
                if constexpr (VEC == 1) f[u].raw = xr[i];
                else f[u].raw = ce_load16<PASS>(xr + (i64)i * VEC);
            }
        }
    }
    template <typename A, typename Fn> __device__ __forceinline__ void each(Fn fn) const {
#pragma unroll
        for (int u = 0; u < CE_UNROLL; ++u) {
            if (ok[u]) {
                A x[VEC];
                f[u].get(x);
                fn(u, x);
            }
        }
    }
};

// LT: the type of the losses and of g (T, or float for half logits: _f32loss kernels). VEC: values per
// access (16 / sizeof(T), or 1).
template <typename T, typename LT, int VEC>
__device__ __forceinline__ void cross_entropy_body(const T* logits, const i64* target, const LT* g, LT* loss,
                                                   T* dlogits, int C, int width, i64 ignore_index,
                                                   double smoothing_, double grad_scale) {
    typedef typename acc<T>::type A;
    static_assert(VEC == 1 || VEC * sizeof(T) == 16, "one value or 16 bytes an access");
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const T* xr = logits + row * (i64)width;
    const i64 t = target[row];
    const A ls = (A)smoothing_;
    const int tid = threadIdx.x, bs = blockDim.x;
    const int nv = C / VEC;  // whole vectors of classes
    const int c0 = nv * VEC;  // the scalar tail [c0, C): fewer than VEC values
    // The target's logit, read before any thread writes: dlogits may be the logits' own buffer (the
    // linear cross-entropy writes each chunk's gradient in place of its logits).
    const A x_target = (loss && tid == 0 && t >= 0 && t < C) ? (A)to_float(xr[t]) : (A)0;

    // Pass 1: per thread, the running max m, the sum s of exp(x - m) and the plain sum (smoothing).
    A m = neg_inf<A>(), s = 0, sum_x = 0;
    for (int base = tid; base < nv; base += CE_UNROLL * bs) {
        CEBatch<T, VEC> batch;
        batch.template load<1>(xr, base, bs, nv);
        A mb = m;
        batch.template each<A>([&](int, const A* x) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) mb = fmx(mb, x[k]);  // (NaN is skipped here, kept by s below)
        });
        if (mb > m) {  // m = -inf: s is 0 and stays 0
            s *= ce_exp(m, ce_shift(mb));
            m = mb;
        }
        const A sh = ce_shift(m == neg_inf<A>() ? (A)0 : m);  // (m = -inf: every value so far is -inf)
        batch.template each<A>([&](int, const A* x) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                s += ce_exp(x[k], sh);
                sum_x += x[k];
            }
        });
    }
    if (tid < C - c0) {  // the scalar tail (vector kernels only)
        const A x = (A)to_float(xr[c0 + tid]);
        if (x > m) {
            s *= ce_exp(m, ce_shift(x));
            m = x;
        }
        s += ce_exp(x, ce_shift(m == neg_inf<A>() ? (A)0 : m));
        sum_x += x;
    }
    const A row_max = block_max(m, scratch);
    // (s * 0: a NaN s stays NaN; an all -inf row has row_max -inf and no finite rescale)
    s = (m == neg_inf<A>()) ? s * (A)0 : s * ce_exp(m, ce_shift(row_max));
    const A lse = row_max + flog(block_sum(s, scratch));
    if (ls != (A)0) sum_x = block_sum(sum_x, scratch);
    const bool valid = t != ignore_index;
    const bool in_range = t >= 0 && t < C;
    if (loss && tid == 0) {
        A out = 0;
        if (valid && !in_range) out = quiet_nan<A>();
        else if (valid) {
            out = -(x_target - lse);
            if (ls != (A)0) out = ((A)1 - ls) * out - ls * (sum_x / (A)C - lse);
        }
        loss[row] = store<LT>(out);
    }
    if (dlogits) {
        // g * valid, not a branch: a NaN g (a mean over no valid rows) stays NaN, as in backend/cpu/cross_entropy.py
        A scale = (A)grad_scale * (g ? (A)to_float(g[row]) : (A)1) * (valid ? (A)1 : (A)0);
        if (valid && !in_range) scale = quiet_nan<A>();
        const A hit = (A)1 - ls, floor_ = ls / (A)C;
        const int tt = (valid && in_range) ? (int)t : -1;
        const A sh = ce_shift(lse);
        T* dr = dlogits + row * (i64)width;
        for (int base = tid; base < nv; base += CE_UNROLL * bs) {
            CEBatch<T, VEC> batch;
            batch.template load<2>(xr, base, bs, nv);
            batch.template each<A>([&](int u, const A* x) {
                const int j0 = (base + u * bs) * VEC;
                A d[VEC];
#pragma unroll
                for (int k = 0; k < VEC; ++k) d[k] = (ce_exp(x[k], sh) - (j0 + k == tt ? hit : (A)0) - floor_) * scale;
                ce_store<T, VEC>(dr + j0, d);
            });
        }
        // The vector holding the tail and the padding past it, value by value (zeros from C on).
        const int nw = width / VEC;  // (width % VEC == 0 in the vector kernels)
        for (int i = nv + tid; i < nw; i += bs) {
            const int j0 = i * VEC;
            A d[VEC];
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const int j = j0 + k;
                d[k] = j < C ? (ce_exp((A)to_float(xr[j]), sh) - (j == tt ? hit : (A)0) - floor_) * scale : (A)0;
            }
            ce_store<T, VEC>(dr + j0, d);
        }
    }
}

#define CROSS_ENTROPY_LT(NAME, T, LT) \
    extern "C" __global__ void __launch_bounds__(CE_THREADS, 2) cross_entropy_v_##NAME( \
        const T* logits, const i64* target, const LT* g, LT* loss, T* dlogits, int C, int width, i64 ignore_index, \
        double smoothing, double grad_scale) { \
        cross_entropy_body<T, LT, vec_width<T>::value>(logits, target, g, loss, dlogits, C, width, ignore_index, \
                                                       smoothing, grad_scale); } \
    extern "C" __global__ void __launch_bounds__(CE_THREADS, 2) cross_entropy_s_##NAME( \
        const T* logits, const i64* target, const LT* g, LT* loss, T* dlogits, int C, int width, i64 ignore_index, \
        double smoothing, double grad_scale) { \
        cross_entropy_body<T, LT, 1>(logits, target, g, loss, dlogits, C, width, ignore_index, smoothing, \
                                     grad_scale); }
#define CROSS_ENTROPY(NAME, T) CROSS_ENTROPY_LT(NAME, T, T)
FOR_FLOAT_TYPES(CROSS_ENTROPY)
// Half-precision logits, float32 losses (the loss of a bf16 model without a float32 copy of its logits).
CROSS_ENTROPY_LT(bf16_f32loss, bf16, float)
CROSS_ENTROPY_LT(f16_f32loss, f16, float)
