/* cross_entropy fused over the vocabulary: a thread block per row (rows in a
 * grid-stride loop), the max and the double sum of exponentials reduced in
 * shared memory (the [N, C] softmax is never stored), and the backward that
 * rebuilds it from lse. */
#include "common.cuh"
#include "../../math/cross_entropy.h"

struct zlk_ce_max {
    __device__ float operator()(float a, float b) const { return zlm_softmax_max(a, b); }
};

__device__ void ce_forward_row(int64_t r, int64_t ncls, const void *x, int xdt, const int64_t *target, int64_t ignore,
                               float *lse, float *loss)
{
    int64_t base = r * ncls, t = target[r];
    if (t == ignore) {   /* the whole block leaves together: no reduction is entered */
        if (threadIdx.x == 0) lse[r] = loss[r] = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < ncls; c += blockDim.x) m = zlm_softmax_max(m, zlm_load(x, xdt, base + c));
    m = zlk_block_reduce(m, zlk_ce_max(), -INFINITY);
    double s = 0;
    for (int64_t c = threadIdx.x; c < ncls; c += blockDim.x) s += zlm_ce_exp(zlm_load(x, xdt, base + c), m);
    s = zlk_block_reduce(s, zlk_sum(), 0.0);
    if (threadIdx.x == 0) {
        float l = zlm_ce_lse(m, s);
        lse[r] = l;
        loss[r] = l - zlm_load(x, xdt, base + t);
    }
}

__global__ void ce_forward(int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target, int64_t ignore,
                           float *lse, float *loss)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) ce_forward_row(r, ncls, x, xdt, target, ignore, lse, loss);
}

__global__ void ce_backward(int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target, int64_t ignore,
                            const float *lse, const float *g, int64_t g_stride, float k, float *gx)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = r * ncls, t = target[r];
        float scale = zlm_ce_scale(g[r * g_stride], k), l = lse[r];
        for (int64_t c = threadIdx.x; c < ncls; c += blockDim.x)
            gx[base + c] = t == ignore ? 0.0f : zlm_ce_grad(zlm_load(x, xdt, base + c), l, scale, c == t);
    }
}

extern "C" int zlk_cuda_cross_entropy_forward(int64_t rows, int64_t ncls, const void *x, int xdt,
                                              const int64_t *target, int64_t ignore, float *lse, float *loss,
                                              void *stream)
{
    if (rows <= 0 || ncls <= 0) return 0;
    ce_forward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, ncls, x, xdt, target, ignore, lse,
                                                                            loss);
    return zlk_launched();
}

extern "C" int zlk_cuda_cross_entropy_backward(int64_t rows, int64_t ncls, const void *x, int xdt,
                                               const int64_t *target, int64_t ignore, const float *lse,
                                               const float *g, int64_t g_stride, float k, float *gx, void *stream)
{
    if (rows <= 0 || ncls <= 0) return 0;
    ce_backward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, ncls, x, xdt, target, ignore, lse,
                                                                             g, g_stride, k, gx);
    return zlk_launched();
}
