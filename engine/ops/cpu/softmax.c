/* The CPU's softmax and log_softmax kernels over [outer, d, inner]: each of
 * the outer*inner rows of length d is handled by one thread from start to
 * end, so results never depend on thread count. */
#include <math.h>
#include "kernels.h"
#include "../../math/softmax.h"

/* One row of d elements, s apart, in math/softmax.h's formulas, each
 * exponential computed once. A row holding NaN, or only -inf, gives NaN, as
 * in PyTorch. */
static inline void row_forward(bool is_log, int64_t d, int64_t s, const float *restrict x, float *restrict y)
{
    float m = -INFINITY;
    for (int64_t k = 0; k < d; k++) m = zlm_softmax_max(m, x[k * s]);
    double sum = 0;
    for (int64_t k = 0; k < d; k++) {
        float e = zlm_softmax_exp(x[k * s], m);
        if (!is_log) y[k * s] = e;
        sum += e;
    }
    if (is_log) {
        float shift = zlm_log_softmax_shift(sum);
        for (int64_t k = 0; k < d; k++) y[k * s] = zlm_log_softmax_out(x[k * s], m, shift);
    } else {
        float inv = zlm_softmax_inv(sum);
        for (int64_t k = 0; k < d; k++) y[k * s] = zlm_softmax_scale(y[k * s], inv);
    }
}

static inline void row_backward(bool is_log, int64_t d, int64_t s, const float *restrict y, const float *restrict g,
                                float *restrict gx)
{
    double acc = 0;
    if (is_log) {
        for (int64_t k = 0; k < d; k++) acc += g[k * s];
        float gsum = (float)acc;
        for (int64_t k = 0; k < d; k++) gx[k * s] = zlm_log_softmax_grad(y[k * s], g[k * s], gsum);
    } else {
        for (int64_t k = 0; k < d; k++) acc += zlm_softmax_dot_term(y[k * s], g[k * s]);
        float dot = (float)acc;
        for (int64_t k = 0; k < d; k++) gx[k * s] = zlm_softmax_grad(y[k * s], g[k * s], dot);
    }
}

/* The CPU's kernels (ops/cpu/kernels.h): x, y [outer, d, inner] contiguous
 * f32; y [out]. A literal stride of 1 for the common last-dim case lets the
 * compiler specialise the inlined row loops. */
zl_status zli_cpu_softmax(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *xv, int xdt,
                          void *yv, int ydt)
{
    (void)index, (void)xdt, (void)ydt;
    const float *restrict x = xv;
    float *restrict y = yv;
    int64_t rows = outer * inner;
    #pragma omp parallel for schedule(static) if (rows * d > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = zlm_softmax_row_base(r, d, inner);
        if (inner == 1) row_forward(is_log, d, 1, x + base, y + base);
        else row_forward(is_log, d, inner, x + base, y + base);
    }
    return ZL_OK;
}

zl_status zli_cpu_softmax_backward(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *yv,
                                   int ydt, const void *gv, int gdt, float *gx)
{
    (void)index, (void)ydt, (void)gdt;
    const float *restrict y = yv, *restrict g = gv;
    int64_t rows = outer * inner;
    #pragma omp parallel for schedule(static) if (rows * d > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = zlm_softmax_row_base(r, d, inner);
        if (inner == 1) row_backward(is_log, d, 1, y + base, g + base, gx + base);
        else row_backward(is_log, d, inner, y + base, g + base, gx + base);
    }
    return ZL_OK;
}
