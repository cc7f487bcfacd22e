/* max_pool2d and avg_pool2d: forward one thread per output element, max
 * keeping each window's argmax for backward; backward one thread per input
 * element, gathering the gradients of the windows it was the maximum of, or
 * each covering window's share (no atomics, the CPU's order). */
#include "common.cuh"
#include "../../math/pool.h"

__global__ void pool_forward(zlm_window g, int64_t total, const float *x, float *y, int64_t *arg)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        zlm_pool_max(&g, x, i, y, arg);
}

__global__ void pool_backward(zlm_window g, int64_t total, const int64_t *arg, const float *gy, float *gx)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        gx[i] = zlm_pool_grad(&g, arg, gy, i);
}

__global__ void avg_forward(zlm_window g, int64_t total, bool count_pad, const float *x, float *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = zlm_avg_pool(&g, x, i, count_pad);
}

__global__ void avg_backward(zlm_window g, int64_t total, bool count_pad, const float *gy, float *gx)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        gx[i] = zlm_avg_pool_grad(&g, gy, i, count_pad);
}

extern "C" int zlk_cuda_avg_pool_forward(const zlm_window *g, int64_t planes, bool count_pad, const float *x,
                                         float *y, void *stream)
{
    int64_t total = planes * g->oh * g->ow;
    if (total <= 0) return 0;
    avg_forward<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(*g, total, count_pad, x, y);
    return zlk_launched();
}

extern "C" int zlk_cuda_avg_pool_backward(const zlm_window *g, int64_t planes, bool count_pad, const float *gy,
                                          float *gx, void *stream)
{
    int64_t total = planes * g->h * g->w;
    if (total <= 0) return 0;
    avg_backward<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(*g, total, count_pad, gy, gx);
    return zlk_launched();
}

extern "C" int zlk_cuda_max_pool_forward(const zlm_window *g, int64_t planes, const float *x, float *y, int64_t *arg,
                                         void *stream)
{
    int64_t total = planes * g->oh * g->ow;
    if (total <= 0) return 0;
    pool_forward<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(*g, total, x, y, arg);
    return zlk_launched();
}

extern "C" int zlk_cuda_max_pool_backward(const zlm_window *g, int64_t planes, const int64_t *arg, const float *gy,
                                          float *gx, void *stream)
{
    int64_t total = planes * g->h * g->w;
    if (total <= 0) return 0;
    pool_backward<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(*g, total, arg, gy, gx);
    return zlk_launched();
}
