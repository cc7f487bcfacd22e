/* where and masked_fill on a device: one thread an output element, the
 * bytes of the source its condition picks (math/select.h), any dtype. */
#include "common.cuh"
#include "../../math/select.h"

__global__ void select_elems(int64_t n, zlm_select s, const uint8_t *cond, const void *a, const void *b, int es,
                             void *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        zlm_select_elem(&s, cond, a, b, es, out, i);
}

extern "C" int zlk_cuda_select(const zlm_select *s, const uint8_t *cond, const void *a, const void *b, int es,
                               void *out, void *stream)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
    if (n <= 0) return 0;
    select_elems<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(n, *s, cond, a, b, es, out);
    return zlk_launched();
}
