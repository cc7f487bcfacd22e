/* Unary elementwise kernels, forward and backward: grid-stride loops over
 * math/unary.h, reading any float storage dtype and computing in f32. */
#include "common.cuh"
#include "../../math/convert.h"
#include "../../math/unary.h"

__global__ void unary_forward(int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0, float p1)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        zlm_store(y, ydt, i, zlm_unary_forward(kind, zlm_load(x, xdt, i), p0, p1));
}

__global__ void unary_backward(int kind, int64_t n, const void *x, int xdt, const void *y, int ydt, const void *g,
                               int gdt, float *gx, float p0, float p1)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float yi = y ? zlm_load(y, ydt, i) : 0.0f;
        gx[i] = zlm_unary_backward(kind, zlm_load(x, xdt, i), yi, zlm_load(g, gdt, i), p0, p1);
    }
}

extern "C" int zlk_cuda_unary_forward(int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0,
                                      float p1, void *stream)
{
    if (n <= 0) return 0;
    unary_forward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, n, x, xdt, y, ydt, p0, p1);
    return zlk_launched();
}

extern "C" int zlk_cuda_unary_backward(int kind, int64_t n, const void *x, int xdt, const void *y, int ydt,
                                       const void *g, int gdt, float *gx, float p0, float p1, void *stream)
{
    if (n <= 0) return 0;
    unary_backward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, n, x, xdt, y, ydt, g, gdt, gx, p0, p1);
    return zlk_launched();
}
