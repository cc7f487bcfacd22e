/* The CPU's dropout kernels: math/dropout.h's draw per element. */
#include <math.h>
#include "kernels.h"
#include "../../math/dropout.h"

/* The CPU's kernels (ops/cpu/kernels.h): keep [n] = the uniform draw at
 * counter offset + i (key seed) >= p; y [n] = keep ? x * scale : 0. The
 * draws come a block at a time, as zl_tensor_rand makes them. */
zl_status zli_cpu_dropout(int index, int64_t n, uint64_t seed, uint64_t offset, float p, float scale, const float *x,
                          uint8_t *keep, float *y)
{
    (void)index;
    int64_t blocks = (n + ZLI_RAND_BLOCK - 1) / ZLI_RAND_BLOCK;
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t i0 = b * ZLI_RAND_BLOCK, m = n - i0 < ZLI_RAND_BLOCK ? n - i0 : ZLI_RAND_BLOCK;
        float u[ZLI_RAND_BLOCK];
        zli_rand_block(false, 0.0, 1.0, seed, offset + (uint64_t)i0, (int)m, u);
        for (int64_t j = 0; j < m; j++) {
            uint8_t k = u[j] >= p;
            keep[i0 + j] = k;
            y[i0 + j] = zlm_dropout_apply(k, x[i0 + j], scale);
        }
    }
    return ZL_OK;
}

zl_status zli_cpu_dropout_backward(int index, int64_t n, const uint8_t *keep, const float *g, float scale, float *gx)
{
    (void)index;
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) gx[i] = zlm_dropout_apply(keep[i], g[i], scale);
    return ZL_OK;
}
