/* exp for f32 in plain arithmetic and bit casts, with no branch and no libm
 * call, so a loop of it vectorizes on the host at whatever width the CPU has
 * (libm's expf is a scalar call per element) and gives the same bits at every
 * width, on the host and in a kernel. Within 2 ulp of expf over the range. */
#ifndef ZL_MATH_EXPF_H
#define ZL_MATH_EXPF_H

#include "hd.h"

/* exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln 2 / 2, with exp(r) a
 * degree-7 polynomial (Cephes's coefficients) and ln 2 split in two so r is
 * exact. xc is x clamped to the range; *ni gets n. */
static inline ZL_HD float zlm_exp_poly(float xc, int32_t *ni)
{
    /* Adding 1.5 * 2^23 rounds to an integer in the low mantissa bits. */
    const float shifter = 12582912.0f;
    float t = xc * 1.44269504088896341f + shifter;
    float n = t - shifter;
    *ni = (int32_t)(zlm_f32_bits(t) - zlm_f32_bits(shifter));
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * r * r + r + 1.0f;
}

#define ZLM_EXPF_HI 88.72283935546875f
#define ZLM_EXPF_LO -87.3365478515625f

/* Results below FLT_MIN flush to 0 and above FLT_MAX are inf; NaN stays NaN
 * (every comparison with it is false). */
static inline ZL_HD float zlm_expf(float x)
{
    const float hi = ZLM_EXPF_HI, lo = ZLM_EXPF_LO;
    int32_t ni;
    float p = zlm_exp_poly(x > hi ? hi : (x < lo ? lo : x), &ni);
    /* n reaches 128 near the top: two factors 2^(n/2) keep each one normal. */
    int32_t n1 = ni >> 1, n2 = ni - n1;
    float y = p * zlm_bits_f32((uint32_t)(n1 + 127) << 23) * zlm_bits_f32((uint32_t)(n2 + 127) << 23);
    return x > hi ? INFINITY : (x < lo ? 0.0f : y);
}

/* zlm_expf's bits for x <= 0 or NaN (a softmax's x - max, a Gaussian's
 * exponent), with fewer operations in a row's inner loop: no upper clamp, and
 * n >= -126 makes 2^n one normal factor, so the product rounds once as the two
 * factors' does. Not for x > 0. */
static inline ZL_HD float zlm_expf_nonpos(float x)
{
    const float lo = ZLM_EXPF_LO;
    int32_t ni;
    float p = zlm_exp_poly(x < lo ? lo : x, &ni);
    float y = p * zlm_bits_f32((uint32_t)(ni + 127) << 23);
    return x < lo ? 0.0f : y;
}

#endif
