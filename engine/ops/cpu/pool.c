/* The CPU's pooling kernels: math/pool.h's element per output (forward) or
 * input (backward), the gathers in the windows' order. */
#include <math.h>
#include "kernels.h"
#include "../../math/pool.h"

/* The geometry as the math header takes it. */
static zlm_window math_window(const zli_dev_window *g)
{
    return (zlm_window){.c = g->c, .h = g->h, .w = g->w, .kh = g->kh, .kw = g->kw, .oh = g->oh, .ow = g->ow,
                        .sh = g->sh, .sw = g->sw, .ph = g->ph, .pw = g->pw, .dh = 1, .dw = 1};
}

/* The CPU's kernels (ops/cpu/kernels.h): y [planes, oh, ow] [out] and arg
 * [planes, oh, ow] [out] (flat position in the plane of each window's first
 * maximum) from x [planes, H, W]. */
zl_status zli_cpu_pool_forward(int index, const zli_dev_window *w, int64_t planes, const float *restrict x,
                               float *restrict y, int64_t *restrict arg)
{
    (void)index;
    zlm_window g = math_window(w);
    int64_t n = planes * g.oh * g.ow;
    #pragma omp parallel for schedule(static) if (n * g.kh * g.kw > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) zlm_pool_max(&g, x, i, y, arg);
    return ZL_OK;
}

/* Each input element gathers the gradients of the windows whose maximum it
 * was (math/pool.h), in the order a scatter would add them. */
zl_status zli_cpu_pool_backward(int index, const zli_dev_window *w, int64_t planes, const int64_t *arg,
                                const float *g, float *gx)
{
    (void)index;
    zlm_window mw = math_window(w);
    int64_t total = planes * mw.h * mw.w;
    #pragma omp parallel for schedule(static) if (total * mw.kh * mw.kw > ZLI_PAR_MIN)
    for (int64_t i = 0; i < total; i++) gx[i] = zlm_pool_grad(&mw, arg, g, i);
    return ZL_OK;
}

/* ---- avg_pool2d ---- */

/* out [planes, oh, ow] = the windows' averages of in [planes, H, W], or
 * (backward) out [planes, H, W] = the gradient from in [planes, oh, ow]. */
static void avg_pool_run(const zli_dev_window *w, int64_t planes, bool count_pad, bool backward,
                         const float *restrict in, float *restrict out)
{
    zlm_window g = math_window(w);
    int64_t n = backward ? planes * g.h * g.w : planes * g.oh * g.ow;
    #pragma omp parallel for schedule(static) if (n * g.kh * g.kw > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = backward ? zlm_avg_pool_grad(&g, in, i, count_pad) : zlm_avg_pool(&g, in, i, count_pad);
}

/* The CPU's kernels (ops/cpu/kernels.h): y [planes, oh, ow] from x [planes,
 * H, W], and gx [planes, H, W] from g. */
zl_status zli_cpu_avg_pool_forward(int index, const zli_dev_window *w, int64_t planes, bool count_pad,
                                   const float *x, float *y)
{
    (void)index;
    avg_pool_run(w, planes, count_pad, false, x, y);
    return ZL_OK;
}

zl_status zli_cpu_avg_pool_backward(int index, const zli_dev_window *w, int64_t planes, bool count_pad,
                                    const float *g, float *gx)
{
    (void)index;
    avg_pool_run(w, planes, count_pad, true, g, gx);
    return ZL_OK;
}
