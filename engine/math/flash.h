/* Attention that never writes its scores (after FlashAttention-2): a query
 * row takes the keys a tile of ZLM_FLASH_BK at a time, keeping its running
 * maximum m, its sum l of exp(s - m) and its output, each rescaled when m
 * moves. P is rounded to the inputs' dtype before it multiplies V (as the
 * composed path's values GEMM reads it); the row's sum is taken before that
 * rounding. The backward recomputes P from the row's log-sum-exp and forms
 * dS = P (dP - delta), delta being the row's <dO, O>. The CUDA kernels
 * (cuda/kernels/flash.cu) take these steps per element; zlm_flash_row is the
 * same algorithm for one row on the host, which the stand-in device runs. */
#ifndef ZL_MATH_FLASH_H
#define ZL_MATH_FLASH_H

#include "attention.h"
#include "convert.h"

#define ZLM_FLASH_BQ 64   /* query rows a kernel block takes */
#define ZLM_FLASH_BK 64   /* keys a tile */

/* The factor a row's sum and output so far take when its maximum moves from
 * m to mn (mn >= m): 0 while it has seen no key. */
static inline ZL_HD float zlm_flash_rescale(float m, float mn)
{
    return m == -INFINITY ? 0.0f : zlm_expf_nonpos(m - mn);
}

/* A row's log-sum-exp from its maximum and its sum of exp(s - m), l >= 1. */
static inline ZL_HD float zlm_flash_lse(float m, float l) { return m + logf(l); }

/* P of a scaled score s, recomputed from its row's log-sum-exp: s - lse is
 * never positive, lse being at least the row's maximum. */
static inline ZL_HD float zlm_flash_p(float s, float lse) { return zlm_expf_nonpos(s - lse); }

/* One query row: q [d] against keys k and values v [.., d] (f32 holding the
 * inputs' dtype dt), the first lim seen (at least one); o [d] [out] the
 * output before its rounding to dt, the row's lse returned; s holds
 * ZLM_FLASH_BK floats of scratch. */
static inline ZL_HD float zlm_flash_row(const float *q, const float *k, const float *v, int64_t lim, int64_t d,
                                        float scale, int dt, float *s, float *o)
{
    float m = -INFINITY, l = 0.0f;
    for (int64_t c = 0; c < d; c++) o[c] = 0.0f;
    for (int64_t j0 = 0; j0 < lim; j0 += ZLM_FLASH_BK) {
        int64_t n = lim - j0 < ZLM_FLASH_BK ? lim - j0 : ZLM_FLASH_BK;
        float tm = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            float dot = 0.0f;
            for (int64_t c = 0; c < d; c++) dot += q[c] * k[(j0 + j) * d + c];
            s[j] = dot * scale;
            tm = s[j] > tm ? s[j] : tm;
        }
        float mn = tm > m ? tm : m, a = zlm_flash_rescale(m, mn), ts = 0.0f;
        for (int64_t c = 0; c < d; c++) o[c] *= a;
        for (int64_t j = 0; j < n; j++) {
            float p = zlm_expf_nonpos(s[j] - mn), pr = zlm_round_to(p, dt);
            ts += p;
            for (int64_t c = 0; c < d; c++) o[c] += pr * v[(j0 + j) * d + c];
        }
        l = l * a + ts;
        m = mn;
    }
    for (int64_t c = 0; c < d; c++) o[c] /= l;
    return zlm_flash_lse(m, l);
}

#endif
