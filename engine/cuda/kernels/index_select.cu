/* index_select along any dim: forward one thread per output element, bytes as
 * they are (a bad index noted in the device's fault note when given one);
 * backward one thread per column of each outer slice, adding the selected
 * rows in index order (no atomics decide the bits). */
#include "common.cuh"
#include "../../math/index_select.h"

__global__ void index_select_forward(int64_t total, int64_t len, int64_t m, int64_t inner, int es,
                                     const int64_t *idx, const void *x, void *out, zlm_index_fault *fault, int dim)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        zlm_index_select_gather(i, len, m, inner, es, idx, x, out, fault, dim);
}

__global__ void index_select_backward(int64_t cols, int64_t len, int64_t m, int64_t inner, const int64_t *idx,
                                      const float *g, float *gx)
{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < cols; t += (int64_t)gridDim.x * blockDim.x)
        zlm_index_select_backward_column(t, len, m, inner, idx, g, gx);
}

extern "C" int zlk_cuda_index_select_forward(int64_t outer, int64_t len, int64_t m, int64_t inner, int es,
                                             const int64_t *idx, const void *x, void *out, zlm_index_fault *fault,
                                             int dim, void *stream)
{
    int64_t total = outer * m * inner;
    if (total <= 0) return 0;
    index_select_forward<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(total, len, m, inner, es, idx, x,
                                                                                     out, fault, dim);
    return zlk_launched();
}

extern "C" int zlk_cuda_index_select_backward(int64_t outer, int64_t len, int64_t m, int64_t inner,
                                              const int64_t *idx, const float *g, float *gx, void *stream)
{
    int64_t cols = outer * inner;
    if (cols <= 0 || len <= 0) return 0;
    index_select_backward<<<zlk_blocks(cols), ZLK_THREADS, 0, zlk_stream(stream)>>>(cols, len, m, inner, idx, g, gx);
    return zlk_launched();
}
