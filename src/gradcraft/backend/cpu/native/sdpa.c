/* Scaled dot-product attention on the CPU, forward and backward, float32: the `sdpa` kernels of
   backend/cpu/sdpa.py in one pass per head instead of six batched BLAS products and the
   NumPy passes of the softmax between them.

   Why not BLAS: a training step's attention is many small products (a head of the `demo` model is
   128 x 32 x 128), where OpenBLAS's per-call overhead and its small-matrix kernels leave most of
   the core idle, and a causal product computes its masked upper triangle only to throw it away.
   Here each product skips the key blocks a query block cannot see (about half the work when
   causal), and the softmax runs on rows that are still in cache.

   The products run on padded copies (rows a multiple of MR, columns of NB): every tile is a full
   MR x NB block, computed in registers by one small kernel written with GCC's vector extension.
   Entries of the weights that a query cannot see are exact zeros within the ranges the products
   read, so the products may run over a few of them at a block's edge.

   A call handles units lo..hi of B * Hkv (batch, key/value head): the unit's G = H / Hkv query
   heads share its keys, and its key and value gradients are summed over them, so units are
   independent and Python can hand ranges of them to several threads. `scratch` holds
   `sdpa_scratch_floats` floats for the calling thread. */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vector_math.h"

typedef int64_t i64;
/* One register of floats: 16 with AVX-512, 8 with AVX, 4 elsewhere (SSE, NEON). A wider type than
   the registers would be split by the compiler into slow piecewise code (measured 14x slower on AVX2). */
#if defined(__AVX512F__)
#define VEC 16
#elif defined(__AVX__)
#define VEC 8
#else
#define VEC 4
#endif
typedef float vf __attribute__((vector_size(4 * VEC)));

enum { MR = 4, NB = 2 * VEC }; /* a tile: MR rows x NB columns (two vectors): 8 accumulators */

static inline i64 round_up(i64 n, i64 m) { return (n + m - 1) / m * m; }
static inline i64 min_i(i64 a, i64 b) { return a < b ? a : b; }
static inline i64 max_i(i64 a, i64 b) { return a > b ? a : b; }

/* C[0:MR, 0:NB] (=, or += when accumulate) sum over k in [kb, ke) of A(r, k) B[k, :], with
   A(r, k) = A[r * rs + k * cs] and B's rows NB-aligned. */
static inline void tile(i64 kb, i64 ke, const float *A, i64 rs, i64 cs, const float *B, i64 ldb, float *C,
                        i64 ldc, int accumulate) {
    vf c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
    const i64 half = NB / 2;
    for (i64 k = kb; k < ke; k++) {
        vf b0 = *(const vf *)(B + k * ldb), b1 = *(const vf *)(B + k * ldb + half);
        const float *a = A + k * cs;
        float a0 = a[0], a1 = a[rs], a2 = a[2 * rs], a3 = a[3 * rs];
        c00 += a0 * b0, c01 += a0 * b1;
        c10 += a1 * b0, c11 += a1 * b1;
        c20 += a2 * b0, c21 += a2 * b1;
        c30 += a3 * b0, c31 += a3 * b1;
    }
    vf *c0 = (vf *)C, *c1 = (vf *)(C + ldc), *c2 = (vf *)(C + 2 * ldc), *c3 = (vf *)(C + 3 * ldc); /* [1]: + half */
    if (accumulate) {
        c0[0] += c00, c0[1] += c01, c1[0] += c10, c1[1] += c11;
        c2[0] += c20, c2[1] += c21, c3[0] += c30, c3[1] += c31;
    } else {
        c0[0] = c00, c0[1] = c01, c1[0] = c10, c1[1] = c11;
        c2[0] = c20, c2[1] = c21, c3[0] = c30, c3[1] = c31;
    }
}

/* C (M x N) = A (M x K) B (K x N), M a multiple of MR, N of NB. Over the causal band, with `off`
   the causal offset (query t sees the keys j <= t + off), a row block [i, i + MR) computes:
   - KEYS_SEEN: its columns are keys (scores), only those up to key i + MR + off;
   - UPPER: its rows are queries and k runs over keys: k stops at key i + MR + off;
   - LOWER: its rows are keys and k runs over queries: k starts at query i - off. */
