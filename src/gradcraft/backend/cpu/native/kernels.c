/* gradcraft's compiled CPU kernels: the row-wise and elementwise kernels where NumPy is slowest.

   NumPy runs one pass over memory per operation; a softmax row, a norm or a SiLU gradient is
   4-10 such passes, and in a training step the arrays no longer fit in cache. Each kernel here
   makes one pass (a row-wise kernel: a few passes over one row, in L1 cache). They are float32 only
   and single-threaded; Python calls them on ranges of rows (`lo`, `hi`), so that several threads
   can share the rows (ctypes lets go of the GIL during the call).

   Every kernel has a NumPy reference in backend/cpu/<family>.py with the same name, and
   tests/test_cpu_native.py compares the two on random inputs. Compiled with
   -O3 -march=native -fopenmp-simd -fno-trapping-math (the `omp simd` lines vectorize reductions
   without -ffast-math, which would also break inf and NaN handling). */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vector_math.h"

typedef int64_t i64;

/* ------------------------------------------------------------------ activations (flat ranges) */

void silu_f32(const float *x, float *out, i64 lo, i64 hi) {
#pragma omp simd
    for (i64 i = lo; i < hi; i++) out[i] = x[i] * sigmoid_f(x[i]);
}

/* d/dx x s(x) = s (1 + x (1 - s)) */
void silu_backward_f32(const float *x, const float *g, float *out, i64 lo, i64 hi) {
#pragma omp simd
    for (i64 i = lo; i < hi; i++) {
        float s = sigmoid_f(x[i]);
        out[i] = g[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

#define SQRT_2_OVER_PI 0.7978845608028654f

/* GELU, exact (erf) or with the tanh approximation, written as 0.5 (1 + tanh(u)) = sigmoid(2u):
   the same value, without the cancellation of 1 + tanh(u) for u << 0. */
void gelu_f32(const float *x, float *out, int tanh_form, i64 lo, i64 hi) {
    if (tanh_form) {
#pragma omp simd
        for (i64 i = lo; i < hi; i++)
            out[i] = x[i] * sigmoid_f(2.0f * SQRT_2_OVER_PI * x[i] * (1.0f + 0.044715f * x[i] * x[i]));
    } else {
#pragma omp simd
        for (i64 i = lo; i < hi; i++) out[i] = 0.5f * x[i] * (1.0f + erf_f(x[i] * 0.7071067811865476f));
    }
}

/* tanh form: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u), written
   with s = sigmoid(2u) = 0.5 (1 + t), 1 - t^2 = 4 s (1 - s); erf form: cdf + x pdf. */
void gelu_backward_f32(const float *x, const float *g, float *out, int tanh_form, i64 lo, i64 hi) {
    if (tanh_form) {
#pragma omp simd
        for (i64 i = lo; i < hi; i++) {
            float v = x[i], s = sigmoid_f(2.0f * SQRT_2_OVER_PI * v * (1.0f + 0.044715f * v * v));
            float slope = SQRT_2_OVER_PI * v * (1.0f + 3.0f * 0.044715f * v * v);
            out[i] = g[i] * s * (1.0f + 2.0f * (1.0f - s) * slope);
        }
    } else {
#pragma omp simd
        for (i64 i = lo; i < hi; i++) {
            float v = x[i];
            float cdf = 0.5f * (1.0f + erf_f(v * 0.7071067811865476f));
            out[i] = g[i] * (cdf + v * exp_f(-0.5f * v * v) * 0.3989422804014327f); /* 1 / sqrt(2 pi) */
        }
    }
}

/* SwiGLU over rows of h = [gate | up] (2F values each): out = silu(gate) * up, (rows, F). */
void swiglu_f32(const float *h, float *out, i64 features, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *gate = h + r * 2 * features, *up = gate + features;
        float *o = out + r * features;
#pragma omp simd
        for (i64 j = 0; j < features; j++) o[j] = gate[j] * sigmoid_f(gate[j]) * up[j];
    }
}

/* Its gradient in one buffer shaped like h: d gate = g up silu'(gate), d up = g silu(gate). */
void swiglu_backward_f32(const float *h, const float *g, float *dh, i64 features, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *gate = h + r * 2 * features, *up = gate + features, *gr = g + r * features;
        float *dgate = dh + r * 2 * features, *dup = dgate + features;
#pragma omp simd
        for (i64 j = 0; j < features; j++) {
            float s = sigmoid_f(gate[j]);
            float silu = gate[j] * s;
            dgate[j] = gr[j] * up[j] * s * (1.0f + gate[j] * (1.0f - s));
            dup[j] = gr[j] * silu;
        }
    }
}

/* ------------------------------------------------------------------ norms (rows of `features`) */

/* 1 / sqrt(mean((x - center)^2) + eps) over a row of n: the norms' scale (center 0 for RMSNorm). */
static inline float row_rstd(const float *x, i64 n, float center, float eps) {
    float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
    for (i64 j = 0; j < n; j++) squares += (x[j] - center) * (x[j] - center);
    return 1.0f / sqrtf(squares / (float)n + eps);
}

static inline float row_mean(const float *x, i64 n) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (i64 j = 0; j < n; j++) sum += x[j];
    return sum / (float)n;
}

