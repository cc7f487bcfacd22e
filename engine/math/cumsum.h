/* cumsum's running sums (engine/ops/reduce.c): x read as [outer, len,
 * inner], fibre f = o * inner + i the len elements of one (o, i), summed
 * along the fibre in double from its start (or, reverse, its end: the
 * gradient), each partial sum rounded to f32 as torch's CPU does. Fibres
 * are apart, so a kernel takes one a thread with the host's bits. */
#ifndef ZL_MATH_CUMSUM_H
#define ZL_MATH_CUMSUM_H

#include "hd.h"

static inline ZL_HD void zlm_running_sum_fibre(int64_t f, int64_t len, int64_t inner, bool reverse, const float *x,
                                               float *out)
{
    int64_t o = f / inner, i = f % inner;
    double acc = 0;
    for (int64_t s = 0; s < len; s++) {
        int64_t k = reverse ? len - 1 - s : s, at = (o * len + k) * inner + i;
        acc += x[at];
        out[at] = (float)acc;
    }
}

#endif
