/* dropout on a device: the keep mask drawn from the generator's counters
 * (math/dropout.h) as the output is written, and the backward through
 * the saved mask; the host's mask, bit for bit. */
#include "common.cuh"
#include "../../math/dropout.h"

__global__ void dropout_forward(int64_t n, uint64_t seed, uint64_t offset, float p, float scale, const float *x,
                                uint8_t *keep, float *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint8_t k = zlm_dropout_keep(seed, offset + (uint64_t)i, p);
        keep[i] = k;
        y[i] = zlm_dropout_apply(k, x[i], scale);
    }
}

__global__ void dropout_backward(int64_t n, const uint8_t *keep, const float *g, float scale, float *gx)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        gx[i] = zlm_dropout_apply(keep[i], g[i], scale);
}

extern "C" int zlk_cuda_dropout_forward(int64_t n, uint64_t seed, uint64_t offset, float p, float scale,
                                        const float *x, uint8_t *keep, float *y, void *stream)
{
    if (n <= 0) return 0;
    dropout_forward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, seed, offset, p, scale, x, keep, y);
    return zlk_launched();
}

extern "C" int zlk_cuda_dropout_backward(int64_t n, const uint8_t *keep, const float *g, float scale, float *gx,
                                         void *stream)
{
    if (n <= 0) return 0;
    dropout_backward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, keep, g, scale, gx);
    return zlk_launched();
}
