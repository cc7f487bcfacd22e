/* rotary on a device: one thread per output element, each reading its own
 * and its partner's element of x through their strides (math/rotary.h), so
 * a head sliced out of a fused projection needs no copy. */
#include "common.cuh"
#include "../../math/rotary.h"
#include "../../math/strided.h"

__global__ void rotary_elems(int64_t n, int64_t d, zlm_view va, const float *a, zlm_view vc, const float *c,
                             zlm_view vs, const float *s, bool backward, float *y)
{
    int64_t h = d / 2;
    float sign = backward ? 1.0f : -1.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        bool first = i % d < h;
        int64_t p = first ? i + h : i - h;
        y[i] = zlm_rotary(first, a[zlm_view_offset(&va, i)], c[zlm_view_offset(&vc, i)], a[zlm_view_offset(&va, p)],
                          s[zlm_view_offset(&vs, backward ? p : i)], sign);
    }
}

extern "C" int zlk_cuda_rotary(int nd, const int64_t *shape, const float *a, const int64_t *as, const float *c,
                               const int64_t *cs, const float *s, const int64_t *ss, bool backward, float *y,
                               void *stream)
{
    int64_t n = 1;
    for (int k = 0; k < nd; k++) n *= shape[k];
    if (n <= 0) return 0;
    rotary_elems<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(
        n, shape[nd - 1], zlm_view_over(nd, shape, as), a, zlm_view_over(nd, shape, cs), c, zlm_view_over(nd, shape, ss),
        s, backward, y);
    return zlk_launched();
}
