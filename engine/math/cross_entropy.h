/* cross_entropy fused over the vocabulary (engine/ops/cpu/loss.c runs these
 * rows, its max vectorized), one row of logits at a time: lse = max +
 * log(sum exp(x - max)), loss = lse - x[target], and backward scale *
 * (softmax - onehot) rebuilt from lse. A row whose target is
 * ignore_index has loss 0 and gradient 0. Class weights and label smoothing
 * are not here: the host computes them in its own rows, and on a device the
 * op composes them of other ops (loss.c). */
#ifndef ZL_MATH_CROSS_ENTROPY_H
#define ZL_MATH_CROSS_ENTROPY_H

#include "softmax.h"
#include "expf.h"

static inline ZL_HD float zlm_ce_lse(float m, double sum) { return m + (float)log(sum); }
/* x - max and x - lse are never above 0 (lse >= max; NaN stays NaN). */
static inline ZL_HD float zlm_ce_exp(float x, float m) { return zlm_expf_nonpos(x - m); }

/* Gradient of class c: scale * exp(x - lse), less scale at the target (the
 * CPU writes the first and then subtracts, two roundings). */
static inline ZL_HD float zlm_ce_grad(float x, float lse, float scale, bool is_target)
{
    float v = scale * zlm_expf_nonpos(x - lse);
    return is_target ? v - scale : v;
}

/* The factor of a row's gradient: the loss's gradient g_r (reduction none) or
 * g * k, with k = 1 / count of rows not ignored (mean) or 1 (sum). */
static inline ZL_HD float zlm_ce_scale(float g, float k) { return g * k; }
static inline ZL_HD float zlm_ce_mean_factor(int64_t count) { return (float)(1.0 / (double)count); }

/* A row's exponentials are summed in ZLM_CE_LANES interleaved lanes, each
 * in double, combined in lane order at the end: the loops vectorize at any
 * width up to 16 floats and the bits do not depend on it. Element c goes to
 * lane c % ZLM_CE_LANES. */
#define ZLM_CE_LANES 16

/* The row's sum, lse and loss from its max m: x [ncls] f32; *lse, *loss [out]. */
static inline ZL_HD void zlm_ce_row_from_max(int64_t ncls, const float *ZLM_RESTRICT x, float m, int64_t target,
                                             float *lse, float *loss)
{
    enum { L = ZLM_CE_LANES };
    int64_t full = ncls - ncls % L;
    double acc[L];
    for (int l = 0; l < L; l++) acc[l] = 0.0;
    for (int64_t c = 0; c < full; c += L)
        for (int l = 0; l < L; l++) acc[l] += (double)zlm_ce_exp(x[c + l], m);
    for (int64_t c = full; c < ncls; c++) acc[c - full] += (double)zlm_ce_exp(x[c], m);
    double s = 0.0;
    for (int l = 0; l < L; l++) s += acc[l];
    float v = zlm_ce_lse(m, s);
    *lse = v;
    *loss = v - x[target];
}

/* x [ncls] f32; *lse, *loss [out]. The max is exact in any order (a NaN it
 * skips still reaches the sum through exp), so the CPU op reduces it at its
 * vector's width and keeps these bits. */
static inline ZL_HD void zlm_ce_row(int64_t ncls, const float *ZLM_RESTRICT x, int64_t target, int64_t ignore,
                                    float *lse, float *loss)
{
    if (target == ignore) {
        *lse = 0.0f;
        *loss = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (int64_t c = 0; c < ncls; c++) m = x[c] > m ? x[c] : m;
    zlm_ce_row_from_max(ncls, x, m, target, lse, loss);
}

/* x [ncls] f32; gx [out] [ncls] f32. */
static inline ZL_HD void zlm_ce_row_backward(int64_t ncls, const float *ZLM_RESTRICT x, int64_t target,
                                             int64_t ignore, float lse, float scale, float *ZLM_RESTRICT gx)
{
    if (target == ignore) {
        for (int64_t c = 0; c < ncls; c++) gx[c] = 0.0f;
        return;
    }
    for (int64_t c = 0; c < ncls; c++) gx[c] = scale * zlm_ce_exp(x[c], lse);
    gx[target] -= scale;
}

#endif
