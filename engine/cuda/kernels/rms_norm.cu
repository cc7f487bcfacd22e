/* rms_norm over the last dimension (math/rms_norm.h): forward and the x
 * gradient a thread block per row (rows in a grid-stride loop, the double
 * sums reduced in shared memory); the weight's gradient as the host takes
 * it, a thread per column and chunk of rows, then the chunks added in order. */
#include "common.cuh"
#include "../../math/rms_norm.h"

__global__ void rms_forward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt, int rdt,
                            double eps, void *y, int ydt, float *rstd)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = r * m;
        double s = 0;
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
            float u = zlm_load(x, xdt, base + j);
            s += (double)u * u;
        }
        float rs = zlm_rms_rstd(zlk_block_reduce(s, zlk_sum(), 0.0), m, eps);
        if (threadIdx.x == 0) rstd[r] = rs;
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x)
            zlm_store(y, ydt, base + j,
                      zlm_rms_out(zlm_load(x, xdt, base + j), rs, rdt, w != NULL, w ? zlm_load(w, wdt, j) : 0.0f));
    }
}

__global__ void rms_backward_x(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                               const float *rstd, const void *g, int gdt, float *gx)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = r * m;
        float rs = rstd[r];
        double dot = 0;
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
            float gn = zlm_rms_gn(zlm_load(g, gdt, base + j), w != NULL, w ? zlm_load(w, wdt, j) : 0.0f);
            dot += (double)gn * zlm_load(x, xdt, base + j);
        }
        float k = zlm_rms_k(zlk_block_reduce(dot, zlk_sum(), 0.0), m, rs);
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
            float gn = zlm_rms_gn(zlm_load(g, gdt, base + j), w != NULL, w ? zlm_load(w, wdt, j) : 0.0f);
            gx[base + j] = zlm_rms_grad_x(zlm_load(x, xdt, base + j), gn, rs, k);
        }
    }
}

/* part [nchunks, m]: column j of chunk c (blockIdx.y, in a grid-stride loop
 * over chunks), its rows in order; neighbouring threads read neighbouring columns. */
__global__ void rms_backward_w_parts(int64_t rows, int64_t m, const void *x, int xdt, int rdt, const float *rstd,
                                     const void *g, int gdt, double *part)
{
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t nchunks = (rows + ZLM_RMS_CHUNK_ROWS - 1) / ZLM_RMS_CHUNK_ROWS;
    if (j >= m) return;
    for (int64_t c = blockIdx.y; c < nchunks; c += gridDim.y) {
        double s = 0;
        for (int64_t r = c * ZLM_RMS_CHUNK_ROWS; r < rows && r < (c + 1) * ZLM_RMS_CHUNK_ROWS; r++)
            s += zlm_rms_grad_w_term(zlm_load(g, gdt, r * m + j), zlm_load(x, xdt, r * m + j), rstd[r], rdt);
        part[c * m + j] = s;
    }
}

__global__ void rms_backward_w_sum(int64_t nchunks, int64_t m, const double *part, float *gw)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < m; j += (int64_t)gridDim.x * blockDim.x) {
        double s = 0;
        for (int64_t c = 0; c < nchunks; c++) s += part[c * m + j];
        gw[j] = (float)s;
    }
}

extern "C" int zlk_cuda_rms_norm_forward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                         int rdt, double eps, void *y, int ydt, float *rstd, void *stream)
{
    if (rows <= 0 || m <= 0) return 0;
    rms_forward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, m, x, xdt, w, wdt, rdt, eps, y,
                                                                             ydt, rstd);
    return zlk_launched();
}

extern "C" int zlk_cuda_rms_norm_backward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                          int rdt, const float *rstd, const void *g, int gdt, float *gx, float *gw,
                                          double *part, void *stream)
{
    if (rows <= 0 || m <= 0) return 0;
    cudaStream_t s = zlk_stream(stream);
    if (gx) {
        rms_backward_x<<<zlk_row_blocks(rows), ZLK_THREADS, 0, s>>>(rows, m, x, xdt, w, wdt, rstd, g, gdt, gx);
        int err = zlk_launched();
        if (err) return err;
    }
    if (!gw) return 0;
    int64_t nchunks = (rows + ZLM_RMS_CHUNK_ROWS - 1) / ZLM_RMS_CHUNK_ROWS;
    unsigned cols = (unsigned)((m + ZLK_THREADS - 1) / ZLK_THREADS);
    unsigned chunks = (unsigned)(nchunks < 65535 ? nchunks : 65535);
    rms_backward_w_parts<<<dim3(cols, chunks), ZLK_THREADS, 0, s>>>(rows, m, x, xdt, rdt, rstd, g, gdt, part);
    int err = zlk_launched();
    if (err) return err;
    rms_backward_w_sum<<<zlk_blocks(m), ZLK_THREADS, 0, s>>>(nchunks, m, part, gw);
    return zlk_launched();
}
