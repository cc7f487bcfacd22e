/* conv2d's pieces around the GEMM (engine/ops/cpu/conv.c): im2col per column
 * element, col2im as a gather per pixel adding its entries in the order the
 * CPU's scatter adds them (kernel row, then column), and the bias gradient's
 * double sum over images and positions. */
#ifndef ZL_MATH_CONV_H
#define ZL_MATH_CONV_H

#include "window.h"

/* Element i of col [c*kh*kw, oh*ow] from one image x [c, h, w] (a group's
 * channels, for a grouped conv); tap (ki, kj) reads ki * dh, kj * dw past the
 * window's corner; padding reads as 0. */
static inline ZL_HD float zlm_im2col_elem(const zlm_window *g, const float *x, int64_t i)
{
    int64_t len = g->oh * g->ow, r = i / len, j = i % len;
    int64_t c = r / (g->kh * g->kw), ki = r / g->kw % g->kh, kj = r % g->kw;
    int64_t ih = j / g->ow * g->sh - g->ph + ki * g->dh, iw = j % g->ow * g->sw - g->pw + kj * g->dw;
    return ih >= 0 && ih < g->h && iw >= 0 && iw < g->w ? x[(c * g->h + ih) * g->w + iw] : 0.0f;
}

/* Pixel i of gx [c, h, w]: every entry of col [c*kh*kw, oh*ow] im2col read
 * from it, summed from 0 in f32. */
static inline ZL_HD float zlm_col2im_elem(const zlm_window *g, const float *col, int64_t i)
{
    int64_t hw = g->h * g->w, c = i / hw, ih = i % hw / g->w, iw = i % g->w, len = g->oh * g->ow;
    float s = 0.0f;
    for (int64_t ki = 0; ki < g->kh; ki++) {
        int64_t a = ih + g->ph - ki * g->dh;
        if (a < 0 || a % g->sh || a / g->sh >= g->oh) continue;
        for (int64_t kj = 0; kj < g->kw; kj++) {
            int64_t b = iw + g->pw - kj * g->dw;
            if (b < 0 || b % g->sw || b / g->sw >= g->ow) continue;
            s += col[((c * g->kh + ki) * g->kw + kj) * len + a / g->sh * g->ow + b / g->sw];
        }
    }
    return s;
}

/* Term t (0 <= t < n * len) of channel o's bias gradient from g [n, nout, len],
 * images outer: the CPU's order. */
static inline ZL_HD double zlm_conv_bias_term(const float *g, int64_t nout, int64_t len, int64_t o, int64_t t)
{
    return g[(t / len * nout + o) * len + t % len];
}

/* Channel o's bias gradient, its terms summed in order in double. */
static inline ZL_HD float zlm_conv_bias_grad(const float *g, int64_t n, int64_t nout, int64_t len, int64_t o)
{
    double s = 0.0;
    for (int64_t t = 0; t < n * len; t++) s += zlm_conv_bias_term(g, nout, len, o, t);
    return (float)s;
}

#endif
