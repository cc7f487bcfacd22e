/* Mixed precision's per-element checks (engine/optim/grad.c): the loss
 * scaler's overflow test (an all-ones exponent field: inf or NaN) and the
 * squares behind the global gradient norm, summed in double. */
#ifndef ZL_CUDA_MATH_GRAD_H
#define ZL_CUDA_MATH_GRAD_H

#include "convert.h"

/* Element i of x (in dt) is inf or NaN; read from the bits, so a build that
 * assumes finite math cannot fold the test away. */
static inline ZL_HD bool zlm_nonfinite(const void *x, int dt, int64_t i)
{
    if (dt == ZLM_F32) return (zlm_f32_bits(((const float *)x)[i]) & 0x7f800000u) == 0x7f800000u;
    uint16_t mask = dt == ZLM_F16 ? 0x7c00u : 0x7f80u;
    return (((const uint16_t *)x)[i] & mask) == mask;
}

static inline ZL_HD double zlm_sumsq_term(const void *x, int dt, int64_t i)
{
    double f = zlm_load(x, dt, i);
    return f * f;
}

/* Sum of squares of x [lo, hi) in order: one partial sum of the norm. */
static inline ZL_HD double zlm_sumsq_range(const void *x, int dt, int64_t lo, int64_t hi)
{
    double s = 0;
    for (int64_t i = lo; i < hi; i++) s += zlm_sumsq_term(x, dt, i);
    return s;
}

#endif
