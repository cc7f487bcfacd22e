/* max_pool2d (engine/ops/cpu/pool.c): each window's maximum and the flat
 * position in its plane of its first maximum (a NaN wins, as on the CPU),
 * and backward as a gather: each input element sums the gradients of the
 * windows whose maximum it was, in window order, which is the order the
 * CPU's scatter adds them in. avg_pool2d: each window's mean, and backward
 * as a gather of the covering windows' gradients over their divisors; the
 * host runs these per element (a device goes through it). */
#ifndef ZL_MATH_POOL_H
#define ZL_MATH_POOL_H

#include "window.h"

/* Window (oi, oj)'s rows [h0, h1) and columns [w0, w1) inside the image. */
static inline ZL_HD void zlm_pool_clip(const zlm_window *g, int64_t oi, int64_t oj, int64_t *h0, int64_t *h1,
                                       int64_t *w0, int64_t *w1)
{
    *h0 = oi * g->sh - g->ph;
    *h1 = *h0 + g->kh;
    *w0 = oj * g->sw - g->pw;
    *w1 = *w0 + g->kw;
    if (*h0 < 0) *h0 = 0;
    if (*h1 > g->h) *h1 = g->h;
    if (*w0 < 0) *w0 = 0;
    if (*w1 > g->w) *w1 = g->w;
}

/* Output element i of y, arg [planes, oh, ow] [out] from x [planes, h, w];
 * padding reads as -inf, so only the part inside the image counts. */
static inline ZL_HD void zlm_pool_max(const zlm_window *g, const float *x, int64_t i, float *y, int64_t *arg)
{
    int64_t len = g->oh * g->ow, oi = i % len / g->ow, oj = i % g->ow;
    const float *xp = x + i / len * g->h * g->w;
    int64_t h0, h1, w0, w1;
    zlm_pool_clip(g, oi, oj, &h0, &h1, &w0, &w1);
    int64_t bi = h0 * g->w + w0;
    float best = xp[bi];
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            float v = xp[ih * g->w + iw];
            if (v > best || (isnan(v) && !isnan(best))) {
                best = v;
                bi = ih * g->w + iw;
            }
        }
    y[i] = best;
    arg[i] = bi;
}

/* The windows covering input element i of [planes, h, w]: rows [ilo, ihi]
 * and columns [jlo, jhi] of the outputs, which start at base in
 * [planes, oh, ow]; pos is i's place in its plane. */
static inline ZL_HD void zlm_pool_covering(const zlm_window *g, int64_t i, int64_t *pos, int64_t *base, int64_t *ilo,
                                           int64_t *ihi, int64_t *jlo, int64_t *jhi)
{
    int64_t hw = g->h * g->w;
    *pos = i % hw;
    *base = i / hw * (g->oh * g->ow);
    zlm_window_cover(*pos / g->w, g->kh, g->sh, g->ph, g->oh, ilo, ihi);
    zlm_window_cover(*pos % g->w, g->kw, g->sw, g->pw, g->ow, jlo, jhi);
}

/* Input element i of gx [planes, h, w]: the sum, from 0 in f32, of gy
 * [planes, oh, ow] over the windows covering it whose arg is it. */
static inline ZL_HD float zlm_pool_grad(const zlm_window *g, const int64_t *arg, const float *gy, int64_t i)
{
    int64_t pos, base, ilo, ihi, jlo, jhi;
    zlm_pool_covering(g, i, &pos, &base, &ilo, &ihi, &jlo, &jhi);
    float s = 0.0f;
    for (int64_t oi = ilo; oi <= ihi; oi++)
        for (int64_t oj = jlo; oj <= jhi; oj++) {
            int64_t j = base + oi * g->ow + oj;
            if (arg[j] == pos) s += gy[j];
        }
    return s;
}

/* The divisor of output (oi, oj): with count_pad the whole window (padding
 * reads as zeros; a window never reaches past the padding, as torch's
 * ceil_mode false keeps it), else the part of it inside the image. */
static inline ZL_HD double zlm_avg_pool_divisor(const zlm_window *g, int64_t oi, int64_t oj, bool count_pad)
{
    if (count_pad) return (double)(g->kh * g->kw);
    int64_t h0, h1, w0, w1;
    zlm_pool_clip(g, oi, oj, &h0, &h1, &w0, &w1);
    return (double)((h1 - h0) * (w1 - w0));
}

/* Output element i of y [planes, oh, ow] from x [planes, h, w]: the window's
 * part inside the image summed in double, row by row, over the divisor. */
static inline ZL_HD float zlm_avg_pool(const zlm_window *g, const float *x, int64_t i, bool count_pad)
{
    int64_t len = g->oh * g->ow, oi = i % len / g->ow, oj = i % g->ow;
    const float *xp = x + i / len * g->h * g->w;
    int64_t h0, h1, w0, w1;
    zlm_pool_clip(g, oi, oj, &h0, &h1, &w0, &w1);
    double s = 0.0;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) s += xp[ih * g->w + iw];
    return (float)(s / zlm_avg_pool_divisor(g, oi, oj, count_pad));
}

/* Input element i of gx [planes, h, w]: gy [planes, oh, ow] over each
 * covering window's divisor, summed in double in window order. */
static inline ZL_HD float zlm_avg_pool_grad(const zlm_window *g, const float *gy, int64_t i, bool count_pad)
{
    int64_t pos, base, ilo, ihi, jlo, jhi;
    zlm_pool_covering(g, i, &pos, &base, &ilo, &ihi, &jlo, &jhi);
    double s = 0.0;
    for (int64_t oi = ilo; oi <= ihi; oi++)
        for (int64_t oj = jlo; oj <= jhi; oj++)
            s += gy[base + oi * g->ow + oj] / zlm_avg_pool_divisor(g, oi, oj, count_pad);
    return (float)s;
}

#endif
