/* cross_entropy fused over the vocabulary (engine/ops/cpu/loss.c), one row of
 * logits at a time: lse = max + log(sum exp(x - max)) with the sum in double,
 * loss = lse - x[target], and backward scale * (softmax - onehot) rebuilt from
 * lse. A row whose target is ignore_index has loss 0 and gradient 0. The CPU op
 * has no label smoothing, so neither has this. */
#ifndef ZL_CUDA_MATH_CROSS_ENTROPY_H
#define ZL_CUDA_MATH_CROSS_ENTROPY_H

#include "softmax.h"

static inline ZL_HD float zlm_ce_lse(float m, double sum) { return m + (float)log(sum); }

/* Gradient of class c: scale * exp(x - lse), less scale at the target (the
 * CPU writes the first and then subtracts, two roundings). */
static inline ZL_HD float zlm_ce_grad(float x, float lse, float scale, bool is_target)
{
    float v = scale * expf(x - lse);
    return is_target ? v - scale : v;
}

/* The factor of a row's gradient: the loss's gradient g_r (reduction none) or
 * g * k, with k = 1 / count of rows not ignored (mean) or 1 (sum). */
static inline ZL_HD float zlm_ce_scale(float g, float k) { return g * k; }
static inline ZL_HD float zlm_ce_mean_factor(int64_t count) { return (float)(1.0 / (double)count); }

/* x [ncls] in xdt; *lse, *loss [out]. */
static inline ZL_HD void zlm_ce_row(int64_t ncls, const void *x, int xdt, int64_t target, int64_t ignore,
                                    float *lse, float *loss)
{
    if (target == ignore) {
        *lse = 0.0f;
        *loss = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (int64_t c = 0; c < ncls; c++) m = zlm_softmax_max(m, zlm_load(x, xdt, c));
    double s = 0;
    for (int64_t c = 0; c < ncls; c++) s += zlm_softmax_exp(zlm_load(x, xdt, c), m);
    float l = zlm_ce_lse(m, s);
    *lse = l;
    *loss = l - zlm_load(x, xdt, target);
}

/* x [ncls] in xdt; gx [out] [ncls] f32. */
static inline ZL_HD void zlm_ce_row_backward(int64_t ncls, const void *x, int xdt, int64_t target, int64_t ignore,
                                             float lse, float scale, float *gx)
{
    for (int64_t c = 0; c < ncls; c++)
        gx[c] = target == ignore ? 0.0f : zlm_ce_grad(zlm_load(x, xdt, c), lse, scale, c == target);
}

#endif