/* y = x / sqrt(mean(x^2) + eps) * weight (weight may be NULL). */
void rms_norm_f32(const float *x, const float *weight, float *out, i64 features, float eps, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *xr = x + r * features;
        float *o = out + r * features;
        float rstd = row_rstd(xr, features, 0.0f, eps);
        if (weight) {
#pragma omp simd
            for (i64 j = 0; j < features; j++) o[j] = xr[j] * rstd * weight[j];
        } else {
#pragma omp simd
            for (i64 j = 0; j < features; j++) o[j] = xr[j] * rstd;
        }
    }
}

/* dx = rstd (dxhat - xhat mean(dxhat xhat)), dxhat = g weight; the weight's gradient sum(g xhat)
   is added to dweight_partials[r / block_rows] (one row of `features` per block of rows, summed
   in order by the caller: the same result for any split of the rows among threads). */
void rms_norm_backward_f32(const float *x, const float *weight, const float *g, float *dx,
                           float *dweight_partials, i64 block_rows, i64 features, float eps, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *xr = x + r * features, *gr = g + r * features;
        float *d = dx + r * features;
        float *dw = dweight_partials ? dweight_partials + (r / block_rows) * features : 0;
        float rstd = row_rstd(xr, features, 0.0f, eps), proj = 0.0f;
#pragma omp simd reduction(+ : proj)
        for (i64 j = 0; j < features; j++) proj += gr[j] * (weight ? weight[j] : 1.0f) * xr[j];
        proj *= rstd / (float)features; /* mean(dxhat xhat) */
#pragma omp simd
        for (i64 j = 0; j < features; j++) {
            float xhat = xr[j] * rstd;
            d[j] = rstd * (gr[j] * (weight ? weight[j] : 1.0f) - xhat * proj);
        }
        if (dw) {
#pragma omp simd
            for (i64 j = 0; j < features; j++) dw[j] += gr[j] * xr[j] * rstd;
        }
    }
}

/* y = (x - mean) / sqrt(var + eps) * weight + bias (weight, bias may be NULL). */
void layer_norm_f32(const float *x, const float *weight, const float *bias, float *out, i64 features,
                    float eps, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *xr = x + r * features;
        float *o = out + r * features;
        float mean = row_mean(xr, features), rstd = row_rstd(xr, features, mean, eps);
#pragma omp simd
        for (i64 j = 0; j < features; j++)
            o[j] = (xr[j] - mean) * rstd * (weight ? weight[j] : 1.0f) + (bias ? bias[j] : 0.0f);
    }
}

/* dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)); per block of rows, the partial sums of
   g xhat (weight) and g (bias), as in rms_norm_backward_f32. */
void layer_norm_backward_f32(const float *x, const float *weight, const float *g, float *dx,
                             float *dweight_partials, float *dbias_partials, i64 block_rows, i64 features,
                             float eps, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *xr = x + r * features, *gr = g + r * features;
        float *d = dx + r * features;
        float *dw = dweight_partials + (r / block_rows) * features;
        float *db = dbias_partials + (r / block_rows) * features;
        float mean = row_mean(xr, features), rstd = row_rstd(xr, features, mean, eps);
        float dsum = 0.0f, proj = 0.0f;
#pragma omp simd reduction(+ : dsum, proj)
        for (i64 j = 0; j < features; j++) {
            float dxhat = gr[j] * (weight ? weight[j] : 1.0f);
            dsum += dxhat;
            proj += dxhat * (xr[j] - mean) * rstd;
        }
        dsum /= (float)features;
        proj /= (float)features;
#pragma omp simd
        for (i64 j = 0; j < features; j++) {
            float xhat = (xr[j] - mean) * rstd;
            d[j] = rstd * (gr[j] * (weight ? weight[j] : 1.0f) - dsum - xhat * proj);
            dw[j] += gr[j] * xhat;
            db[j] += gr[j];
        }
    }
}

/* ------------------------------------------------------------------ softmax family */

