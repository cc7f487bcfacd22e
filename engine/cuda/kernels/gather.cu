/* gather along a dim (math/gather.h): forward one thread per gathered
 * element, its index checked against the device's fault note; backward one
 * thread per fibre along the dim, adding in position order, so repeated
 * indices sum as the host sums them and no atomics decide the bits. scatter
 * and scatter_add, forward and backward, one thread per fibre likewise. */
#include "common.cuh"
#include "../../math/gather.h"

__global__ void gather_forward(zlm_view v, int64_t sd, int64_t len, int dim, int64_t n, const int64_t *idx,
                               const void *x, int es, void *out, zlm_index_fault *fault)
{
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n; p += (int64_t)gridDim.x * blockDim.x)
        zlm_gather_elem(p, &v, sd, len, idx, x, es, out, fault, dim);
}

__global__ void gather_backward(zlm_view v, int64_t sd, int64_t len, int64_t nfib, int64_t md, int64_t inner,
                                const int64_t *idx, const float *g, float *gx)
{
    for (int64_t f = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; f < nfib; f += (int64_t)gridDim.x * blockDim.x)
        zlm_gather_backward_fibre(f, &v, sd, len, md, inner, idx, g, gx);
}

extern "C" int zlk_cuda_gather(const zlm_view *v, int64_t sd, int64_t len, int dim, int64_t n, const int64_t *idx,
                               const void *x, int es, void *out, zlm_index_fault *fault, void *stream)
{
    if (n <= 0) return 0;
    gather_forward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(*v, sd, len, dim, n, idx, x, es, out, fault);
    return zlk_launched();
}

extern "C" int zlk_cuda_gather_backward(const zlm_view *v, int64_t sd, int64_t len, int64_t nfib, int64_t md,
                                        int64_t inner, const int64_t *idx, const float *g, float *gx, void *stream)
{
    if (nfib <= 0) return 0;
    gather_backward<<<zlk_blocks(nfib), ZLK_THREADS, 0, zlk_stream(stream)>>>(*v, sd, len, nfib, md, inner, idx, g,
                                                                              gx);
    return zlk_launched();
}

__global__ void scatter_forward(bool add, zlm_view xv, zlm_view sv, int64_t sd, int64_t len, int dim, int64_t nfib,
                                int64_t md, int64_t inner, const int64_t *idx, const void *src, int wdt, void *out,
                                zlm_index_fault *fault)
{
    for (int64_t f = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; f < nfib; f += (int64_t)gridDim.x * blockDim.x)
        zlm_scatter_fibre(f, add, &xv, &sv, sd, len, md, inner, idx, src, wdt, out, fault, dim);
}

__global__ void scatter_backward(bool add, zlm_view xv, zlm_view sv, int64_t sd, int64_t len, int64_t nfib,
                                 int64_t md, int64_t inner, const int64_t *idx, const float *g, float *gx, float *gs)
{
    for (int64_t f = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; f < nfib; f += (int64_t)gridDim.x * blockDim.x)
        zlm_scatter_backward_fibre(f, add, &xv, &sv, sd, len, md, inner, idx, g, gx, gs);
}

extern "C" int zlk_cuda_scatter(bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd, int64_t len, int dim,
                                int64_t nfib, int64_t md, int64_t inner, const int64_t *idx, const void *src, int wdt,
                                void *out, zlm_index_fault *fault, void *stream)
{
    if (nfib <= 0) return 0;
    scatter_forward<<<zlk_blocks(nfib), ZLK_THREADS, 0, zlk_stream(stream)>>>(add, *xv, *sv, sd, len, dim, nfib, md,
                                                                              inner, idx, src, wdt, out, fault);
    return zlk_launched();
}

extern "C" int zlk_cuda_scatter_backward(bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd, int64_t len,
                                         int64_t nfib, int64_t md, int64_t inner, const int64_t *idx, const float *g,
                                         float *gx, float *gs, void *stream)
{
    if (nfib <= 0) return 0;
    scatter_backward<<<zlk_blocks(nfib), ZLK_THREADS, 0, zlk_stream(stream)>>>(add, *xv, *sv, sd, len, nfib, md, inner,
                                                                               idx, g, gx, gs);
    return zlk_launched();
}
