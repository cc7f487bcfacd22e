/* Mixed precision on the device: the loss scaler's overflow check raising a
 * device flag, the sums of squares behind the global gradient norm in the
 * host's chunks, lanes and order (so the norm has the host's bits), and
 * scaling in place. */
#include "common.cuh"
#include "../../math/grad.h"

__global__ void nonfinite_kernel(const void *x, int dt, int64_t n, int *flag)
{
    bool any = false;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        any |= zlm_nonfinite(x, dt, i);
    if (any) *flag = 1;   /* every writer writes 1: no race changes the result */
}

/* One thread per lane of a chunk: lanes [nchunks * ZLM_SUMSQ_LANES]. */
__global__ void sumsq_lanes_kernel(const void *x, int dt, int64_t n, int64_t nchunks, double *lanes)
{
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= nchunks * ZLM_SUMSQ_LANES) return;
    int64_t lo = t / ZLM_SUMSQ_LANES * ZLM_SUMSQ_CHUNK;
    int64_t len = n - lo < ZLM_SUMSQ_CHUNK ? n - lo : ZLM_SUMSQ_CHUNK;
    lanes[t] = zlm_sumsq_lane(x, dt, lo, len, (int)(t % ZLM_SUMSQ_LANES));
}

/* One thread per chunk: part [nchunks]. */
__global__ void sumsq_chunks_kernel(const void *x, int dt, int64_t n, int64_t nchunks, const double *lanes,
                                    double *part)
{
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= nchunks) return;
    int64_t lo = c * ZLM_SUMSQ_CHUNK;
    int64_t len = n - lo < ZLM_SUMSQ_CHUNK ? n - lo : ZLM_SUMSQ_CHUNK;
    part[c] = zlm_sumsq_chunk(x, dt, lo, len, lanes + c * ZLM_SUMSQ_LANES);
}

__global__ void scale_kernel(void *x, int dt, int64_t n, float f)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        zlm_scale(x, dt, i, f);
}

static unsigned grid_of(int64_t threads) { return (unsigned)((threads + ZLK_THREADS - 1) / ZLK_THREADS); }

extern "C" int zlk_cuda_nonfinite(const void *x, int dt, int64_t n, int *flag, void *stream)
{
    if (n <= 0) return 0;
    nonfinite_kernel<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(x, dt, n, flag);
    return zlk_launched();
}

extern "C" int zlk_cuda_sumsq(const void *x, int dt, int64_t n, double *lanes, double *part, void *stream)
{
    if (n <= 0) return 0;
    int64_t nchunks = ZLK_SUMSQ_CHUNKS(n);
    sumsq_lanes_kernel<<<grid_of(nchunks * ZLM_SUMSQ_LANES), ZLK_THREADS, 0, zlk_stream(stream)>>>(x, dt, n, nchunks,
                                                                                                   lanes);
    int err = zlk_launched();
    if (err) return err;
    sumsq_chunks_kernel<<<grid_of(nchunks), ZLK_THREADS, 0, zlk_stream(stream)>>>(x, dt, n, nchunks, lanes, part);
    return zlk_launched();
}

extern "C" int zlk_cuda_scale(void *x, int dt, int64_t n, float f, void *stream)
{
    if (n <= 0) return 0;
    scale_kernel<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(x, dt, n, f);
    return zlk_launched();
}
