/* exp for f32 in plain arithmetic and bit casts, with no branch and no libm
 * call, so a loop of it vectorizes on the host at whatever width the CPU has
 * (libm's expf is a scalar call per element) and gives the same bits at every
 * width, on the host and in a kernel. Within 2 ulp of expf over the range. */
#ifndef ZL_CUDA_MATH_EXPF_H
#define ZL_CUDA_MATH_EXPF_H

#include "hd.h"

/* exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln 2 / 2, with exp(r) a
 * degree-7 polynomial (Cephes's coefficients) and ln 2 split in two so r is
 * exact. Results below FLT_MIN flush to 0 and above FLT_MAX are inf; NaN stays
 * NaN (every comparison with it is false). */
static inline ZL_HD float zlm_expf(float x)
{
    const float hi = 88.72283935546875f, lo = -87.3365478515625f;
    float xc = x > hi ? hi : (x < lo ? lo : x);
    /* Adding 1.5 * 2^23 rounds to an integer in the low mantissa bits. */
    const float shifter = 12582912.0f;
    float t = xc * 1.44269504088896341f + shifter;
    float n = t - shifter;
    int32_t ni = (int32_t)(zlm_f32_bits(t) - zlm_f32_bits(shifter));
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* n reaches 128 near the top: two factors 2^(n/2) keep each one normal. */
    int32_t n1 = ni >> 1, n2 = ni - n1;
    float y = p * zlm_bits_f32((uint32_t)(n1 + 127) << 23) * zlm_bits_f32((uint32_t)(n2 + 127) << 23);
    return x > hi ? INFINITY : (x < lo ? 0.0f : y);
}

#endif
