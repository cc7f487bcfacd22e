/* layer_norm over a row of m elements (engine/ops/cpu/norm.c): mean and
 * biased variance in double (two passes, as the CPU takes them), rstd = 1 /
 * sqrt(var + eps) rounded to f32, y = (x - mean) * rstd, then * w, then + b,
 * each rounded; backward for x per row, for w and b per column over rows. */
#ifndef ZL_MATH_LAYER_NORM_H
#define ZL_MATH_LAYER_NORM_H

#include "convert.h"

/* From the row's sum of x and sum of (x - mean)^2, the second taken around
 * the double mean (zlm_ln_center). */
static inline ZL_HD double zlm_ln_mean(double sum, int64_t m) { return sum / (double)m; }
static inline ZL_HD double zlm_ln_center(float x, double mean)
{
    double d = x - mean;
    return d * d;
}
static inline ZL_HD float zlm_ln_rstd(double sq, int64_t m, double eps) { return (float)(1.0 / sqrt(sq / (double)m + eps)); }

/* w and b are applied only when has_w / has_b; the CPU rounds after each. */
static inline ZL_HD float zlm_ln_out(float x, float mean, float rstd, bool has_w, float w, bool has_b, float b)
{
    float y = (x - mean) * rstd;
    if (has_w) y *= w;
    if (has_b) y += b;
    return y;
}

/* x [m] in xdt; w, b [m] in wdt/bdt or NULL; y [out] [m] in ydt; *mean, *rstd [out]. */
static inline ZL_HD void zlm_ln_row(int64_t m, const void *x, int xdt, const void *w, int wdt, const void *b,
                                    int bdt, double eps, void *y, int ydt, float *mean, float *rstd)
{
    double s = 0;
    for (int64_t j = 0; j < m; j++) s += zlm_load(x, xdt, j);
    double mu = zlm_ln_mean(s, m), v = 0;
    for (int64_t j = 0; j < m; j++) v += zlm_ln_center(zlm_load(x, xdt, j), mu);
    float fm = (float)mu, rs = zlm_ln_rstd(v, m, eps);
    *mean = fm;
    *rstd = rs;
    for (int64_t j = 0; j < m; j++)
        zlm_store(y, ydt, j, zlm_ln_out(zlm_load(x, xdt, j), fm, rs, w != NULL, w ? zlm_load(w, wdt, j) : 0.0f,
                                        b != NULL, b ? zlm_load(b, bdt, j) : 0.0f));
}

/* Backward for x: with xh = (x - mean) * rstd and gh = g * w (g without w),
 * gx = rstd * (gh - mean(gh) - xh * mean(gh * xh)). */
static inline ZL_HD float zlm_ln_gh(float g, bool has_w, float w) { return has_w ? g * w : g; }
static inline ZL_HD float zlm_ln_xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }
static inline ZL_HD float zlm_ln_grad_x(float x, float gh, float mean, float rstd, float mean_gh, float mean_ghxh)
{
    return rstd * (gh - mean_gh - (x - mean) * rstd * mean_ghxh);
}

/* One row: x, g [m] (xdt, gdt), w [m] or NULL; gx [out] [m] f32. */
static inline ZL_HD void zlm_ln_row_backward(int64_t m, const void *x, int xdt, const void *w, int wdt,
                                             float mean, float rstd, const void *g, int gdt, float *gx)
{
    double a = 0, c = 0;
    for (int64_t j = 0; j < m; j++) {
        float gh = zlm_ln_gh(zlm_load(g, gdt, j), w != NULL, w ? zlm_load(w, wdt, j) : 0.0f);
        a += gh;
        c += (double)gh * zlm_ln_xhat(zlm_load(x, xdt, j), mean, rstd);
    }
    float ma = (float)(a / (double)m), mc = (float)(c / (double)m);
    for (int64_t j = 0; j < m; j++) {
        float gh = zlm_ln_gh(zlm_load(g, gdt, j), w != NULL, w ? zlm_load(w, wdt, j) : 0.0f);
        gx[j] = zlm_ln_grad_x(zlm_load(x, xdt, j), gh, mean, rstd, ma, mc);
    }
}

/* Column j of the weight and bias gradients over rows in order:
 * gw[j] = sum_r g[r, j] * xh[r, j], gb[j] = sum_r g[r, j]; x, g [rows, m]. */
static inline ZL_HD void zlm_ln_column_backward(int64_t rows, int64_t m, int64_t j, const void *x, int xdt,
                                                const float *mean, const float *rstd, const void *g, int gdt,
                                                float *gw, float *gb)
{
    double aw = 0, ab = 0;
    for (int64_t r = 0; r < rows; r++) {
        float gr = zlm_load(g, gdt, r * m + j);
        aw += (double)gr * zlm_ln_xhat(zlm_load(x, xdt, r * m + j), mean[r], rstd[r]);
        ab += gr;
    }
    if (gw) gw[j] = (float)aw;
    if (gb) gb[j] = (float)ab;
}

/* Lane l of `lanes` of column j's weight and bias gradients: rows l,
 * l + lanes, ... added in double into *aw and *ab. A GPU block adds the lanes
 * in lane order (kernels/layer_norm.cu): the same double sums as
 * zlm_ln_column_backward's up to the order, the same f32 after rounding but
 * in rare ties. */
static inline ZL_HD void zlm_ln_column_lane(int64_t rows, int64_t m, int64_t j, int l, int lanes, const void *x,
                                            int xdt, const float *mean, const float *rstd, const void *g, int gdt,
                                            double *aw, double *ab)
{
    double sw = 0, sb = 0;
    for (int64_t r = l; r < rows; r += lanes) {
        float gr = zlm_load(g, gdt, r * m + j);
        sw += (double)gr * zlm_ln_xhat(zlm_load(x, xdt, r * m + j), mean[r], rstd[r]);
        sb += gr;
    }
    *aw = sw;
    *ab = sb;
}

#endif
