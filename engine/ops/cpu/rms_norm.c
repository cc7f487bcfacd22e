/* The CPU's rms_norm kernels (math/rms_norm.h's formulas). */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "../../math/rms_norm.h"

/* x, y [rows, m] contiguous f32; w [m] or NULL; rstd [rows] [out]. */
zl_status zli_cpu_rms_forward(int index, int64_t rows, int64_t m, const void *xv, int xdt, const void *wv, int wdt,
                              int rdt, double eps, void *yv, int ydt, float *rstd)
{
    (void)index, (void)xdt, (void)wdt, (void)ydt;
    const float *restrict x = xv, *restrict w = wv;
    float *restrict y = yv;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * m;
        float *yr = y + r * m;
        float rs = zlm_rms_rstd(zlm_rms_row_sum(m, xr, ZLM_F32, NULL, ZLM_F32, NULL, ZLM_F32), m, eps);
        rstd[r] = rs;
        if (w)
            for (int64_t j = 0; j < m; j++) yr[j] = zlm_rms_out(xr[j], rs, rdt, true, w[j]);
        else
            for (int64_t j = 0; j < m; j++) yr[j] = zlm_rms_out(xr[j], rs, rdt, false, 0.0f);
    }
    return ZL_OK;
}

/* One pass over x and g [rows, m] a chunk of rows at a time: gx (NULL: not
 * wanted) row by row, and the chunk's partial sums of the weight's gradient
 * (gw NULL: none), which are then added in chunk order, columns split
 * across threads, so the bits do not depend on the thread count. */
zl_status zli_cpu_rms_backward(int index, int64_t rows, int64_t m, const void *xv, int xdt, const void *wv, int wdt,
                               int rdt, const float *rstd, const void *gv, int gdt, float *gx, float *gw,
                               double *part)
{
    (void)index, (void)xdt, (void)wdt, (void)gdt;
    const float *restrict x = xv, *restrict w = wv, *restrict g = gv;
    int64_t nchunks = (rows + ZLM_RMS_CHUNK_ROWS - 1) / ZLM_RMS_CHUNK_ROWS;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t r1 = (c + 1) * ZLM_RMS_CHUNK_ROWS < rows ? (c + 1) * ZLM_RMS_CHUNK_ROWS : rows;
        double *pc = gw ? part + c * m : NULL;
        if (pc) memset(pc, 0, (size_t)m * sizeof *pc);
        for (int64_t r = c * ZLM_RMS_CHUNK_ROWS; r < r1; r++) {
            const float *xr = x + r * m, *gr = g + r * m;
            float rs = rstd[r];
            if (gx) {
                float k = zlm_rms_k(zlm_rms_row_sum(m, xr, ZLM_F32, gr, ZLM_F32, w, ZLM_F32), m, rs);
                float *out = gx + r * m;
                if (w)
                    for (int64_t j = 0; j < m; j++)
                        out[j] = zlm_rms_grad_x(xr[j], zlm_rms_gn(gr[j], true, w[j]), rs, k);
                else
                    for (int64_t j = 0; j < m; j++) out[j] = zlm_rms_grad_x(xr[j], gr[j], rs, k);
            }
            if (pc)
                for (int64_t j = 0; j < m; j++) pc[j] += zlm_rms_grad_w_term(gr[j], xr[j], rs, rdt);
        }
    }
    if (gw) {
        #pragma omp parallel for schedule(static) if (nchunks * m > ZLI_PAR_MIN)
        for (int64_t j = 0; j < m; j++) {
            double s = 0;
            for (int64_t c = 0; c < nchunks; c++) s += part[c * m + j];
            gw[j] = (float)s;
        }
    }
    return ZL_OK;
}