static inline float row_max(const float *x, i64 n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (i64 j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* softmax over rows of n: exp(x - max) / sum. */
void softmax_f32(const float *x, float *out, i64 n, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *xr = x + r * n;
        float *o = out + r * n;
        float m = row_max(xr, n), sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (i64 j = 0; j < n; j++) {
            o[j] = exp_f(xr[j] - m);
            sum += o[j];
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (i64 j = 0; j < n; j++) o[j] *= inv;
    }
}

/* dx = y (g - sum(g y)) scale for y = softmax(x * scale): softmax's gradient (scale 1) and the
   attention weights' (masked_softmax_f32's scale; masked positions have y = 0). */
void softmax_backward_f32(const float *y, const float *g, float *out, i64 n, float scale, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *yr = y + r * n, *gr = g + r * n;
        float *o = out + r * n;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (i64 j = 0; j < n; j++) dot += gr[j] * yr[j];
#pragma omp simd
        for (i64 j = 0; j < n; j++) o[j] = yr[j] * (gr[j] - dot) * scale;
    }
}

/* log_softmax over rows of n: x - max - log(sum exp(x - max)). */
void log_softmax_f32(const float *x, float *out, i64 n, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *xr = x + r * n;
        float *o = out + r * n;
        float m = row_max(xr, n), sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (i64 j = 0; j < n; j++) sum += exp_f(xr[j] - m);
        float shift = m + logf(sum);
#pragma omp simd
        for (i64 j = 0; j < n; j++) o[j] = xr[j] - shift;
    }
}

/* dx = g - exp(y) sum(g) for y = log_softmax(x). */
void log_softmax_backward_f32(const float *y, const float *g, float *out, i64 n, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *yr = y + r * n, *gr = g + r * n;
        float *o = out + r * n;
        float total = 0.0f;
#pragma omp simd reduction(+ : total)
        for (i64 j = 0; j < n; j++) total += gr[j];
#pragma omp simd
        for (i64 j = 0; j < n; j++) o[j] = gr[j] - exp_f(yr[j]) * total;
    }
}

/* Per row of `width` logits of which the first `classes` are classes (the rest, vocabulary
   padding, are not read): logsumexp(x) - x[target], with label smoothing eps:
   (1 - eps) (lse - x[target]) + eps (lse - mean(x)); rows whose target is ignore_index give 0. */
void cross_entropy_f32(const float *logits, const int64_t *target, float *loss, i64 classes, i64 width,
                       i64 ignore_index, float smoothing, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *x = logits + r * width;
        if (target[r] == ignore_index) {
            loss[r] = 0.0f;
            continue;
        }
        float m = row_max(x, classes), sum = 0.0f, total = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (i64 j = 0; j < classes; j++) sum += exp_f(x[j] - m);
        float lse = m + logf(sum);
        float nll = lse - x[target[r]];
        if (smoothing != 0.0f) {
#pragma omp simd reduction(+ : total)
            for (i64 j = 0; j < classes; j++) total += x[j];
            nll = (1.0f - smoothing) * nll + smoothing * (lse - total / (float)classes);
        }
        loss[r] = nll;
    }
}

/* d loss / d logits = g (softmax(x) - (1 - eps) onehot(target) - eps / C); 0 for ignored rows and
   for the padding columns [classes, width). */
void cross_entropy_backward_f32(const float *logits, const int64_t *target, const float *g, float *out,
                                i64 classes, i64 width, i64 ignore_index, float smoothing, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        const float *x = logits + r * width;
        float *o = out + r * width;
        if (target[r] == ignore_index) {
            memset(o, 0, (size_t)width * sizeof(float));
            continue;
        }
        if (width > classes) memset(o + classes, 0, (size_t)(width - classes) * sizeof(float));
        float m = row_max(x, classes), sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (i64 j = 0; j < classes; j++) {
            o[j] = exp_f(x[j] - m);
            sum += o[j];
        }
        float scale = g[r] / sum, shift = g[r] * smoothing / (float)classes;
#pragma omp simd
        for (i64 j = 0; j < classes; j++) o[j] = o[j] * scale - shift;
        o[target[r]] -= (1.0f - smoothing) * g[r];
    }
}

/* Both at once, in place: each row of logits becomes d loss / d logits (g = 1) and loss[r] its loss,
   for the fused output layer + loss, whose chunks of logits are still in cache here. */
