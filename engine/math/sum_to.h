/* The sum of a gradient down to a broadcast operand's shape, per output
 * element, in exactly the order and precision of the CPU's zli_sum_to_shape
 * (ops/cpu/reduce.c): rows in row-major order, a reduced last dimension
 * summed along the row first, all in f32. */
#ifndef ZL_MATH_SUM_TO_H
#define ZL_MATH_SUM_TO_H

#include "hd.h"

/* g [shape] contiguous f32, nd dims (1..8); red[d] nonzero where the output
 * has size 1 (or no dim) and g does not. Output element j (row-major over the
 * kept dims, reduced ones of size 1) of the sum. */
static inline ZL_HD float zlm_sum_to_elem(const float *g, int nd, const int64_t *shape, const int *red, int64_t j)
{
    int64_t kept[8], nred = 1;
    /* j's coordinate along each kept dim, innermost first. */
    for (int d = nd - 1; d >= 0; d--) {
        if (red[d]) { kept[d] = 0; nred *= d < nd - 1 ? shape[d] : 1; continue; }
        kept[d] = j % shape[d];
        j /= shape[d];
    }
    int64_t inner = shape[nd - 1];
    float acc = 0.0f;
    for (int64_t c = 0; c < nred; c++) {
        /* The c-th combination of the reduced outer dims, row-major. */
        int64_t rem = c, off = 0, step = inner;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = kept[d];
            if (red[d]) {
                i = rem % shape[d];
                rem /= shape[d];
            }
            off += i * step;
            step *= shape[d];
        }
        if (red[nd - 1]) {
            float s = 0.0f;
            for (int64_t k = 0; k < inner; k++) s += g[off + k];
            acc += s;
        } else {
            acc += g[off + kept[nd - 1]];
        }
    }
    return acc;
}

/* Lane l of `lanes` of column j of g [rows, cols] summed over rows: rows l,
 * l + lanes, ... added in double. A GPU block adds a column's lanes in lane
 * order (kernels/sum_to.cu), so its bits are the same every run; the double
 * sums keep them within an f32 rounding of the CPU's in-order f32 sum. */
static inline ZL_HD double zlm_colsum_lane(const float *g, int64_t rows, int64_t cols, int64_t j, int l, int lanes)
{
    double s = 0;
    for (int64_t r = l; r < rows; r += lanes) s += g[r * cols + j];
    return s;
}

#endif
