/* The CPU's loss kernels: cross-entropy's rows (math/cross_entropy.h, the
 * max vectorised) and mse's elements. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "kernels.h"
#include "../../math/convert.h"
#include "../../math/cross_entropy.h"

/* zlm_ce_row with the max reduced at the vector's width (same bits). */
static void ce_row(int64_t ncls, const float *restrict x, int64_t target, int64_t ignore, float *lse, float *loss)
{
    if (target == ignore) {
        *lse = 0.0f;
        *loss = 0.0f;
        return;
    }
    float m = -INFINITY;
    #pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < ncls; c++) m = x[c] > m ? x[c] : m;
    zlm_ce_row_from_max(ncls, x, m, target, lse, loss);
}

/* Row r of x [rows, ncls] in xdt as f32: in place for f32, else widened into f. */
static const float *row_of(const void *x, int xdt, int64_t r, int64_t ncls, float *restrict f)
{
    if (xdt == ZLM_F32) return (const float *)x + r * ncls;
    const uint16_t *h = (const uint16_t *)x + r * ncls;
    /* A loop per dtype vectorises; a dtype test per element (zlm_load) does not. */
    if (xdt == ZLM_BF16)
        for (int64_t c = 0; c < ncls; c++) f[c] = zlm_bf16_to_f32(h[c]);
    else
        for (int64_t c = 0; c < ncls; c++) f[c] = zlm_f16_to_f32(h[c]);
    return f;
}

/* A row's room for each thread when x is in halves (none for f32). */
typedef struct {
    int threads;
    size_t bytes;
    float *buf;
} row_space;
static zl_status row_space_new(const char *op, int xdt, int64_t ncls, row_space *sp)
{
    sp->threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    sp->bytes = xdt == ZLM_F32 ? 0 : (size_t)sp->threads * (size_t)ncls * sizeof(float);
    sp->buf = sp->bytes ? zl_mem_alloc(sp->bytes, ZL_MEM_ACTIVATIONS) : NULL;
    if (sp->bytes && !sp->buf)
        return zl_error(ZL_ENOMEM, "%s: out of memory for %d rows of %lld floats", op, sp->threads, (long long)ncls);
    return ZL_OK;
}

/* The calling thread's row, or NULL without halves. */
static float *row_space_mine(const row_space *sp, int64_t ncls)
{
    return sp->buf ? sp->buf + (size_t)omp_get_thread_num() * (size_t)ncls : NULL;
}

static void row_space_free(row_space *sp)
{
    if (sp->buf) zl_mem_free(sp->buf, sp->bytes, ZL_MEM_ACTIVATIONS);
}

/* The CPU's kernels (ops/cpu/kernels.h): x [rows, ncls] contiguous in xdt
 * (f32, bf16 or f16), target [rows]; lse, loss [rows] [out]. A row's bits
 * do not depend on the thread count or the vector width. */
zl_status zli_cpu_ce_forward(int index, int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                             int64_t ignore, const zlm_ce_opts *o, float *lse, float *loss)
{
    (void)index;
    row_space sp;
    if (row_space_new("cross_entropy", xdt, ncls, &sp)) return zli_last_code();
    #pragma omp parallel num_threads(sp.threads) if (sp.threads > 1 && rows * ncls > ZLI_PAR_MIN && rows > 1)
    {
        float *f = row_space_mine(&sp, ncls);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = row_of(x, xdt, r, ncls, f);
            ce_row(ncls, xr, target[r], ignore, &lse[r], &loss[r]);
            zlm_ce_opts_finish(o, ncls, xr, target[r], ignore, lse[r], &loss[r]);
        }
    }
    row_space_free(&sp);
    return ZL_OK;
}

/* gx [rows, ncls]: row r's gradient scaled by g[r * g_stride] * k, rounded
 * to gdt's precision; zero on ignored rows. */
zl_status zli_cpu_ce_backward(int index, int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                              int64_t ignore, const zlm_ce_opts *o, const float *lse, const float *g,
                              int64_t g_stride, float k, const float *count, int gdt, float *gx)
{
    (void)index;
    if (count) k = zlm_ce_mean_factor((int64_t)*count);
    row_space sp;
    if (row_space_new("cross_entropy backward", xdt, ncls, &sp)) return zli_last_code();
    #pragma omp parallel num_threads(sp.threads) if (sp.threads > 1 && rows * ncls > ZLI_PAR_MIN && rows > 1)
    {
        float *f = row_space_mine(&sp, ncls);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            zlm_ce_opts_row_backward(o, ncls, row_of(x, xdt, r, ncls, f), target[r], ignore, lse[r],
                                     zlm_ce_scale(g[r * g_stride], k), gdt, gx + r * ncls);
    }
    row_space_free(&sp);
    return ZL_OK;
}

/* ---- mse_loss ---- */

/* The CPU's kernels (ops/cpu/kernels.h): sq[i] = (x[i] - t[i])^2 over n
 * contiguous elements; sq [out]. */
zl_status zli_cpu_mse_forward(int index, int64_t n, const float *restrict x, const float *restrict t,
                              float *restrict sq)
{
    (void)index;
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - t[i];
        sq[i] = d * d;
    }
    return ZL_OK;
}

/* gx[i] = k * g[i * g_stride] * (x[i] - t[i]); gt = -gx. Either output may be NULL. */
zl_status zli_cpu_mse_backward(int index, int64_t n, const float *restrict x, const float *restrict t,
                               const float *restrict g, int64_t g_stride, float k, float *restrict gx,
                               float *restrict gt)
{
    (void)index;
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = k * g[i * g_stride] * (x[i] - t[i]);
        if (gx) gx[i] = v;
        if (gt) gt[i] = -v;
    }
    return ZL_OK;
}
