/* The geometry of a 2-d window sliding over planes of [h, w] (c planes an
 * image, for conv): kernel kh x kw, stride sh, sw, zero (conv) or -inf (pool)
 * padding ph, pw, output oh x ow, dilation dh, dw (conv's; at least 1), as
 * engine/ops/cpu/conv.c and pool.c take it. */
#ifndef ZL_MATH_WINDOW_H
#define ZL_MATH_WINDOW_H

#include "hd.h"

typedef struct zlm_window {
    int64_t c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw;
} zlm_window;

/* The outputs whose windows (unclipped) cover input row (or column) at along
 * one axis: [*lo, *hi], empty when *lo > *hi. */
static inline ZL_HD void zlm_window_cover(int64_t at, int64_t k, int64_t s, int64_t p, int64_t out, int64_t *lo,
                                          int64_t *hi)
{
    int64_t first = at + p - k + 1;   /* o * s must reach it */
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = (at + p) / s;
    if (*hi > out - 1) *hi = out - 1;
}

#endif
