/* The CPU's unary kernels over math/unary.h's element. The exact GELU gets a
 * loop of its own: with the kind a constant the switch folds away and the
 * loop vectorizes (its erf and exp are branch-free arithmetic); the other
 * kinds share one loop. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "../../math/unary.h"

/* The CPU's kernels (ops/cpu/kernels.h): f32 buffers, the dtype arguments ZLM_F32. */
zl_status zli_cpu_unary(int index, int kind, int64_t n, const void *xv, int xdt, void *yv, int ydt, float p0,
                        float p1)
{
    (void)index, (void)xdt, (void)ydt;
    const float *restrict x = xv;
    float *restrict y = yv;
    if (kind == ZLM_U_GELU) {
        #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = zlm_unary_forward(ZLM_U_GELU, x[i], 0.0f, 0.0f);
        return ZL_OK;
    }
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = zlm_unary_forward(kind, x[i], p0, p1);
    return ZL_OK;
}

/* gx = g * dy/dx, from x (input), y (output; NULL when the kind does not
 * read it) and the op's parameters. */
zl_status zli_cpu_unary_backward(int index, int kind, int64_t n, const void *xv, int xdt, const void *yv, int ydt,
                                 const void *gv, int gdt, float *gx, float p0, float p1)
{
    (void)index, (void)xdt, (void)ydt, (void)gdt;
    const float *restrict x = xv, *restrict y = yv, *restrict g = gv;
    if (kind == ZLM_U_GELU) {
        #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
        for (int64_t i = 0; i < n; i++) gx[i] = zlm_unary_backward(ZLM_U_GELU, x[i], 0.0f, g[i], 0.0f, 0.0f);
        return ZL_OK;
    }
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) gx[i] = zlm_unary_backward(kind, x[i], y ? y[i] : 0.0f, g[i], p0, p1);
    return ZL_OK;
}
