/* Mixed precision's per-element checks (engine/optim/grad.c): the loss
 * scaler's overflow test (an all-ones exponent field: inf or NaN), the
 * squares behind the global gradient norm, summed in double, and scaling. */
#ifndef ZL_MATH_GRAD_H
#define ZL_MATH_GRAD_H

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

/* The global norm's sums in the host's order (engine/optim/grad.c), so a
 * device's norm has the host's bits: the elements of each tensor cut into
 * chunks of ZLM_SUMSQ_CHUNK, a chunk's squares summed in ZLM_SUMSQ_LANES
 * interleaved lanes and a tail, and its sum the tail plus each lane in turn;
 * the caller adds the chunk sums in order. */
#define ZLM_SUMSQ_CHUNK 32768
#define ZLM_SUMSQ_LANES 8

/* Lane k of the chunk x [lo, lo + len): elements lo + k + 8j, j < len / 8, in order. */
static inline ZL_HD double zlm_sumsq_lane(const void *x, int dt, int64_t lo, int64_t len, int k)
{
    double s = 0;
    for (int64_t i = lo + k; i < lo + len / ZLM_SUMSQ_LANES * ZLM_SUMSQ_LANES; i += ZLM_SUMSQ_LANES)
        s += zlm_sumsq_term(x, dt, i);
    return s;
}

/* The chunk's sum from its lanes [ZLM_SUMSQ_LANES]: the tail's squares in
 * order, then each lane added. */
static inline ZL_HD double zlm_sumsq_chunk(const void *x, int dt, int64_t lo, int64_t len, const double *lanes)
{
    double s = 0;
    for (int64_t i = lo + len / ZLM_SUMSQ_LANES * ZLM_SUMSQ_LANES; i < lo + len; i++) s += zlm_sumsq_term(x, dt, i);
    for (int k = 0; k < ZLM_SUMSQ_LANES; k++) s += lanes[k];
    return s;
}

/* x * f in f32, rounded back to dt (zl_grad_scale's element). */
static inline ZL_HD void zlm_scale(void *x, int dt, int64_t i, float f)
{
    zlm_store(x, dt, i, zlm_load(x, dt, i) * f);
}

#endif
