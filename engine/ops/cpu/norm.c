/* The CPU's layer_norm kernels: row statistics taken in double, one row per
 * thread; the weight and bias gradients split across threads by column, so
 * no sum depends on timing. */
#include <math.h>
#include <string.h>
#include "kernels.h"

/* Columns per block of the weight/bias gradient: the accumulators live on the stack. */
#define COLS 256
/* The CPU's kernels (ops/cpu/kernels.h), f32: x, y [rows, m] contiguous; w,
 * b [m] or NULL; mean, rstd [rows] [out]. Biased variance. */
zl_status zli_cpu_ln_forward(int index, int64_t rows, int64_t m, const void *xv, int xdt, const void *wv, int wdt,
                             const void *bv, int bdt, double eps, void *yv, int ydt, float *restrict mean,
                             float *restrict rstd)
{
    (void)index, (void)xdt, (void)wdt, (void)bdt, (void)ydt;
    const float *restrict x = xv, *restrict w = wv, *restrict b = bv;
    float *restrict y = yv;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * m;
        float *yr = y + r * m;
        double s = 0;
        for (int64_t j = 0; j < m; j++) s += xr[j];
        double mu = s / (double)m, v = 0;
        for (int64_t j = 0; j < m; j++) {
            double d = xr[j] - mu;
            v += d * d;
        }
        float fm = (float)mu, rs = (float)(1.0 / sqrt(v / (double)m + eps));
        mean[r] = fm;
        rstd[r] = rs;
        for (int64_t j = 0; j < m; j++) yr[j] = (xr[j] - fm) * rs;
        if (w) for (int64_t j = 0; j < m; j++) yr[j] *= w[j];
        if (b) for (int64_t j = 0; j < m; j++) yr[j] += b[j];
    }
    return ZL_OK;
}

/* With xh = (x - mean) * rstd and gh = g * w:
 * gx = rstd * (gh - mean(gh) - xh * mean(gh * xh)), row by row. */
zl_status zli_cpu_ln_backward_x(int index, int64_t rows, int64_t m, const void *xv, int xdt, const void *wv, int wdt,
                                const float *restrict mean, const float *restrict rstd, const void *gv, int gdt,
                                float *restrict gx)
{
    (void)index, (void)xdt, (void)wdt, (void)gdt;
    const float *restrict x = xv, *restrict w = wv, *restrict g = gv;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * m, *gr = g + r * m;
        float *out = gx + r * m, mu = mean[r], rs = rstd[r];
        double a = 0, c = 0;
        for (int64_t j = 0; j < m; j++) {
            float gh = w ? gr[j] * w[j] : gr[j];
            a += gh;
            c += (double)gh * ((xr[j] - mu) * rs);
        }
        float ma = (float)(a / (double)m), mc = (float)(c / (double)m);
        for (int64_t j = 0; j < m; j++) {
            float gh = w ? gr[j] * w[j] : gr[j];
            out[j] = rs * (gh - ma - (xr[j] - mu) * rs * mc);
        }
    }
    return ZL_OK;
}

/* gw[j] = sum_r g[r, j] * xh[r, j], gb[j] = sum_r g[r, j]; either may be NULL.
 * Each block of columns belongs to one thread and adds rows in order. */
zl_status zli_cpu_ln_backward_wb(int index, int64_t rows, int64_t m, const void *xv, int xdt,
                                 const float *restrict mean, const float *restrict rstd, const void *gv, int gdt,
                                 float *restrict gw, float *restrict gb)
{
    (void)index, (void)xdt, (void)gdt;
    const float *restrict x = xv, *restrict g = gv;
    int64_t nblocks = (m + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && nblocks > 1)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t lo = blk * COLS, n = lo + COLS < m ? COLS : m - lo;
        double aw[COLS] = {0}, ab[COLS] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * m + lo, *gr = g + r * m + lo;
            float mu = mean[r], rs = rstd[r];
            for (int64_t j = 0; j < n; j++) {
                aw[j] += (double)gr[j] * ((xr[j] - mu) * rs);
                ab[j] += gr[j];
            }
        }
        for (int64_t j = 0; j < n; j++) {
            if (gw) gw[lo + j] = (float)aw[j];
            if (gb) gb[lo + j] = (float)ab[j];
        }
    }
    return ZL_OK;
}
