/* mse_loss, forward and backward: one thread per element (grid-stride). */
#include "common.cuh"
#include "../../math/mse.h"

__global__ void mse_forward(int64_t n, const float *x, const float *t, float *sq)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        sq[i] = zlm_mse_sq(x[i], t[i]);
}

__global__ void mse_backward(int64_t n, const float *x, const float *t, const float *g, int64_t g_stride, float k,
                             float *gx, float *gt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = zlm_mse_grad(x[i], t[i], g[i * g_stride], k);
        if (gx) gx[i] = v;
        if (gt) gt[i] = -v;
    }
}

extern "C" int zlk_cuda_mse_forward(int64_t n, const float *x, const float *t, float *sq, void *stream)
{
    if (n <= 0) return 0;
    mse_forward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, x, t, sq);
    return zlk_launched();
}

extern "C" int zlk_cuda_mse_backward(int64_t n, const float *x, const float *t, const float *g, int64_t g_stride,
                                     float k, float *gx, float *gt, void *stream)
{
    if (n <= 0 || (!gx && !gt)) return 0;
    mse_backward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, x, t, g, g_stride, k, gx, gt);
    return zlk_launched();
}