enum { FULL, KEYS_SEEN, UPPER, LOWER };

static void gemm(i64 M, i64 N, i64 K, const float *A, i64 rs, i64 cs, const float *B, i64 ldb, float *C,
                 i64 ldc, int accumulate, int band, i64 off) {
    for (i64 i = 0; i < M; i += MR) {
        i64 kb = 0, ke = K, n = N;
        if (band == KEYS_SEEN) n = min_i(N, round_up(max_i(0, i + MR + off), NB));
        if (band == UPPER) ke = min_i(K, max_i(0, i + MR + off));
        if (band == LOWER) kb = min_i(K, max_i(0, i - off));
        for (i64 j = 0; j < n; j += NB) tile(kb, ke, A + i * rs, rs, cs, B + j, ldb, C + i * ldc + j, ldc, accumulate);
    }
}

typedef struct {
    i64 T, S, D, Dv, Tp, Sp, Dp, Dvp, off, window;
    int causal;
} Shape;

static Shape shape_of(i64 T, i64 S, i64 D, i64 Dv, int causal, i64 window) {
    Shape s = {T, S, D, Dv, round_up(T, MR), round_up(S, NB), round_up(D, NB), round_up(Dv, NB), S - T, window, causal};
    return s;
}

/* keys query t sees: [first, end) */
static inline i64 row_end(const Shape *s, i64 t) { return s->causal ? min_i(s->S, t + s->off + 1) : s->S; }
static inline i64 row_first(const Shape *s, i64 t) {
    return s->window ? max_i(0, t + s->off - s->window + 1) : 0;
}
/* columns of row t the products may read: the visible ones and up to MR past them */
static inline i64 row_extent(const Shape *s, i64 t) { return s->causal ? min_i(s->Sp, t + s->off + MR) : s->Sp; }

i64 sdpa_scratch_floats(i64 T, i64 S, i64 D, i64 Dv) {
    Shape s = shape_of(T, S, D, Dv, 0, 0);
    i64 wide = s.Dp > s.Dvp ? s.Dp : s.Dvp;
    return 2 * s.Tp * s.Sp              /* scores / weights, and their gradient */
           + s.Dp * s.Sp + s.Dvp * s.Sp /* K^T, V^T */
           + 2 * s.Sp * s.Dp + 2 * s.Sp * s.Dvp /* K, V padded; dK, dV sums */
           + 3 * s.Tp * wide               /* q, the output gradient, a product's result */
           + s.Tp + 64;                    /* row sums; room to align */
}

