/* rms_norm over a row of m elements (engine/ops/cpu/rms_norm.c), as Hugging
 * Face's LlamaRMSNorm: rstd = 1 / sqrt(mean(x²) + eps) rounded to f32, the
 * normalised x rounded to x's dtype (rdt) before the weight multiplies it;
 * the row sums in double over eight lanes, as the host vectorises them, and
 * the weight's gradient as partial sums over chunks of rows, added in order. */
#ifndef ZL_MATH_RMS_NORM_H
#define ZL_MATH_RMS_NORM_H

#include "convert.h"

#define ZLM_RMS_LANES 8
/* Rows per partial sum of the weight's gradient. */
#define ZLM_RMS_CHUNK_ROWS 32

static inline ZL_HD float zlm_rms_rstd(double sum_sq, int64_t m, double eps)
{
    return (float)(1.0 / sqrt(sum_sq / (double)m + eps));
}

static inline ZL_HD float zlm_rms_out(float x, float rstd, int rdt, bool has_w, float w)
{
    float y = zlm_round_to(x * rstd, rdt);
    return has_w ? y * w : y;
}

/* The gradient reaching the normalised x: g * w (g without a weight). */
static inline ZL_HD float zlm_rms_gn(float g, bool has_w, float w) { return has_w ? g * w : g; }

/* gx = rstd * gn - x * k, k = mean(gn * x) * rstd³ from the row's dot. */
static inline ZL_HD float zlm_rms_k(double dot, int64_t m, float rstd)
{
    return (float)(dot / (double)m) * rstd * rstd * rstd;
}
static inline ZL_HD float zlm_rms_grad_x(float x, float gn, float rstd, float k) { return rstd * gn - x * k; }

/* One row's term of the weight's gradient: g times the rounded normalised x. */
static inline ZL_HD double zlm_rms_grad_w_term(float g, float x, float rstd, int rdt)
{
    return (double)g * zlm_round_to(x * rstd, rdt);
}

/* The row sums, in double over m elements in ZLM_RMS_LANES lanes, then the
 * tail, then the lanes in order: Σ x² (g NULL), or Σ gn * x with gn =
 * zlm_rms_gn(g, w) (w NULL: none). */
static inline ZL_HD double zlm_rms_row_sum(int64_t m, const void *x, int xdt, const void *g, int gdt, const void *w,
                                           int wdt)
{
    double acc[ZLM_RMS_LANES] = {0}, s = 0;
    int64_t j = 0;
    for (; j + ZLM_RMS_LANES <= m; j += ZLM_RMS_LANES)
        for (int l = 0; l < ZLM_RMS_LANES; l++) {
            float u = zlm_load(x, xdt, j + l);
            float v = g ? zlm_rms_gn(zlm_load(g, gdt, j + l), w != NULL, w ? zlm_load(w, wdt, j + l) : 0.0f) : u;
            acc[l] += (double)v * u;
        }
    for (; j < m; j++) {
        float u = zlm_load(x, xdt, j);
        float v = g ? zlm_rms_gn(zlm_load(g, gdt, j), w != NULL, w ? zlm_load(w, wdt, j) : 0.0f) : u;
        s += (double)v * u;
    }
    for (int l = 0; l < ZLM_RMS_LANES; l++) s += acc[l];
    return s;
}

#endif
