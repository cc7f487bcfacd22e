/* embedding backward (engine/ops/cpu/embedding.c): the gradient of weight
 * [V, D] is the sum of the output gradient's rows into the rows their indices
 * name, added in position order in f32, so a repeated index sums the same way
 * on every device. Forward copies rows, bytes as they are. */
#ifndef ZL_MATH_EMBEDDING_H
#define ZL_MATH_EMBEDDING_H

#include "convert.h"
#include "index_fault.h"

/* Element i of out [n, d] = the element of w [v, d] in row idx[i / d], column
 * i % d; es bytes an element, copied as they are (any dtype). With a fault
 * note, an index outside [0, v) is noted there (by its column 0) and its
 * row's elements are zeros; without, the indices were checked. */
static inline ZL_HD void zlm_embedding_gather(int64_t i, int64_t v, int64_t d, int es, const int64_t *idx,
                                              const void *w, void *out, zlm_index_fault *fault)
{
    int64_t p = i / d, r = idx[p];
    if (fault && !(r >= 0 && r < v)) {
        if (i % d == 0) zlm_index_in(fault, ZLM_FAULT_EMBEDDING, p, r, v, 0);
        memset((char *)out + i * es, 0, (size_t)es);
        return;
    }
    memcpy((char *)out + i * es, (const char *)w + (r * d + i % d) * es, (size_t)es);
}

/* gw_row [out] [lo, hi) += g_row [lo, hi) (g in gdt): one position's share. */
static inline ZL_HD void zlm_embedding_accumulate(int64_t lo, int64_t hi, const void *g_row, int gdt, float *gw_row)
{
    for (int64_t j = lo; j < hi; j++) gw_row[j] += zlm_load(g_row, gdt, j);
}

/* Columns [lo, hi) of gw [v, d] [out] from g [n, d] and idx [n]: zeroed
 * first, unless accumulating into the gradient gw already holds, then each
 * position's row added, but for positions whose index is pad (-1: none) or
 * outside [0, v) (one the forward noted as a fault). A
 * kernel runs disjoint column ranges in parallel: each column sees the
 * positions in order, as the CPU's column blocks do. */
static inline ZL_HD void zlm_embedding_backward_columns(int64_t n, int64_t v, int64_t d, int64_t lo, int64_t hi,
                                                        const int64_t *idx, int64_t pad, const void *g, int gdt,
                                                        float *gw, bool accumulate)
{
    for (int64_t r = 0; r < v && !accumulate; r++)
        for (int64_t j = lo; j < hi; j++) gw[r * d + j] = 0.0f;
    for (int64_t p = 0; p < n; p++)
        if (idx[p] != pad && idx[p] >= 0 && idx[p] < v)
            zlm_embedding_accumulate(lo, hi, (const char *)g + p * d * (gdt == ZLM_F32 ? 4 : 2), gdt,
                                     gw + idx[p] * d);
}

/* Whether position p is the first of its index, whose owner adds the rows of
 * every position with that index (zlm_embedding_backward_owner). */
static inline ZL_HD bool zlm_embedding_first(int64_t p, const int64_t *idx)
{
    for (int64_t q = 0; q < p; q++)
        if (idx[q] == idx[p]) return false;
    return true;
}

/* Row idx[p] of gw [v, d] (zeroed before, or the gradient accumulated into)
 * += the rows of g [n, d] of the positions q >= p with the same index, in
 * position order: for each first position (zlm_embedding_first) whose index
 * is not the padding one, the CPU's sums, bit for bit. A GPU block per
 * position does this for its columns (kernels/embedding.cu). */
static inline ZL_HD void zlm_embedding_backward_owner(int64_t n, int64_t d, int64_t p, const int64_t *idx,
                                                      const void *g, int gdt, float *gw)
{
    size_t es = gdt == ZLM_F32 ? 4 : 2;
    for (int64_t q = p; q < n; q++)
        if (idx[q] == idx[p]) zlm_embedding_accumulate(0, d, (const char *)g + q * d * es, gdt, gw + idx[p] * d);
}

#endif
