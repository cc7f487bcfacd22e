/* embedding: forward gathers rows, one thread per element; backward runs one
 * thread per column of the [V, D] gradient, zeroing it and adding the
 * positions' rows in order, so repeated indices sum the way the CPU sums
 * them and no atomics decide the bits. */
#include "common.cuh"
#include "../math/embedding.h"

__global__ void embedding_backward(int64_t n, int64_t v, int64_t d, const int64_t *idx, const void *g, int gdt,
                                   float *gw)
{
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j < d) zlm_embedding_backward_columns(n, v, d, j, j + 1, idx, g, gdt, gw);
}

__global__ void embedding_forward(int64_t total, int64_t d, int es, const int64_t *idx, const void *w, void *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        zlm_embedding_gather(i, d, es, idx, w, out);
}

extern "C" int zlk_cuda_embedding_forward(int64_t n, int64_t d, int es, const int64_t *idx, const void *w, void *out,
                                          void *stream)
{
    int64_t total = n * d;
    if (total <= 0) return 0;
    embedding_forward<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(total, d, es, idx, w, out);
    return zlk_launched();
}

extern "C" int zlk_cuda_embedding_backward(int64_t n, int64_t v, int64_t d, const int64_t *idx, const void *g,
                                           int gdt, float *gw, void *stream)
{
    if (v <= 0 || d <= 0) return 0;
    unsigned blocks = (unsigned)((d + ZLK_THREADS - 1) / ZLK_THREADS);
    embedding_backward<<<blocks, ZLK_THREADS, 0, zlk_stream(stream)>>>(n, v, d, idx, g, gdt, gw);
    return zlk_launched();
}
