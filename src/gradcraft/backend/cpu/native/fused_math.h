/* What the generated fused kernels (fused.py) call besides vector_math.h: full-range exp, tanh and log
   in a form compilers vectorize, and the half-precision conversions, branch-free. */

#ifndef GRADCRAFT_FUSED_MATH_H
#define GRADCRAFT_FUSED_MATH_H

#include <stdbool.h>

#include "vector_math.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* exp over the whole float32 range: exp_f's polynomial, its power of two applied in two halves so that
   results below 2^-126 come out as the denormals NumPy gives (exp_f flushes them to 0), and +inf from
   88.73 on. NaN stays NaN. */
static inline float gc_expf(float x) {
    const float round_magic = 12582912.0f;
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    float k = (xc * 1.44269504f + round_magic) - round_magic;
    float r = xc - k * 0.693359375f;
    r = r + k * 2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t ki = (int32_t)k;
    int32_t k1 = ki / 2, k2 = ki - ki / 2;
    float s1 = f32_from_bits((uint32_t)(k1 + 127) << 23);
    float s2 = f32_from_bits((uint32_t)(k2 + 127) << 23);
    float underflow = x < -104.0f ? 0.0f : 1.0f;
    float overflow = x > 89.0f ? INFINITY : 1.0f;
    return p * s1 * s2 * underflow * overflow;
}

/* tanh (Cephes' tanhf): an odd polynomial below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1) with x's sign
   above (relative error ~1e-7 on both sides). */
static inline float gc_tanhf(float x) {
    float a = fabsf(x);
    float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
                   3.33332819422e-1f) *
                      z * x +
                  x;
    float big = copysignf(1.0f - 2.0f / (gc_expf(2.0f * a) + 1.0f), x);
    return a < 0.625f ? small : big;
}

/* log (Cephes' logf): x = 2^e m with m in [sqrt(1/2), sqrt(2)), log(m) by a polynomial in m - 1
   (relative error ~1e-7); denormals scaled up first; 0 gives -inf, below 0 NaN, +inf and NaN
   themselves. */
static inline float gc_logf(float x) {
    float xs = x < 0x1.0p-126f ? x * 0x1.0p+23f : x;
    uint32_t u = f32_bits(xs);
    float e = (float)((int32_t)((u >> 23) & 0xffu) - 126) - (x < 0x1.0p-126f ? 23.0f : 0.0f);
    float m = f32_from_bits((u & 0x007fffffu) | 0x3f000000u); /* in [0.5, 1) */
    int low = m < 0.707106781186547524f;
    e = low ? e - 1.0f : e;
    m = low ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    y = y + -2.12194440e-4f * e;
    y = y + -0.5f * z;
    float r = m + y;
    r = r + 0.693359375f * e;
    r = x == INFINITY ? x : r;
    r = x == 0.0f ? -INFINITY : r;
    return (x < 0.0f || x != x) ? NAN : r;
}

/* A double as a float rounded to odd (toward zero, the last bit set where inexact): rounding that to
   float16 or bfloat16 gives the double rounded once, as NumPy's casts do (float carries more than
   two bits beyond either). */
static inline float f64_to_f32_odd(double d) {
    float f = (float)d;
    uint32_t u = f32_bits(f);
    u = fabs((double)f) > fabs(d) ? u - 1u : u;
    u = (double)f != d ? u | 1u : u;
    return f32_from_bits(u);
}

/* bfloat16: the upper half of a float32, rounded to nearest even; NaN stays a (quiet) NaN. */
static inline float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

/* IEEE float16, rounded to nearest even (with denormals, infinities and NaN), by float arithmetic on
   scaled values (M. Dukhan's FP16 library). */
static inline float f16_to_f32(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t result = sign | (two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized));
    return f32_from_bits(result);
}

static inline uint16_t f32_to_f16(float f) {
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    bias = bias < 0x71000000u ? 0x71000000u : bias;
    base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

#endif
