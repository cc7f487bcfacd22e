/* layer_norm over the last dimension: forward and the x gradient a thread
 * block per row (rows in a grid-stride loop; double sums reduced in shared
 * memory), the weight and bias gradients a block per 32 columns whose 32
 * rows of threads each add every 32nd row in double (math/layer_norm.h's
 * lanes), added in lane order. */
#include "common.cuh"
#include "../../math/layer_norm.h"

__device__ void ln_forward_row(int64_t r, int64_t m, const void *x, int xdt, const void *w, int wdt, const void *b,
                               int bdt, double eps, void *y, int ydt, float *mean, float *rstd)
{
    int64_t base = r * m;
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

__global__ void ln_forward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt, const void *b,
                           int bdt, double eps, void *y, int ydt, float *mean, float *rstd)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
        ln_forward_row(r, m, x, xdt, w, wdt, b, bdt, eps, y, ydt, mean, rstd);
}

__device__ void ln_backward_x_row(int64_t r, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                  const float *mean, const float *rstd, const void *g, int gdt, float *gx)
{
    int64_t base = r * m;
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

__global__ void ln_backward_x(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                              const float *mean, const float *rstd, const void *g, int gdt, float *gx)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
        ln_backward_x_row(r, m, x, xdt, w, wdt, mean, rstd, g, gdt, gx);
}

#define ZLK_LN_LANES 32

/* A warp reads 32 neighbouring columns of a row, so every load is coalesced. */
__global__ void ln_backward_wb(int64_t rows, int64_t m, const void *x, int xdt, const float *mean, const float *rstd,
                               const void *g, int gdt, float *gw, float *gb)
{
    __shared__ double pw[ZLK_LN_LANES][33], pb[ZLK_LN_LANES][33];
    int64_t j = blockIdx.x * (int64_t)32 + threadIdx.x;
    double aw = 0, ab = 0;
    if (j < m) zlm_ln_column_lane(rows, m, j, threadIdx.y, ZLK_LN_LANES, x, xdt, mean, rstd, g, gdt, &aw, &ab);
    pw[threadIdx.y][threadIdx.x] = aw;
    pb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && j < m) {
        double sw = 0, sb = 0;
        for (int l = 0; l < ZLK_LN_LANES; l++) {
            sw += pw[l][threadIdx.x];
            sb += pb[l][threadIdx.x];
        }
        if (gw) gw[j] = (float)sw;
        if (gb) gb[j] = (float)sb;
    }
}

extern "C" int zlk_cuda_layer_norm_forward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                           const void *b, int bdt, double eps, void *y, int ydt, float *mean,
                                           float *rstd, void *stream)
{
    if (rows <= 0 || m <= 0) return 0;
    ln_forward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, m, x, xdt, w, wdt, b, bdt, eps, y,
                                                                            ydt, mean, rstd);
    return zlk_launched();
}

extern "C" int zlk_cuda_layer_norm_backward_x(int64_t rows, int64_t m, const void *x, int xdt, const void *w,
                                              int wdt, const float *mean, const float *rstd, const void *g, int gdt,
                                              float *gx, void *stream)
{
    if (rows <= 0 || m <= 0) return 0;
    ln_backward_x<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, m, x, xdt, w, wdt, mean, rstd, g,
                                                                               gdt, gx);
    return zlk_launched();
}

extern "C" int zlk_cuda_layer_norm_backward_wb(int64_t rows, int64_t m, const void *x, int xdt, const float *mean,
                                               const float *rstd, const void *g, int gdt, float *gw, float *gb,
                                               void *stream)
{
    if (m <= 0 || (!gw && !gb)) return 0;
    ln_backward_wb<<<(unsigned)((m + 31) / 32), dim3(32, ZLK_LN_LANES), 0, zlk_stream(stream)>>>(rows, m, x, xdt, mean,
                                                                                                rstd, g, gdt, gw, gb);
    return zlk_launched();
}
