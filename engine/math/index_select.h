/* index_select (engine/ops/cpu/structure.c) on x read as [outer, len, inner]:
 * out [outer, m, inner] holds the rows idx [m] names along the middle dim.
 * Each outer slice is an embedding lookup, forward and backward, so the
 * gradient sums repeated indices in index order, as the CPU does. */
#ifndef ZL_MATH_INDEX_SELECT_H
#define ZL_MATH_INDEX_SELECT_H

#include "embedding.h"

/* Element i of out [outer, m, inner] from x [outer, len, inner]; es bytes an
 * element, copied as they are (any dtype). With a fault note, an index
 * outside [0, len) is noted there (with dim, the input's dim it indexes) and
 * its elements are zeros; without, the indices were checked. */
static inline ZL_HD void zlm_index_select_gather(int64_t i, int64_t len, int64_t m, int64_t inner, int es,
                                                 const int64_t *idx, const void *x, void *out, zlm_index_fault *fault,
                                                 int dim)
{
    int64_t per = m * inner, o = i / per, p = i % per / inner, r = idx[p];
    if (fault && !(r >= 0 && r < len)) {
        if (i % per % inner == 0) zlm_index_in(fault, ZLM_FAULT_INDEX_SELECT, p, r, len, dim);
        memset((char *)out + i * es, 0, (size_t)es);
        return;
    }
    zlm_embedding_gather(i % per, len, inner, es, idx, (const char *)x + o * len * inner * es,
                         (char *)out + o * per * es, NULL);
}

/* Column t % inner of outer slice t / inner of gx [outer, len, inner] [out]:
 * zeroed, then g [outer, m, inner]'s rows added into the rows idx names. */
static inline ZL_HD void zlm_index_select_backward_column(int64_t t, int64_t len, int64_t m, int64_t inner,
                                                          const int64_t *idx, const float *g, float *gx)
{
    int64_t o = t / inner, j = t % inner;
    zlm_embedding_backward_columns(m, len, inner, j, j + 1, idx, -1, g + o * m * inner, ZLM_F32,
                                   gx + o * len * inner, false);
}

#endif
