/* What the kernels share: the block size, grid sizing for grid-stride loops,
 * the stream cast, and deterministic block reductions (a fixed tree of warp
 * shuffles, so a row's sum has the same bits on every run). */
#ifndef ZL_CUDA_KERNELS_COMMON_CUH
#define ZL_CUDA_KERNELS_COMMON_CUH

#include <cuda_runtime.h>
#include "kernels.h"

#define ZLK_THREADS 256

static inline cudaStream_t zlk_stream(void *s) { return (cudaStream_t)s; }

/* Blocks for a grid-stride loop over n elements: enough to fill the device,
 * few enough that each thread does several. */
static inline unsigned zlk_blocks(int64_t n)
{
    int64_t b = (n + ZLK_THREADS - 1) / ZLK_THREADS;
    return (unsigned)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

/* Blocks for a kernel that gives each block whole rows in a grid-stride loop
 * over them: one a row up to 65536 rows, so any count launches. */
static inline unsigned zlk_row_blocks(int64_t rows) { return (unsigned)(rows < 65536 ? (rows > 0 ? rows : 1) : 65536); }

static inline int zlk_launched(void) { return (int)cudaGetLastError(); }

struct zlk_sum {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};

/* The block's combination of every thread's v under op, returned to all
 * threads. blockDim.x must be a multiple of 32, at most 1024. */
template <typename T, typename Op> __device__ T zlk_block_reduce(T v, Op op, T identity)
{
    __shared__ T part[32];
    __shared__ T result;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? part[lane] : identity;
        for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) result = v;
    }
    __syncthreads();
    T r = result;
    __syncthreads();   /* part and result are free for the next reduction */
    return r;
}

#endif
