/* cross_entropy fused over the vocabulary: a thread block per row (rows in a
 * grid-stride loop), the max and the double sums (of exponentials, and of
 * the label smoothing's terms) reduced in shared memory (the [N, C] softmax
 * is never stored), and the backward that rebuilds it from lse, with torch's
 * class weights and label smoothing as math/cross_entropy.h gives them. */
#include "common.cuh"
#include "../../math/cross_entropy.h"

struct zlk_ce_max {
    __device__ float operator()(float a, float b) const { return zlm_softmax_max(a, b); }
};

__device__ void ce_forward_row(int64_t r, int64_t ncls, const void *x, int xdt, const int64_t *target, int64_t ignore,
                               zlm_ce_opts o, float *lse, float *loss)
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
    float l = zlm_ce_lse(m, s);
    double q = 0;
    if (o.spread != 0.0f) {   /* the same for every thread of the block */
        for (int64_t c = threadIdx.x; c < ncls; c += blockDim.x)
            q += zlm_ce_smooth_term(&o, c, l, zlm_load(x, xdt, base + c));
        q = zlk_block_reduce(q, zlk_sum(), 0.0);
    }
    if (threadIdx.x == 0) {
        float plain = l - zlm_load(x, xdt, base + t);
        lse[r] = l;
        loss[r] = zlm_ce_plain(&o) ? plain : zlm_ce_opts_loss(&o, t, plain, q);
    }
}

__global__ void ce_forward(int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target, int64_t ignore,
                           zlm_ce_opts o, float *lse, float *loss)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
        ce_forward_row(r, ncls, x, xdt, target, ignore, o, lse, loss);
}

__global__ void ce_backward(int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target, int64_t ignore,
                            zlm_ce_opts o, const float *lse, const float *g, int64_t g_stride, float k,
                            const float *count, int gdt, float *gx)
{
    bool plain = zlm_ce_plain(&o);
    if (count) k = zlm_ce_mean_factor((int64_t)*count);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = r * ncls, t = target[r];
        float scale = zlm_ce_scale(g[r * g_stride], k), l = lse[r];
        for (int64_t c = threadIdx.x; c < ncls; c += blockDim.x) {
            float xv = zlm_load(x, xdt, base + c);
            float v = t == ignore ? 0.0f
                      : plain     ? zlm_ce_grad(xv, l, scale, c == t)
                                  : zlm_ce_opts_grad(&o, xv, l, scale, c, t);
            gx[base + c] = zlm_round_to(v, gdt);
        }
    }
}

extern "C" int zlk_cuda_cross_entropy_forward(int64_t rows, int64_t ncls, const void *x, int xdt,
                                              const int64_t *target, int64_t ignore, const zlm_ce_opts *o,
                                              float *lse, float *loss, void *stream)
{
    if (rows <= 0 || ncls <= 0) return 0;
    ce_forward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, ncls, x, xdt, target, ignore, *o,
                                                                            lse, loss);
    return zlk_launched();
}

extern "C" int zlk_cuda_cross_entropy_backward(int64_t rows, int64_t ncls, const void *x, int xdt,
                                               const int64_t *target, int64_t ignore, const zlm_ce_opts *o,
                                               const float *lse, const float *g, int64_t g_stride, float k,
                                               const float *count, int gdt, float *gx, void *stream)
{
    if (rows <= 0 || ncls <= 0) return 0;
    ce_backward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, ncls, x, xdt, target, ignore, *o,
                                                                             lse, g, g_stride, k, count, gdt, gx);
    return zlk_launched();
}

__global__ void ce_targets(int64_t rows, int64_t ncls, int64_t *target, int64_t ignore, zlm_index_fault *fault,
                           float *counted)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x)
        zlm_ce_check_target(fault, r, target, ignore, ncls, counted);
}

extern "C" int zlk_cuda_cross_entropy_targets(int64_t rows, int64_t ncls, int64_t *target, int64_t ignore,
                                              zlm_index_fault *fault, float *counted, void *stream)
{
    if (rows <= 0) return 0;
    ce_targets<<<zlk_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, ncls, target, ignore, fault, counted);
    return zlk_launched();
}
