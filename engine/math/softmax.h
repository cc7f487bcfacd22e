/* softmax and log_softmax over a row: max-subtracted, the sum of exponentials
 * and the backward dot products accumulated in double. The pieces are
 * separate so a kernel can put a block reduction between them, and the host
 * (engine/ops/cpu/softmax.c) keep each exponential between its two uses; the
 * row functions chain them with plain loops.
 *
 * Why double: the CPU op sums in double, so a GPU summing in another order
 * still agrees with it to the last f32 bit but for rare ties; the row kernels
 * are bound by memory, and sm_80/sm_90 add doubles at half the f32 rate. */
#ifndef ZL_MATH_SOFTMAX_H
#define ZL_MATH_SOFTMAX_H

#include "convert.h"

/* fmaxf skips a NaN; the NaN still reaches the sum through exp and poisons the
 * row, as on the CPU. A row of only -inf gives NaN (as in PyTorch). */
static inline ZL_HD float zlm_softmax_max(float m, float x) { return fmaxf(m, x); }
static inline ZL_HD float zlm_softmax_exp(float x, float m) { return expf(x - m); }
/* From the row's sum of exponentials: the softmax's factor, log_softmax's shift. */
static inline ZL_HD float zlm_softmax_inv(double sum) { return (float)(1.0 / sum); }
static inline ZL_HD float zlm_log_softmax_shift(double sum) { return (float)log(sum); }
/* softmax's output from its exponential e (zlm_softmax_exp), which a kernel may have kept */
static inline ZL_HD float zlm_softmax_scale(float e, float inv) { return e * inv; }
static inline ZL_HD float zlm_softmax_out(float x, float m, float inv) { return zlm_softmax_scale(zlm_softmax_exp(x, m), inv); }
static inline ZL_HD float zlm_log_softmax_out(float x, float m, float shift) { return (x - m) - shift; }

/* Backward, from the stored output y and its gradient g:
 * softmax gx = y * (g - <g, y>), log_softmax gx = g - exp(y) * sum(g). */
static inline ZL_HD double zlm_softmax_dot_term(float y, float g) { return (double)g * y; }
static inline ZL_HD float zlm_softmax_grad(float y, float g, float dot) { return y * (g - dot); }
static inline ZL_HD float zlm_log_softmax_grad(float y, float g, float gsum) { return g - expf(y) * gsum; }

/* The first element of row r of [outer, d, inner], whose d elements lie inner
 * apart: rows in the CPU's order, outer-major. */
static inline ZL_HD int64_t zlm_softmax_row_base(int64_t r, int64_t d, int64_t inner)
{
    return (r / inner) * d * inner + r % inner;
}

/* One row of d elements, s apart: x in xdt, y [out] in ydt. */
static inline ZL_HD void zlm_softmax_row(bool is_log, int64_t d, int64_t s, const void *x, int xdt, void *y,
                                         int ydt)
{
    float m = -INFINITY;
    for (int64_t k = 0; k < d; k++) m = zlm_softmax_max(m, zlm_load(x, xdt, k * s));
    double sum = 0;
    for (int64_t k = 0; k < d; k++) sum += zlm_softmax_exp(zlm_load(x, xdt, k * s), m);
    if (is_log) {
        float shift = zlm_log_softmax_shift(sum);
        for (int64_t k = 0; k < d; k++) zlm_store(y, ydt, k * s, zlm_log_softmax_out(zlm_load(x, xdt, k * s), m, shift));
    } else {
        float inv = zlm_softmax_inv(sum);
        for (int64_t k = 0; k < d; k++) zlm_store(y, ydt, k * s, zlm_softmax_out(zlm_load(x, xdt, k * s), m, inv));
    }
}

/* y the stored forward output (ydt), g its gradient (gdt); gx [out] in f32. */
static inline ZL_HD void zlm_softmax_row_backward(bool is_log, int64_t d, int64_t s, const void *y, int ydt,
                                                  const void *g, int gdt, float *gx)
{
    double acc = 0;
    if (is_log) {
        for (int64_t k = 0; k < d; k++) acc += zlm_load(g, gdt, k * s);
        float gsum = (float)acc;
        for (int64_t k = 0; k < d; k++)
            gx[k * s] = zlm_log_softmax_grad(zlm_load(y, ydt, k * s), zlm_load(g, gdt, k * s), gsum);
    } else {
        for (int64_t k = 0; k < d; k++) acc += zlm_softmax_dot_term(zlm_load(y, ydt, k * s), zlm_load(g, gdt, k * s));
        float dot = (float)acc;
        for (int64_t k = 0; k < d; k++)
            gx[k * s] = zlm_softmax_grad(zlm_load(y, ydt, k * s), zlm_load(g, gdt, k * s), dot);
    }
}

#endif
