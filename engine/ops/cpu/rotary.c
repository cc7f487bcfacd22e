/* The CPU's rotary kernel: math/rotary.h's element over rows. */
#include <string.h>
#include "kernels.h"
#include "../../math/rotary.h"

/* y [2h] = a ⊙ c + sign · swap(a) ⊙ s, swap exchanging a's halves, the first
 * half of y reading s at lo, the second at hi:
 * forward (sign -1, lo = s, hi = s + h): y = a cos + rotate_half(a) sin;
 * backward (sign +1, lo = s + h, hi = s): y = g cos + rotate_halfᵀ(g sin).
 * a, c and s are read with strides as, cs and ss; y is contiguous. */
static inline void rotate_row(int64_t h, const float *restrict a, int64_t as, const float *restrict c, int64_t cs,
                              const float *restrict lo, const float *restrict hi, int64_t ss, float sign,
                              float *restrict y)
{
    if (as == 1 && cs == 1 && ss == 1) {
        for (int64_t j = 0; j < h; j++) {
            y[j] = zlm_rotary(true, a[j], c[j], a[j + h], lo[j], sign);
            y[j + h] = zlm_rotary(false, a[j + h], c[j + h], a[j], hi[j], sign);
        }
        return;
    }
    for (int64_t j = 0; j < h; j++) {
        float a0 = a[j * as], a1 = a[(j + h) * as];
        y[j] = zlm_rotary(true, a0, c[j * cs], a1, lo[j * ss], sign);
        y[j + h] = zlm_rotary(false, a1, c[(j + h) * cs], a0, hi[j * ss], sign);
    }
}

/* The CPU's kernel (ops/cpu/kernels.h): y [shape] (contiguous, f32) [out]
 * from a [shape] read through strides as, cos and sin through theirs
 * (broadcast: 0 on stretched dims); rows in parallel. backward: sign and
 * halves of sin as rotate_row says. */
zl_status zli_cpu_rotary(int index, int nd, const int64_t *shape, const float *a, const int64_t *as, const float *c,
                         const int64_t *cs, const float *s, const int64_t *ss, bool backward, float *y)
{
    (void)index;
    int64_t D = shape[nd - 1], h = D / 2, rows = zli_numel(nd - 1, shape);
    float sign = backward ? 1.0f : -1.0f;
    #pragma omp parallel for schedule(static) if (rows * D > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t oa = 0, oc = 0, os = 0, rem = r;
        for (int i = nd - 2; i >= 0; i--) {
            int64_t k = rem % shape[i];
            rem /= shape[i];
            oa += k * as[i];
            oc += k * cs[i];
            os += k * ss[i];
        }
        const float *sr = s + os;
        const float *lo = backward ? sr + h * ss[nd - 1] : sr, *hi = backward ? sr : sr + h * ss[nd - 1];
        rotate_row(h, a + oa, as[nd - 1], c + oc, cs[nd - 1], lo, hi, ss[nd - 1], sign, y + r * D);
    }
    return ZL_OK;
}