void cross_entropy_with_grad_f32(float *logits, const int64_t *target, float *loss, i64 classes, i64 width,
                                 i64 ignore_index, float smoothing, i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; r++) {
        float *x = logits + r * width;
        if (target[r] == ignore_index) {
            memset(x, 0, (size_t)width * sizeof(float));
            loss[r] = 0.0f;
            continue;
        }
        if (width > classes) memset(x + classes, 0, (size_t)(width - classes) * sizeof(float));
        float m = row_max(x, classes), picked = x[target[r]], sum = 0.0f, total = 0.0f;
        if (smoothing != 0.0f) {
#pragma omp simd reduction(+ : total)
            for (i64 j = 0; j < classes; j++) total += x[j];
        }
#pragma omp simd reduction(+ : sum)
        for (i64 j = 0; j < classes; j++) {
            x[j] = exp_f(x[j] - m);
            sum += x[j];
        }
        float lse = m + logf(sum), nll = lse - picked;
        loss[r] = smoothing != 0.0f ? (1.0f - smoothing) * nll + smoothing * (lse - total / (float)classes) : nll;
        float scale = 1.0f / sum, shift = smoothing / (float)classes;
#pragma omp simd
        for (i64 j = 0; j < classes; j++) x[j] = x[j] * scale - shift;
        x[target[r]] -= 1.0f - smoothing;
    }
}

/* Attention weights: for each of the (T, S) score matrices in [lo, hi), softmax(scores * scale)
   over the keys each query may see: query i (the last T of S positions) sees key j when
   j <= i + S - T (causal) and j > i + S - T - window (window > 0); the others get 0. */
void masked_softmax_f32(const float *scores, float *out, i64 T, i64 S, float scale, int causal, i64 window,
                        i64 lo, i64 hi) {
    for (i64 n = lo; n < hi; n++) {
        for (i64 i = 0; i < T; i++) {
            const float *x = scores + (n * T + i) * S;
            float *o = out + (n * T + i) * S;
            i64 first = 0, end = S; /* the keys [first, end) are visible */
            if (causal) end = i + S - T + 1;
            if (window > 0 && i + S - T - window + 1 > first) first = i + S - T - window + 1;
            if (end > S) end = S;
            if (end <= first) { /* sees nothing: NaN, as the softmax of an all -inf row */
                for (i64 j = 0; j < S; j++) o[j] = NAN;
                continue;
            }
            float m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m)
            for (i64 j = first; j < end; j++) m = x[j] * scale > m ? x[j] * scale : m;
#pragma omp simd reduction(+ : sum)
            for (i64 j = first; j < end; j++) {
                o[j] = exp_f(x[j] * scale - m);
                sum += o[j];
            }
            float inv = 1.0f / sum;
#pragma omp simd
            for (i64 j = first; j < end; j++) o[j] *= inv;
            for (i64 j = 0; j < first; j++) o[j] = 0.0f;
            for (i64 j = end; j < S; j++) o[j] = 0.0f;
        }
    }
}

/* ------------------------------------------------------------------ rotary positions */

/* x: (N, H, T, D) with element strides sx[4] (any layout); out: contiguous (N, H, T, D);
   cos, sin: contiguous (T, D/2). Rotates the pairs (x[i], x[i + D/2]) by +angle, or by -angle
   when inverse (the gradient). Ranges over the first axis. */
void rope_f32(const float *x, const i64 *sx, const float *cos_t, const float *sin_t, float *out,
              i64 H, i64 T, i64 D, int inverse, i64 lo, i64 hi) {
    i64 half = D / 2;
    float sign = inverse ? -1.0f : 1.0f;
    for (i64 n = lo; n < hi; n++)
        for (i64 h = 0; h < H; h++)
            for (i64 t = 0; t < T; t++) {
                const float *xr = x + n * sx[0] + h * sx[1] + t * sx[2];
                const float *c = cos_t + t * half, *s = sin_t + t * half;
                float *o = out + ((n * H + h) * T + t) * D;
                i64 step = sx[3];
#pragma omp simd
                for (i64 j = 0; j < half; j++) {
                    float a = xr[j * step], b = xr[(j + half) * step];
                    o[j] = a * c[j] - sign * b * s[j];
                    o[j + half] = b * c[j] + sign * a * s[j];
                }
            }
}

/* ------------------------------------------------------------------ optimizer */

/* PyTorch's AdamW on n float32 values, in place, in the order of backend/cpu/optim.py's _adamw_update.
   The betas come as doubles: 1 - beta is taken in double and rounded once, as PyTorch does (1.0f - 0.999f
   is 1.3e-5 off 0.001, and so would be every second moment). */
void adamw_f32(float *p, const float *g, float *m, float *v, i64 n, float grad_scale, float step_size,
               float bc2_sqrt, float decay, double beta1_d, double beta2_d, float eps) {
    const float beta1 = (float)beta1_d, beta2 = (float)beta2_d;
    const float keep1 = (float)(1.0 - beta1_d), keep2 = (float)(1.0 - beta2_d);
#pragma omp simd
    for (i64 i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        m[i] = m[i] * beta1 + gi * keep1;
        v[i] = v[i] * beta2 + gi * keep2 * gi;
        p[i] = p[i] * decay - step_size * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
    }
}
