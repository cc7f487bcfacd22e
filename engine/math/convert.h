/* f32 <-> bf16/f16 with round-to-nearest-even (NaN stays a quiet NaN,
 * overflow goes to inf), the engine's conversions on the host too (core's
 * zl_convert and zl_f32_to_f16 and kin are these), and element loads and
 * stores through a storage dtype: every kernel widens to f32 and narrows once. */
#ifndef ZL_MATH_CONVERT_H
#define ZL_MATH_CONVERT_H

#include "hd.h"

static inline ZL_HD uint16_t zlm_f32_to_bf16(float f)
{
    uint32_t u = zlm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline ZL_HD float zlm_bf16_to_f32(uint16_t h) { return zlm_bits_f32((uint32_t)h << 16); }

static inline ZL_HD uint16_t zlm_f32_to_f16(float f)
{
    uint32_t u = zlm_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* Adding 0.5 lines the f16 subnormal's bits up with the f32 mantissa's
         * low bits and lets the adder round to even. A flush-to-zero build
         * (-ftz=true, --use_fast_math) only flushes f32 subnormal inputs, which
         * round to a zero f16 anyway. */
        float v = zlm_bits_f32(a) + 0.5f;
        return (uint16_t)(sign | (zlm_f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu + mant_odd;   /* rebias the exponent by -112 and round */
    return (uint16_t)(sign | (a >> 13));
}

static inline ZL_HD float zlm_f16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
        float v = (float)mant * 5.9604644775390625e-08f;   /* 2^-24 */
        return sign ? -v : v;
    }
    if (exp == 31) return zlm_bits_f32(sign | 0x7f800000u | (mant << 13));
    return zlm_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* v rounded to dt's precision and kept in f32 (ZLM_F32: v itself). */
static inline ZL_HD float zlm_round_to(float v, int dt)
{
    if (dt == ZLM_BF16) return zlm_bf16_to_f32(zlm_f32_to_bf16(v));
    if (dt == ZLM_F16) return zlm_f16_to_f32(zlm_f32_to_f16(v));
    return v;
}

/* Element i of p, stored as dt (ZLM_F32, ZLM_F16 or ZLM_BF16), as f32. */
static inline ZL_HD float zlm_load(const void *p, int dt, int64_t i)
{
    if (dt == ZLM_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == ZLM_F16 ? zlm_f16_to_f32(h) : zlm_bf16_to_f32(h);
}

/* Element i of p [out] = v rounded to dt. */
static inline ZL_HD void zlm_store(void *p, int dt, int64_t i, float v)
{
    if (dt == ZLM_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == ZLM_F16 ? zlm_f32_to_f16(v) : zlm_f32_to_bf16(v);
}

/* Two consecutive elements of a half dtype (ZLM_F16 or ZLM_BF16) in one
 * little-endian word, the first in its low half, as a wide load reads them:
 * v[2] from w, and w from v rounded to dt. */
static inline ZL_HD void zlm_unpack_pair(uint32_t w, int dt, float *v)
{
    uint16_t lo = (uint16_t)(w & 0xffffu), hi = (uint16_t)(w >> 16);
    v[0] = dt == ZLM_F16 ? zlm_f16_to_f32(lo) : zlm_bf16_to_f32(lo);
    v[1] = dt == ZLM_F16 ? zlm_f16_to_f32(hi) : zlm_bf16_to_f32(hi);
}

static inline ZL_HD uint32_t zlm_pack_pair(const float *v, int dt)
{
    uint16_t lo = dt == ZLM_F16 ? zlm_f32_to_f16(v[0]) : zlm_f32_to_bf16(v[0]);
    uint16_t hi = dt == ZLM_F16 ? zlm_f32_to_f16(v[1]) : zlm_f32_to_bf16(v[1]);
    return (uint32_t)lo | (uint32_t)hi << 16;
}

#endif
