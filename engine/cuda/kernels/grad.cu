/* Mixed precision on the device: the loss scaler's overflow check raising a
 * device flag, and the sum of squares behind the global gradient norm in
 * fixed per-block partials added in order (the same bits every run). */
#include "common.cuh"
#include "../math/grad.h"

__global__ void nonfinite_kernel(const void *x, int dt, int64_t n, int *flag)
{
    bool any = false;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        any |= zlm_nonfinite(x, dt, i);
    if (any) *flag = 1;   /* every writer writes 1: no race changes the result */
}

__global__ void sumsq_kernel(const void *x, int dt, int64_t n, double *work)
{
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += zlm_sumsq_term(x, dt, i);
    s = zlk_block_reduce(s, zlk_sum(), 0.0);
    if (threadIdx.x == 0) work[blockIdx.x] = s;
}

__global__ void sumsq_total_kernel(const double *work, double *acc)
{
    double s = 0;
    for (int b = 0; b < ZLK_SUM_BLOCKS; b++) s += work[b];
    *acc += s;
}

extern "C" int zlk_cuda_nonfinite(const void *x, int dt, int64_t n, int *flag, void *stream)
{
    if (n <= 0) return 0;
    nonfinite_kernel<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(x, dt, n, flag);
    return zlk_launched();
}

extern "C" int zlk_cuda_sumsq(const void *x, int dt, int64_t n, double *work, double *acc, void *stream)
{
    if (n <= 0) return 0;
    sumsq_kernel<<<ZLK_SUM_BLOCKS, ZLK_THREADS, 0, zlk_stream(stream)>>>(x, dt, n, work);
    int err = zlk_launched();
    if (err) return err;
    sumsq_total_kernel<<<1, 1, 0, zlk_stream(stream)>>>(work, acc);
    return zlk_launched();
}
