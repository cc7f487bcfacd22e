/* The CPU's embedding kernels: forward copies rows in the weight's own
 * dtype (no f32 round trip); backward splits D across threads, so each
 * element's sum is taken in index order whatever the threads. */
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

/* Columns of the gradient one thread owns at a time. */
#define COLS 64
/* The CPU's kernels (ops/cpu/kernels.h): out [n, d] = rows idx[n] of w [v, d], es bytes an element; the
 * CPU has no fault note, so the op checked the indices. */
zl_status zli_cpu_emb_forward(int index, int64_t n, int64_t v, int64_t d, int es, const int64_t *idx, const void *w,
                              void *out, zlm_index_fault *fault)
{
    (void)index, (void)v, (void)fault;
    size_t row = (size_t)d * (size_t)es;
    const char *src = w;
    char *dst = out;
    #pragma omp parallel for schedule(static) if (n * d > ZLI_PAR_MIN)
    for (int64_t p = 0; p < n; p++) memcpy(dst + (size_t)p * row, src + (size_t)idx[p] * row, row);
    return ZL_OK;
}

/* gw [v, d] [out] = sum over positions p of g[p, :] into row idx[p]; g [n, d].
 * Positions whose index is pad (-1: none) add nothing. accumulate: add to gw
 * as it is instead of starting from zero. */
zl_status zli_cpu_emb_backward(int index, int64_t n, int64_t v, int64_t d, const int64_t *restrict idx, int64_t pad,
                               const float *restrict g, float *restrict gw, bool accumulate)
{
    (void)index;
    int64_t nblocks = (d + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static) if (n * d > ZLI_PAR_MIN && nblocks > 1)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t lo = blk * COLS, w = lo + COLS < d ? COLS : d - lo;
        if (!accumulate)
            for (int64_t r = 0; r < v; r++) memset(gw + r * d + lo, 0, (size_t)w * sizeof *gw);
        for (int64_t p = 0; p < n; p++) {
            if (idx[p] == pad) continue;
            const float *src = g + p * d + lo;
            float *dst = gw + idx[p] * d + lo;
            for (int64_t j = 0; j < w; j++) dst[j] += src[j];
        }
    }
    return ZL_OK;
}
