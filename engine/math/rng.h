/* The counter-based generator's draw for one element (Philox-4x32-10): the
 * value at counter `offset + i` under key `seed` is a pure function of the
 * three, so core's host fill (core/rng.c) and a device kernel give the same
 * numbers for the same generator state. libc only, so core can include it. */
#ifndef ZL_MATH_RNG_H
#define ZL_MATH_RNG_H

#include "hd.h"

static inline ZL_HD void zlm_philox(uint64_t counter, uint64_t key, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static inline ZL_HD float zlm_u01(uint32_t x) { return (float)(x >> 8) * 0x1p-24f; }               /* [0, 1) */
static inline ZL_HD float zlm_u01_open(uint32_t x) { return ((float)(x >> 8) + 0.5f) * 0x1p-24f; }  /* (0, 1) */

/* The uniform draw in [0, 1) at `counter`: integers and one exact scaling,
 * so the same bits on any host or device. dropout compares it with p. */
static inline ZL_HD float zlm_rand_u01(uint64_t key, uint64_t counter)
{
    uint32_t r[4];
    zlm_philox(counter, key, r);
    return zlm_u01(r[0]);
}

/* The value at `counter`: uniform in [a, b), or normal with mean a and
 * standard deviation b (Box-Muller on the first two words; the _of forms
 * take the words). The uniform one
 * over [0, 1) is zlm_rand_u01 exactly; a normal one goes through logf, cosf
 * and sqrtf, so a device's libm may put it a few ulp from the host's. */
static inline ZL_HD float zlm_normal_of(double a, double b, uint32_t w0, uint32_t w1)
{
    float u1 = zlm_u01_open(w0), u2 = zlm_u01(w1);
    return (float)(a + b * (sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2)));
}

static inline ZL_HD float zlm_uniform_of(double a, double b, uint32_t w0) { return (float)(a + (b - a) * zlm_u01(w0)); }

static inline ZL_HD float zlm_rand_value(bool normal, double a, double b, uint64_t key, uint64_t counter)
{
    uint32_t r[4];
    zlm_philox(counter, key, r);
    return normal ? zlm_normal_of(a, b, r[0], r[1]) : zlm_uniform_of(a, b, r[0]);
}

#endif
