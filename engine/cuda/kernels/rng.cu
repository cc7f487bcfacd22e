/* The generator's draws straight into a device tensor (core's rand primitive
 * on a CUDA device): one counter per element, math/rng.h's value, so a
 * uniform tensor holds the host's bits for the same seed and offset. */
#include "common.cuh"
#include "../../math/convert.h"
#include "../../math/rng.h"

__global__ void rand_fill(int64_t n, bool normal, double a, double b, uint64_t seed, uint64_t offset, void *out,
                          int dt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        zlm_store(out, dt, i, zlm_rand_value(normal, a, b, seed, offset + (uint64_t)i));
}

extern "C" int zlk_cuda_rand(int64_t n, bool normal, double a, double b, uint64_t seed, uint64_t offset, void *out,
                             int dt, void *stream)
{
    if (n <= 0) return 0;
    rand_fill<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, normal, a, b, seed, offset, out, dt);
    return zlk_launched();
}
