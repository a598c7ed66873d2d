/* Vectorizable math shared by the C kernels (kernels.c, attention.c). */

#ifndef GRADCRAFT_VECTOR_MATH_H
#define GRADCRAFT_VECTOR_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) for float32 in a form compilers vectorize (libm's expf is a call per element):
   exp(x) = 2^k * exp(r), k = round(x / ln 2), r = x - k ln 2 in [-0.35, 0.35], exp(r) by its
   Taylor series to r^7 (truncation error < 5e-9, below float32's resolution). Below -87.3 the
   result is 0 (NumPy gives denormals there); above 88 it is +inf (float32 overflows from 88.72), so
   that sigmoid(-inf) is 0 and silu(-inf) is NaN as in NumPy. NaN stays NaN.

   Branch-free on purpose: every value is computed for every element and the range ends are
   applied by multiplying with factors chosen between two constants. gcc still threads the clamps
   into branches (on the clamped path the whole polynomial is a constant) and, under its default
   -ftrapping-math, will not turn them back into selects, because that would compute the
   polynomial where the source did not; the loop then vectorizes only where masked instructions
   exist (AVX-512), not on AVX2 ("not vectorized: control flow in loop"). So compiler.py builds with
   -fno-trapping-math (it changes no result, only whether FP exception flags may be raised), and
   scripts/check_vectorization.py checks the compiler's report for AVX2 and AVX-512 targets. */
static inline float exp_f(float x) {
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = x < -87.3f ? -87.3f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    float k = (xc * 1.44269504f + round_magic) - round_magic;
    float r = xc - k * 0.693359375f; /* ln 2 in two parts (Cody-Waite), so that r stays exact */
    r = r + k * 2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)k + 127) << 23; /* 2^k as a float's exponent field */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float underflow = x < -87.3f ? 0.0f : 1.0f; /* NaN compares false: NaN * 1 stays NaN */
    float overflow = x > 88.0f ? INFINITY : 1.0f;
    return p * scale * underflow * overflow;
}

static inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

/* erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), as backend/cpu/activations.py's float32 _erf. */
static inline float erf_f(float x) {
    float a = fabsf(x);
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    return copysignf(1.0f - poly * exp_f(-a * a), x); /* odd: a sign copy, not a branch */
}

#endif
