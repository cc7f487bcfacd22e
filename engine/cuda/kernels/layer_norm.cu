/* layer_norm over the last dimension: forward and the x gradient one thread
 * block per row (double sums reduced in shared memory), the weight and bias
 * gradients one thread per column adding rows in order, as the CPU does. */
#include "common.cuh"
#include "../math/layer_norm.h"

__global__ void ln_forward(int64_t m, const void *x, int xdt, const void *w, int wdt, const void *b, int bdt,
                           double eps, void *y, int ydt, float *mean, float *rstd)
{
    int64_t r = blockIdx.x, base = r * m;
    double s = 0;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) s += zlm_load(x, xdt, base + j);
    double mu = zlm_ln_mean(zlk_block_reduce(s, zlk_sum(), 0.0), m), v = 0;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) v += zlm_ln_center(zlm_load(x, xdt, base + j), mu);
    v = zlk_block_reduce(v, zlk_sum(), 0.0);
    float fm = (float)mu, rs = zlm_ln_rstd(v, m, eps);
    if (threadIdx.x == 0) {
        mean[r] = fm;
        rstd[r] = rs;
    }
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x)
        zlm_store(y, ydt, base + j, zlm_ln_out(zlm_load(x, xdt, base + j), fm, rs, w != NULL,
                                               w ? zlm_load(w, wdt, j) : 0.0f, b != NULL, b ? zlm_load(b, bdt, j) : 0.0f));
}

__global__ void ln_backward_x(int64_t m, const void *x, int xdt, const void *w, int wdt, const float *mean,
                              const float *rstd, const void *g, int gdt, float *gx)
{
    int64_t r = blockIdx.x, base = r * m;
    float mu = mean[r], rs = rstd[r];
    double a = 0, c = 0;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
        float gh = zlm_ln_gh(zlm_load(g, gdt, base + j), w != NULL, w ? zlm_load(w, wdt, j) : 0.0f);
        a += gh;
        c += (double)gh * zlm_ln_xhat(zlm_load(x, xdt, base + j), mu, rs);
    }
    float ma = (float)(zlk_block_reduce(a, zlk_sum(), 0.0) / (double)m);
    float mc = (float)(zlk_block_reduce(c, zlk_sum(), 0.0) / (double)m);
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
        float gh = zlm_ln_gh(zlm_load(g, gdt, base + j), w != NULL, w ? zlm_load(w, wdt, j) : 0.0f);
        gx[base + j] = zlm_ln_grad_x(zlm_load(x, xdt, base + j), gh, mu, rs, ma, mc);
    }
}

/* One thread per column: consecutive threads read consecutive columns of a
 * row, so every load is coalesced, and each sum runs over rows in order. */
__global__ void ln_backward_wb(int64_t rows, int64_t m, const void *x, int xdt, const float *mean, const float *rstd,
                               const void *g, int gdt, float *gw, float *gb)
{
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j < m) zlm_ln_column_backward(rows, m, j, x, xdt, mean, rstd, g, gdt, gw, gb);
}

extern "C" int zlk_cuda_layer_norm_forward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                           const void *b, int bdt, double eps, void *y, int ydt, float *mean,
                                           float *rstd, void *stream)
{
    if (rows <= 0 || m <= 0) return 0;
    ln_forward<<<(unsigned)rows, ZLK_THREADS, 0, zlk_stream(stream)>>>(m, x, xdt, w, wdt, b, bdt, eps, y, ydt, mean,
                                                                       rstd);
    return zlk_launched();
}

extern "C" int zlk_cuda_layer_norm_backward_x(int64_t rows, int64_t m, const void *x, int xdt, const void *w,
                                              int wdt, const float *mean, const float *rstd, const void *g, int gdt,
                                              float *gx, void *stream)
{
    if (rows <= 0 || m <= 0) return 0;
    ln_backward_x<<<(unsigned)rows, ZLK_THREADS, 0, zlk_stream(stream)>>>(m, x, xdt, w, wdt, mean, rstd, g, gdt, gx);
    return zlk_launched();
}

extern "C" int zlk_cuda_layer_norm_backward_wb(int64_t rows, int64_t m, const void *x, int xdt, const float *mean,
                                               const float *rstd, const void *g, int gdt, float *gw, float *gb,
                                               void *stream)
{
    if (m <= 0 || (!gw && !gb)) return 0;
    unsigned blocks = (unsigned)((m + ZLK_THREADS - 1) / ZLK_THREADS);
    ln_backward_wb<<<blocks, ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, m, x, xdt, mean, rstd, g, gdt, gw, gb);
    return zlk_launched();
}
