/* The CPU's index_select kernels: rows copied as raw elements, and the
 * gradient's scatter-add in index order, columns split across threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

/* Columns of the scatter per task: enough to vectorise, small enough to spread. */
#define SCATTER_COLS 256
/* The CPU's kernels (ops/cpu/kernels.h): out [outer, m, inner] = the rows
 * idx[m] of x [outer, len, inner] along its middle dim, es bytes an element;
 * the CPU has no fault note, so the op checked the indices. */
zl_status zli_cpu_index_select(int index, int64_t outer, int64_t len, int64_t m, int64_t inner, int es,
                               const int64_t *idx, const void *x, void *out, zlm_index_fault *fault, int dim)
{
    (void)index, (void)fault, (void)dim;
    int64_t row = inner * es;   /* bytes */
    const char *src = x;
    char *dst = out;
    #pragma omp parallel for schedule(static) if (outer * m * row > 4 * ZLI_PAR_MIN && outer * m > 1)
    for (int64_t t = 0; t < outer * m; t++) memcpy(dst + t * row, src + (t / m * len + idx[t % m]) * row, (size_t)row);
    return ZL_OK;
}

/* gx [outer, len, inner] = g [outer, m, inner]'s rows summed into the rows
 * idx names. Each task owns a block of columns of one outer slice and adds
 * the rows of g in index order, so repeated indices sum the same way every
 * run. */
zl_status zli_cpu_index_select_backward(int index, int64_t outer, int64_t len, int64_t m, int64_t inner,
                                        const int64_t *idx, const float *pg, float *px)
{
    (void)index;
    memset(px, 0, (size_t)(outer * len * inner) * sizeof *px);
    int64_t nblk = (inner + SCATTER_COLS - 1) / SCATTER_COLS;
    #pragma omp parallel for schedule(static) if (outer * m * inner > ZLI_PAR_MIN && outer * nblk > 1)
    for (int64_t t = 0; t < outer * nblk; t++) {
        int64_t o = t / nblk, c0 = t % nblk * SCATTER_COLS;
        int64_t c1 = c0 + SCATTER_COLS < inner ? c0 + SCATTER_COLS : inner;
        for (int64_t r = 0; r < m; r++) {
            float *dst = px + (o * len + idx[r]) * inner;
            const float *src = pg + (o * m + r) * inner;
            for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
    return ZL_OK;
}
