/* A gradient summed down to a broadcast operand's shape: one thread per
 * output element, in cuda/math/sum_to.h's order, the CPU's. */
#include "common.cuh"
#include "../math/sum_to.h"

struct sum_to_args {
    int nd;
    int64_t shape[8];
    int red[8];
};

__global__ void sum_to(sum_to_args a, const float *g, float *out, int64_t nout)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < nout; j += (int64_t)gridDim.x * blockDim.x)
        out[j] = zlm_sum_to_elem(g, a.nd, a.shape, a.red, j);
}

extern "C" int zlk_cuda_sum_to(int nd, const int64_t *shape, const int *red, const float *g, float *out, int64_t nout,
                               void *stream)
{
    if (nout <= 0) return 0;
    sum_to_args a = {nd, {0}, {0}};
    for (int d = 0; d < nd; d++) {
        a.shape[d] = shape[d];
        a.red[d] = red[d];
    }
    sum_to<<<zlk_blocks(nout), ZLK_THREADS, 0, zlk_stream(stream)>>>(a, g, out, nout);
    return zlk_launched();
}
