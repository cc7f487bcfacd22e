/* erf and the normal CDF for f32 (the exact GELU's), in arithmetic with no
 * branch and no libm call, so that a loop of them vectorizes on the host (libm's
 * erff is a scalar call per element) and gives the same bits at every vector
 * width and in a kernel. Coefficients are least-squares fits in relative error
 * made for this file: below 1, erf(a)/a as a polynomial in a^2 (fit error
 * 1.4e-9); from 1 to 9.5, erfc(a) e^(a^2) as a polynomial in 1/(1 + a/2)
 * (7e-9). Beyond 9.5 erfc is below FLT_MIN and flushes to 0. */
#ifndef ZL_MATH_ERF_H
#define ZL_MATH_ERF_H

#include "expf.h"

/* erf(a) / a for 0 <= a < 1. */
static inline ZL_HD float zlm_erf_small(float a)
{
    float u = a * a;
    float p = 7.897928485e-05f;
    p = p * u - 8.024279575e-04f;
    p = p * u + 5.190046395e-03f;
    p = p * u - 2.685480552e-02f;
    p = p * u + 1.128361238e-01f;
    p = p * u - 3.761262884e-01f;
    return p * u + 1.128379167e+00f;
}

/* erfc(a) for a >= 1 (0 past 9.5, where it is below FLT_MIN). */
static inline ZL_HD float zlm_erfc_large(float a)
{
    float t = 1.0f / (1.0f + 0.5f * a);
    float p = 8.212295348e-02f;
    p = p * t - 1.888064869e-01f;
    p = p * t + 2.990359285e-02f;
    p = p * t + 1.019387386e-01f;
    p = p * t + 1.594613562e-01f;
    p = p * t + 2.526106404e-01f;
    p = p * t + 2.810427619e-01f;
    p = p * t + 2.821954797e-01f;
    p = p * t - 3.991272464e-06f;
    return a > 9.5f ? 0.0f : zlm_expf_nonpos(-a * a) * p;
}

/* erfc(a) for a >= 0: both forms computed and one kept, so no branch. */
static inline ZL_HD float zlm_erfc_pos(float a)
{
    float small = 1.0f - a * zlm_erf_small(a < 1.0f ? a : 0.0f);
    float large = zlm_erfc_large(a < 1.0f ? 1.0f : a);
    return a < 1.0f ? small : large;
}

static inline ZL_HD float zlm_erff(float x)
{
    float a = x < 0.0f ? -x : x;
    float small = x * zlm_erf_small(a < 1.0f ? a : 0.0f);
    float big = 1.0f - zlm_erfc_large(a < 1.0f ? 1.0f : a);
    big = x < 0.0f ? -big : big;
    return a < 1.0f ? small : big;
}

/* Phi(v), the standard normal CDF, = erfc(-v / sqrt 2) / 2: computed from
 * erfc of |v| / sqrt 2 on both sides, so the lower tail keeps its relative
 * precision (1 + erf(v / sqrt 2) cancels to 0 there). */
static inline ZL_HD float zlm_normal_cdf(float v)
{
    float x = v * 0.7071067811865476f;
    float h = 0.5f * zlm_erfc_pos(x < 0.0f ? -x : x);
    return x < 0.0f ? h : 1.0f - h;
}

#endif
