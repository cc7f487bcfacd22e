/* The CPU's unary kernels over math/unary.h's element. The kinds whose
 * element is branch-free arithmetic (the exact GELU, SiLU, sigmoid) get loops
 * of their own: with the kind a constant the switch folds away and the loop
 * vectorizes; the other kinds share one loop. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "../../math/unary.h"

/* A kind's forward and backward loops, the kind a constant in each. */
#define VECTOR_KIND(name, K)                                                                                      \
    static void name##_forward(int64_t n, const float *restrict x, float *restrict y)                           \
    {                                                                                                             \
        _Pragma("omp parallel for schedule(static) if (n > ZLI_PAR_MIN)")                                       \
        for (int64_t i = 0; i < n; i++) y[i] = zlm_unary_forward(K, x[i], 0.0f, 0.0f);                          \
    }                                                                                                             \
    static void name##_backward(int64_t n, const float *restrict x, const float *restrict y,                    \
                                const float *restrict g, float *restrict gx)                                     \
    {                                                                                                             \
        _Pragma("omp parallel for schedule(static) if (n > ZLI_PAR_MIN)")                                       \
        for (int64_t i = 0; i < n; i++) gx[i] = zlm_unary_backward(K, x[i], y ? y[i] : 0.0f, g[i], 0.0f, 0.0f); \
    }
VECTOR_KIND(gelu, ZLM_U_GELU)
VECTOR_KIND(silu, ZLM_U_SILU)
VECTOR_KIND(sigmoid, ZLM_U_SIGMOID)

/* The CPU's kernels (ops/cpu/kernels.h): f32 buffers, the dtype arguments ZLM_F32. */
zl_status zli_cpu_unary(int index, int kind, int64_t n, const void *xv, int xdt, void *yv, int ydt, float p0,
                        float p1)
{
    (void)index, (void)xdt, (void)ydt;
    const float *restrict x = xv;
    float *restrict y = yv;
    switch (kind) {
    case ZLM_U_GELU: gelu_forward(n, x, y); return ZL_OK;
    case ZLM_U_SILU: silu_forward(n, x, y); return ZL_OK;
    case ZLM_U_SIGMOID: sigmoid_forward(n, x, y); return ZL_OK;
    default: break;
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
    switch (kind) {
    case ZLM_U_GELU: gelu_backward(n, x, NULL, g, gx); return ZL_OK;
    case ZLM_U_SILU: silu_backward(n, x, NULL, g, gx); return ZL_OK;
    case ZLM_U_SIGMOID: sigmoid_backward(n, x, y, g, gx); return ZL_OK;
    default: break;
    }
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) gx[i] = zlm_unary_backward(kind, x[i], y ? y[i] : 0.0f, g[i], p0, p1);
    return ZL_OK;
}