static float *aligned(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* dst (rows x ld, zero padded) = src (n x cols, rows `stride` apart) * factor, rows >= n zero */
static void pad_rows(float *dst, i64 rows, i64 ld, const float *src, i64 stride, i64 n, i64 cols, float factor) {
    for (i64 r = 0; r < rows; r++) {
        float *d = dst + r * ld;
        if (r < n) {
#pragma omp simd
            for (i64 c = 0; c < cols; c++) d[c] = src[r * stride + c] * factor;
        }
        for (i64 c = r < n ? cols : 0; c < ld; c++) d[c] = 0.0f;
    }
}

/* dst (cols x ld) = src (n x cols, rows `stride` apart)^T, columns >= n zero */
static void pad_transposed(float *dst, i64 ld, const float *src, i64 stride, i64 n, i64 cols) {
    for (i64 c = 0; c < cols; c++) {
        float *d = dst + c * ld;
        for (i64 r = 0; r < n; r++) d[r] = src[r * stride + c];
        for (i64 r = n; r < ld; r++) d[r] = 0.0f;
    }
}

/* The weights of one head in place of its scores: row t's visible entries become exp(s - max) (divided
   by their sum when `normalize`), the rest of its extent 0; sums[t] = the sum. */
static void softmax_rows(const Shape *s, float *P, float *sums, int normalize) {
    for (i64 t = 0; t < s->T; t++) {
        float *p = P + t * s->Sp;
        i64 first = row_first(s, t), end = row_end(s, t), extent = row_extent(s, t);
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (i64 j = first; j < end; j++) m = p[j] > m ? p[j] : m;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (i64 j = first; j < end; j++) {
            p[j] = exp_f(p[j] - m);
            sum += p[j];
        }
        if (normalize) {
            float inv = 1.0f / sum;
#pragma omp simd
            for (i64 j = first; j < end; j++) p[j] *= inv;
        }
        for (i64 j = 0; j < first; j++) p[j] = 0.0f;
        for (i64 j = end; j < extent; j++) p[j] = 0.0f;
        sums[t] = sum;
    }
}

typedef struct {
    float *P, *dP, *Kt, *Vt, *K, *V, *dK, *dV, *Q, *G, *R, *sums;
} Scratch;

static Scratch carve(const Shape *s, float *base) {
    i64 wide = s->Dp > s->Dvp ? s->Dp : s->Dvp;
    float *p = aligned(base);
    Scratch w;
    w.P = p, p += s->Tp * s->Sp;
    w.dP = p, p += s->Tp * s->Sp;
    w.Kt = p, p += s->Dp * s->Sp;
    w.Vt = p, p += s->Dvp * s->Sp;
    w.K = p, p += s->Sp * s->Dp;
    w.V = p, p += s->Sp * s->Dvp;
    w.dK = p, p += s->Sp * s->Dp;
    w.dV = p, p += s->Sp * s->Dvp;
    w.Q = p, p += s->Tp * wide;
    w.G = p, p += s->Tp * wide;
    w.R = p, p += s->Tp * wide;
    w.sums = p;
    return w;
}

/* scores of one head: P = (q scale) K^T over the keys each query block can see */
static void scores(const Shape *s, Scratch *w, const float *q, i64 q_row, float scale) {
    pad_rows(w->Q, s->Tp, s->D, q, q_row, s->T, s->D, scale);
    gemm(s->Tp, s->Sp, s->D, w->Q, s->D, 1, w->Kt, s->Sp, w->P, s->Sp, 0, s->causal ? KEYS_SEEN : FULL, s->off);
}

/* Where head h of batch b starts, and how far apart its rows are, in an input of element strides
   st = (batch, head, row) (the last axis contiguous): q, k, v and g may be views of a fused projection. */
typedef struct {
    const float *base;
    i64 batch, head, row;
} Layout;

static inline const float *head_at(const Layout *a, i64 b, i64 h) { return a->base + b * a->batch + h * a->head; }

static Layout layout(const float *base, const i64 *st) {
    Layout a = {base, st[0], st[1], st[2]};
    return a;
}

/* q (B, H, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) as laid out by `strides` (batch, head, row of
   each, in elements); out (B, H, T, Dv) contiguous. */
void sdpa_f32(const float *q, const float *k, const float *v, const i64 *strides, float *out, i64 Hkv, i64 G,
              i64 T, i64 S, i64 D, i64 Dv, float scale, int causal, i64 window, float *scratch, i64 lo, i64 hi) {
    Layout lq = layout(q, strides), lk = layout(k, strides + 3), lv = layout(v, strides + 6);
    Shape s = shape_of(T, S, D, Dv, causal, window);
    Scratch w = carve(&s, scratch);
    int band = causal ? UPPER : FULL;
    for (i64 u = lo; u < hi; u++) {
        i64 b = u / Hkv, kv_head = u % Hkv;
        pad_transposed(w.Kt, s.Sp, head_at(&lk, b, kv_head), lk.row, S, D);
        pad_rows(w.V, s.Sp, s.Dvp, head_at(&lv, b, kv_head), lv.row, S, Dv, 1.0f);
        for (i64 h = 0; h < G; h++) {
            i64 head = u * G + h;
            scores(&s, &w, head_at(&lq, b, kv_head * G + h), lq.row, scale);
            softmax_rows(&s, w.P, w.sums, 0);
            gemm(s.Tp, s.Dvp, S, w.P, s.Sp, 1, w.V, s.Dvp, w.R, s.Dvp, 0, band, s.off);
            for (i64 t = 0; t < T; t++) {
                float inv = 1.0f / w.sums[t];
                float *o = out + (head * T + t) * Dv;
                const float *r = w.R + t * s.Dvp;
#pragma omp simd
                for (i64 c = 0; c < Dv; c++) o[c] = r[c] * inv;
            }
        }
    }
}

/* With p the weights and g the output's gradient: dv = p^T g; dp = g v^T; ds = p (dp - rowsum(dp p)) scale;
   dq = ds k; dk = ds^T q. The weights are recomputed from q and k, as flash attention does. */
void sdpa_backward_f32(const float *q, const float *k, const float *v, const float *g, const i64 *strides,
                       float *dq, float *dk, float *dv, i64 Hkv, i64 G, i64 T, i64 S, i64 D, i64 Dv, float scale,
                       int causal, i64 window, float *scratch, i64 lo, i64 hi) {
    Layout lq = layout(q, strides), lk = layout(k, strides + 3), lv = layout(v, strides + 6);
    Layout lg = layout(g, strides + 9);
    Shape s = shape_of(T, S, D, Dv, causal, window);
    Scratch w = carve(&s, scratch);
    int upper = causal ? UPPER : FULL, lower = causal ? LOWER : FULL, seen = causal ? KEYS_SEEN : FULL;
    for (i64 u = lo; u < hi; u++) {
        i64 b = u / Hkv, kv_head = u % Hkv;
        const float *ku = head_at(&lk, b, kv_head);
        pad_transposed(w.Kt, s.Sp, ku, lk.row, S, D);
        pad_transposed(w.Vt, s.Sp, head_at(&lv, b, kv_head), lv.row, S, Dv);
        pad_rows(w.K, s.Sp, s.Dp, ku, lk.row, S, D, 1.0f);
        memset(w.dK, 0, sizeof(float) * s.Sp * s.Dp);
        memset(w.dV, 0, sizeof(float) * s.Sp * s.Dvp);
        for (i64 h = 0; h < G; h++) {
            i64 head = u * G + h;
            const float *qh = head_at(&lq, b, kv_head * G + h);
            scores(&s, &w, qh, lq.row, scale);
            softmax_rows(&s, w.P, w.sums, 1);
            pad_rows(w.G, s.Tp, s.Dvp, head_at(&lg, b, kv_head * G + h), lg.row, T, Dv, 1.0f);
            /* dv += p^T g: rows are keys, k runs over the queries that see them */
            gemm(s.Sp, s.Dvp, T, w.P, 1, s.Sp, w.G, s.Dvp, w.dV, s.Dvp, 1, lower, s.off);
            /* dp = g v^T over the keys each query block sees */
            gemm(s.Tp, s.Sp, Dv, w.G, s.Dvp, 1, w.Vt, s.Sp, w.dP, s.Sp, 0, seen, s.off);
            for (i64 t = 0; t < T; t++) {
                float *p = w.P + t * s.Sp, *d = w.dP + t * s.Sp;
                i64 first = row_first(&s, t), end = row_end(&s, t), extent = row_extent(&s, t);
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (i64 j = first; j < end; j++) dot += p[j] * d[j];
#pragma omp simd
                for (i64 j = first; j < end; j++) d[j] = p[j] * (d[j] - dot) * scale;
                for (i64 j = 0; j < first; j++) d[j] = 0.0f;
                for (i64 j = end; j < extent; j++) d[j] = 0.0f;
            }
            /* dq = ds k (k padded to Dp columns) */
            gemm(s.Tp, s.Dp, S, w.dP, s.Sp, 1, w.K, s.Dp, w.R, s.Dp, 0, upper, s.off);
            for (i64 t = 0; t < T; t++) memcpy(dq + (head * T + t) * D, w.R + t * s.Dp, sizeof(float) * D);
            /* dk += ds^T q (q unscaled, padded to Dp columns) */
            pad_rows(w.Q, s.Tp, s.Dp, qh, lq.row, T, D, 1.0f);
            gemm(s.Sp, s.Dp, T, w.dP, 1, s.Sp, w.Q, s.Dp, w.dK, s.Dp, 1, lower, s.off);
        }
        for (i64 j = 0; j < S; j++) {
            memcpy(dk + (u * S + j) * D, w.dK + j * s.Dp, sizeof(float) * D);
            memcpy(dv + (u * S + j) * Dv, w.dV + j * s.Dvp, sizeof(float) * Dv);
        }
    }
}
