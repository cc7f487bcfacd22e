/* The CPU's reduction kernels. Order of summation is fixed: a full
 * reduction adds fixed ZLI_SUM_CHUNK chunks in double and then the chunk
 * sums in order, so the result does not depend on the thread count at all.
 * A device keeps every one of these orders (math/reduce.h), so its results
 * are the host's bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "../../math/cumsum.h"
#include "../../math/reduce.h"
#include "../../math/var.h"

/* The CPU's kernels (ops/cpu/kernels.h). x viewed as [outer, d, inner]
 * (contiguous f32); out [outer, inner]; idx [outer, inner] the pick's
 * position, NULL when not wanted. */
zl_status zli_cpu_reduce_dim(int index, int kind, int64_t outer, int64_t d, int64_t inner, const float *restrict x,
                             float *restrict out, int64_t *restrict idx)
{
    (void)index;
    #pragma omp parallel for schedule(static) if (outer * d * inner > ZLI_PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * d * inner;
        float *yo = out + o * inner;
        int64_t *io = idx ? idx + o * inner : NULL;
        if (kind == ZLM_R_SUM || kind == ZLM_R_MEAN) {
            for (int64_t i = 0; i < inner; i++) yo[i] = 0.0f;
            for (int64_t k = 0; k < d; k++)
                for (int64_t i = 0; i < inner; i++) yo[i] += xo[k * inner + i];
            if (kind == ZLM_R_MEAN)
                for (int64_t i = 0; i < inner; i++) yo[i] /= (float)d;
        } else {
            bool lower = zlm_reduce_lowest(kind);
            for (int64_t i = 0; i < inner; i++) {
                float best = xo[i];
                int64_t bi = 0;
                for (int64_t k = 1; k < d; k++) {
                    float v = xo[k * inner + i];
                    if (zlm_pick_replaces(v, best, lower)) { best = v; bi = k; }
                }
                yo[i] = best;
                if (io) io[i] = bi;
            }
        }
    }
    return ZL_OK;
}

/* out [1] = the sum (or mean) of x [n] in zli_sum_fixed's chunks and order
 * (it keeps the chunk sums itself: work is unused here). */
zl_status zli_cpu_reduce_all(int index, double div, const float *count, int64_t n, const float *x, double *work,
                             float *out)
{
    (void)index, (void)work;
    *out = (float)(zli_sum_fixed(x, n) / (count ? (double)*count : div));
    return ZL_OK;
}

/* gx [outer, len, inner] from g [outer, inner]: copied (sum), divided by len
 * (mean), or sent to the position idx names (max, min). */
zl_status zli_cpu_reduce_backward(int index, int kind, int64_t outer, int64_t len, int64_t inner, const float *g,
                                  const int64_t *idx, float *gx)
{
    (void)index;
    #pragma omp parallel for schedule(static) if (outer * len * inner > ZLI_PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < len; k++)
            for (int64_t i = 0; i < inner; i++) {
                float gv = g[o * inner + i];
                float *dst = &gx[(o * len + k) * inner + i];
                if (kind == ZLM_R_SUM) *dst = gv;
                else if (kind == ZLM_R_MEAN) *dst = gv / (float)len;
                else *dst = idx[o * inner + i] == k ? gv : 0.0f;
            }
    return ZL_OK;
}

/* The CPU's kernel (ops/cpu/kernels.h): out [nout] = g [shape] (nd dims,
 * contiguous) summed over the dims red marks, rows in order: a row whose
 * last dim is kept adds into its slice of out, one whose last dim is
 * reduced adds its sum to one element. */
zl_status zli_cpu_sum_to(int index, int nd, const int64_t *shape, const int *red, const float *pg, float *po,
                         int64_t nout)
{
    (void)index;
    memset(po, 0, (size_t)nout * sizeof *po);
    /* Strides into out for each of g's dims, 0 where out is reduced. */
    int64_t so[ZL_MAX_DIMS], step = 1;
    for (int i = nd - 1; i >= 0; i--) {
        so[i] = red[i] ? 0 : step;
        if (!red[i]) step *= shape[i];
    }
    int64_t inner = nd ? shape[nd - 1] : 1;
    int64_t rows = inner ? zli_numel(nd, shape) / inner : 0;
    int64_t sin = nd ? so[nd - 1] : 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            off += (rem % shape[d]) * so[d];
            rem /= shape[d];
        }
        const float *row = pg + r * inner;
        if (sin == 1) {
            float *dst = po + off;
            for (int64_t j = 0; j < inner; j++) dst[j] += row[j];
        } else {
            float s = 0.0f;
            for (int64_t j = 0; j < inner; j++) s += row[j];
            po[off] += s;
        }
    }
    return ZL_OK;
}

/* out = x's running sums along len, a fibre at a time (math/cumsum.h). */
zl_status zli_cpu_cumsum(int index, int64_t outer, int64_t len, int64_t inner, bool reverse, const float *x,
                         float *out)
{
    (void)index;
    for (int64_t f = 0; f < outer * inner; f++) zlm_running_sum_fibre(f, len, inner, reverse, x, out);
    return ZL_OK;
}

/* var or std, an output at a time (math/var.h). */
zl_status zli_cpu_var(int index, int64_t nout, int64_t count, const zlm_view *kept, const zlm_view *red,
                      const float *x, double correction, bool is_std, double *mean, double *m2, float *out)
{
    (void)index;
    double div = zlm_var_divisor(count, correction);
    #pragma omp parallel for schedule(static) if (nout * count > ZLI_PAR_MIN && nout > 1)
    for (int64_t o = 0; o < nout; o++) {
        zlm_var_moments(o, count, kept, red, x, mean, m2);
        out[o] = zlm_var_value(m2[o], div, is_std);
    }
    return ZL_OK;
}

zl_status zli_cpu_var_backward(int index, int64_t n, const zlm_view *ov, int64_t count, const float *x,
                               const float *g, const double *mean, const double *m2, double correction, bool is_std,
                               float *gx)
{
    (void)index;
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        int64_t o = zlm_view_offset(ov, i);
        gx[i] = zlm_var_grad(g[o], x[i], mean[o], m2[o], count, correction, is_std);
    }
    return ZL_OK;
}
